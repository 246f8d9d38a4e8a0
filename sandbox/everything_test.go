package sandbox_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// everythingIndex is where .ci/npm-servers.sh installs the reference server.
func everythingIndex() string {
	dir := os.Getenv("MCPGATE_NPM_DIR")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "mcpgate", "npm")
	}
	return filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
}

// TestServerEverything is RELIABILITY-TESTS E13 for node: the reference
// server, run by node under the production policy (uid nobody, no
// network, RLIMIT_DATA 1 GiB, home and tmp in its own dirs), answers
// initialize, tools/list and tools/call, and sees none of the gateway's
// environment.
func TestServerEverything(t *testing.T) {
	index := everythingIndex()
	_, err := os.Stat(index)
	need(t, err == nil, "@modelcontextprotocol/server-everything is not installed (run .ci/npm-servers.sh): %v", err)
	_, err = exec.LookPath("node")
	need(t, err == nil, "node is not installed: %v", err)
	w := newWorld(t)
	t.Setenv("MCPGATE_ADMIN_TOKEN", "gateway-only")

	// A server's packages live in its own dirs (npx would put them in its
	// home); the npm cache under root's home is not reachable as nobody.
	modules := filepath.Join(w.alpha.Work, "node_modules")
	src := strings.TrimSuffix(index, filepath.Join("@modelcontextprotocol", "server-everything", "dist", "index.js"))
	if out, err := exec.Command("cp", "-a", src, modules).CombinedOutput(); err != nil {
		t.Fatalf("copying node_modules: %v\n%s", err, out)
	}
	if out, err := exec.Command("chown", "-R", "65534:65534", modules).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v\n%s", err, out)
	}

	p := w.policy(w.alpha, nobody)
	p.NoFile = 1024
	entry := filepath.Join(modules, "@modelcontextprotocol", "server-everything", "dist", "index.js")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := connect(ctx, t, sandboxed(t, p, "node", entry, "stdio"))
	defer s.close()

	init := s.InitializeResult()
	t.Logf("initialized: %s %s, protocol %s", init.ServerInfo.Name, init.ServerInfo.Version, init.ProtocolVersion)

	tools, err := s.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v\nstderr: %s", err, s.stderr)
	}
	names := map[string]bool{}
	for _, tool := range tools.Tools {
		names[tool.Name] = true
	}
	if !names["echo"] || !names["get-env"] {
		t.Fatalf("tools/list lacks echo or get-env: %v", names)
	}

	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "from the sandbox"}})
	if err != nil {
		t.Fatalf("tools/call echo: %v\nstderr: %s", err, s.stderr)
	}
	if got := text(res); res.IsError || got != "Echo: from the sandbox" {
		t.Errorf("echo returned %q (isError %v)", got, res.IsError)
	}

	res, err = s.CallTool(ctx, &mcp.CallToolParams{Name: "get-env", Arguments: map[string]any{}})
	if err != nil {
		t.Fatalf("tools/call get-env: %v", err)
	}
	env := text(res)
	if strings.Contains(env, "MCPGATE_ADMIN_TOKEN") || !strings.Contains(env, `"SERVER_TOKEN"`) ||
		!strings.Contains(env, w.alpha.Home) {
		t.Errorf("server environment is not the configured one plus HOME, TMPDIR, PATH, LANG:\n%s", env)
	}
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
