package sandbox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/sandbox"
)

// TestLandlockTsyncTagFailsClosed is RELIABILITY-TESTS E15 seen from the
// wrapper: built with go-landlock's landlocktsync tag, Restrict silently
// does nothing on kernels below ABI 8. The canary check must catch that
// and refuse, rather than run the server unconfined.
func TestLandlockTsyncTagFailsClosed(t *testing.T) {
	abi, err := sandbox.ABI()
	need(t, err == nil && abi >= 1, "needs Landlock (%v)", err)
	_, err = exec.LookPath("go")
	need(t, err == nil, "needs the go tool to build the tagged wrapper: %v", err)
	w := newWorld(t)

	bin := filepath.Join(w.base, "wrapper-tsync")
	build := exec.Command("go", "build", "-tags", "landlocktsync", "-o", bin, "./cmd/mcpgate-sandbox")
	build.Dir = ".."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the tagged wrapper: %v\n%s", err, out)
	}

	marker := filepath.Join(w.alpha.Work, "ran")
	cmd, err := sandbox.Command(bin, w.policy(w.alpha, nobody), []string{"/bin/sh", "-c", `echo ran > "$0"`, marker})
	if err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runCmd(t, cmd)
	_, statErr := os.Stat(marker)
	t.Logf("ABI %d: exit %d, ran %v, stderr %q", abi, code, statErr == nil, stderr)
	if abi >= 8 {
		if code != 0 || statErr != nil {
			t.Errorf("on ABI %d the tagged wrapper must work: exit %d", abi, code)
		}
		return
	}
	if code != sandbox.ExitRefused || statErr == nil || !strings.Contains(stderr, "confinement is not in force") {
		t.Errorf("exit %d, ran %v, stderr %q; want exit 126, the command not run, the canary named", code, statErr == nil, stderr)
	}
}
