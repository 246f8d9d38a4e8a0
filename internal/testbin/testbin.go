// Package testbin builds the project's own commands for tests, once per test
// process, as static binaries that also run inside a FROM scratch image.
package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	built = map[string]string{}
	dir   string
)

// Build compiles the main package pkg (an import path below the module, for
// example "internal/cmd/mcpecho") and returns the binary's path. The binary
// lives until the process exits; tests share it.
func Build(tb testing.TB, pkg string) string {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "mcpgate-testbin-")
		if err != nil {
			tb.Fatalf("testbin: %v", err)
		}
		// World-readable so a child running as another uid can exec it.
		if err := os.Chmod(d, 0o755); err != nil {
			tb.Fatalf("testbin: %v", err)
		}
		dir = d
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./"+pkg)
	cmd.Dir = moduleRoot(tb)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("testbin: building %s: %v\n%s", pkg, err, b)
	}
	built[pkg] = out
	return out
}

func moduleRoot(tb testing.TB) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		tb.Fatal("testbin: cannot locate module root")
	}
	return strings.TrimSuffix(filepath.Dir(file), filepath.Join("internal", "testbin"))
}
