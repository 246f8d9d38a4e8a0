package sandbox_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/mcpgate/mcpgate/sandbox"
)

// wrapper is a world-executable copy of this test binary, which acts as the
// gateway's `self`: the go test build dir is 0700, and a sandboxed child
// running as another uid must be able to exec the wrapper.
var wrapper string

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.ExecArg {
		os.Exit(sandbox.Exec(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == spawnerArg {
		os.Exit(spawner(os.Args[2:]))
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "mcpgate-sandbox-self-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	wrapper = filepath.Join(dir, "mcpgate-test")
	if err := copyFile(self, wrapper, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// need skips the test when a resource of this machine is missing, or fails
// it under MCPGATE_TEST_STRICT=1 (CI), where every resource must be there.
func need(t testing.TB, ok bool, format string, a ...any) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("MCPGATE_TEST_STRICT") == "1" {
		t.Fatalf("missing in strict mode: "+format, a...)
	}
	t.Skipf(format, a...)
}
