package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/internal/testbin"
)

func runDoctor(t *testing.T, data string, extraEnv ...string) (exitCode int, report map[string]any) {
	t.Helper()
	cmd := exec.Command(testbin.Build(t, "cmd/mcpgate"), "doctor", "--json")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "MCPGATE_DATA_DIR=" + data, "DOCKER_HOST=" + os.Getenv("DOCKER_HOST")}, extraEnv...)
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("doctor --json printed %q: %v", out, err)
	}
	return cmd.ProcessState.ExitCode(), report
}

// With the admin socket on and a stdio server in sandbox mode, doctor names
// that server in a warning and exits non-zero; a clean setup exits 0.
func TestDoctor(t *testing.T) {
	clean := dataDir(t)
	code, rep := runDoctor(t, clean)
	if code != 0 {
		t.Fatalf("doctor on a clean setup exited %d: %v", code, rep)
	}

	data := dataDir(t)
	g := startGateway(t, "MCPGATE_DATA_DIR="+data, "MCPGATE_ENABLE_SOCKET=true")
	if c, body := g.request(t, "POST", "/api/v1/servers", `{"name":"risky","command":"npx","args":["-y","pkg"],"isolation":{"mode_override":"sandbox"}}`); c != 201 {
		t.Fatalf("create: %d %s", c, body)
	}
	c, body := g.request(t, "GET", "/api/v1/doctor", "")
	if c != 200 || !strings.Contains(string(body), "risky") || !strings.Contains(string(body), `"ok":false`) {
		t.Fatalf("GET /doctor = %d %s", c, body)
	}
	g.stop(t)

	code, rep = runDoctor(t, data, "MCPGATE_ENABLE_SOCKET=true")
	if code == 0 {
		t.Fatalf("doctor exited 0 with the socket on and a sandboxed stdio server: %v", rep)
	}
	found := false
	for _, c := range rep["checks"].([]any) {
		m := c.(map[string]any)
		if m["name"] == "server risky" && m["status"] == "warn" && strings.Contains(m["detail"].(string), "admin socket") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no warning names server risky: %v", rep)
	}
}
