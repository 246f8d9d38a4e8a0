package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/internal/testbin"
)

func mcpgate(t *testing.T, data string, args ...string) string {
	t.Helper()
	cmd := exec.Command(testbin.Build(t, "cmd/mcpgate"), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "MCPGATE_DATA_DIR=" + data}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mcpgate %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// C5 against a running gateway: add a key, re-encrypt, retire the old key;
// the gateway keeps reading every secret throughout.
func TestSecretRotationWhileServing(t *testing.T) {
	data := dataDir(t)
	g := startGateway(t, "MCPGATE_DATA_DIR="+data)
	if c, b := g.request(t, "POST", "/api/v1/servers", `{"name":"keyed","command":"npx","env":{"API_KEY":"rotate-me-1234567"}}`); c != 201 {
		t.Fatalf("create: %d %s", c, b)
	}
	if out := mcpgate(t, data, "secrets", "add-key"); !strings.Contains(out, "k2") {
		t.Fatalf("add-key: %s", out)
	}
	if out := mcpgate(t, data, "secrets", "rotate", "--batch", "1"); !strings.Contains(out, "re-encrypted") {
		t.Fatalf("rotate: %s", out)
	}
	// The gateway picks up k2 to read what was re-encrypted.
	if c, b := g.request(t, "GET", "/api/v1/servers/keyed", ""); c != 200 || !strings.Contains(string(b), "••••67") {
		t.Fatalf("read after rotation: %d %s", c, b)
	}
	mcpgate(t, data, "secrets", "retire", "k1")
	status := mcpgate(t, data, "secrets", "status")
	if !strings.Contains(status, "k1       retired  0 values") || !strings.Contains(status, "k2       primary") {
		t.Fatalf("status after retiring k1:\n%s", status)
	}
	if c, b := g.request(t, "PATCH", "/api/v1/servers/keyed", `{"env":{"OTHER":"x"}}`); c != 200 {
		t.Fatalf("write after retiring k1: %d %s", c, b)
	}
	if c, _ := g.request(t, "GET", "/api/v1/servers/keyed", ""); c != 200 {
		t.Fatalf("read after retiring k1: %d", c)
	}
}
