package sandbox_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/sandbox"
)

// TestFailClosed is RELIABILITY-TESTS E14: below the ABI floor, or with a
// canary that the ruleset does not deny, the wrapper refuses with 126 and
// the command never runs. The first case runs the same command with a sound
// policy, so a missing marker means "refused", not "could not have run".
func TestFailClosed(t *testing.T) {
	abi, err := sandbox.ABI()
	need(t, err == nil && abi >= 1, "needs Landlock (%v)", err)
	w := newWorld(t)
	d, err := sandbox.Prepare(w.data, "failclosed")
	if err != nil {
		t.Fatal(err)
	}
	inAllowlist := filepath.Join(d.Work, "canary")
	writeFile(t, inAllowlist, 0o644, "granted")

	tests := []struct {
		name     string
		edit     func(*sandbox.Policy)
		wantCode int
		wantRun  bool
		wantErr  string
	}{
		{"sound policy runs", func(*sandbox.Policy) {}, 0, true, ""},
		{"ABI below floor", func(p *sandbox.Policy) { p.FakeABI, p.MinABI = 3, 6 }, 126, false, "below the floor 6; failing closed"},
		{"no landlock", func(p *sandbox.Policy) { p.FakeABI = -1 }, 126, false, "failing closed"},
		{"canary inside the allowlist", func(p *sandbox.Policy) { p.Canary = inAllowlist }, 126, false, "confinement is not in force"},
		{"canary missing", func(p *sandbox.Policy) { p.Canary = filepath.Join(w.data, "gateway", "absent") }, 126, false, "must exist"},
		{"degraded when not failing closed", func(p *sandbox.Policy) { p.FakeABI, p.MinABI, p.FailClosed = 3, 6, false }, 0, true, "DEGRADED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			marker := filepath.Join(d.Work, "ran-"+strings.ReplaceAll(tt.name, " ", "-"))
			p := w.policy(d, 0)
			p.MinABI = 1
			tt.edit(&p)
			_, stderr, code := runCmd(t, sandboxed(t, p, "/bin/sh", "-c", `echo ran > "$0"`, marker))
			_, statErr := os.Stat(marker)
			ran := statErr == nil
			t.Logf("exit %d, ran %v, stderr %q", code, ran, stderr)
			if code != tt.wantCode || ran != tt.wantRun {
				t.Errorf("exit %d, command ran %v; want exit %d, ran %v", code, ran, tt.wantCode, tt.wantRun)
			}
			if !strings.Contains(stderr, tt.wantErr) {
				t.Errorf("stderr %q does not say %q", stderr, tt.wantErr)
			}
		})
	}
}

// TestCommandRefusesExposingGrants checks the parent-side validation: a
// grant on the data dir or one of its ancestors would make it readable.
func TestCommandRefusesExposingGrants(t *testing.T) {
	data := t.TempDir()
	base := sandbox.Policy{DataDir: data, Canary: filepath.Join(data, "sandboxes", ".canary")}
	for _, grant := range []string{"/", filepath.Dir(data), data} {
		p := base
		p.Read = []string{grant}
		if _, err := sandbox.Command("/bin/true", p, []string{"true"}); err == nil {
			t.Errorf("read grant %s was accepted", grant)
		}
		p = base
		p.Write = []string{grant}
		if _, err := sandbox.Command("/bin/true", p, []string{"true"}); err == nil {
			t.Errorf("write grant %s was accepted", grant)
		}
	}
	p := base
	p.Write = []string{filepath.Join(data, "sandboxes", "x", "work")}
	if _, err := sandbox.Command("/bin/true", p, []string{"true"}); err != nil {
		t.Errorf("a server dir below the data dir was refused: %v", err)
	}
}
