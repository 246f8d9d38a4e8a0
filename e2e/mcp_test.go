package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/testbin"
	"github.com/mcpgate/mcpgate/sandbox"
)

type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// mcpClient connects the official go-sdk client to a gateway's /mcp.
func mcpClient(t *testing.T, baseURL, token string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: baseURL + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatalf("connecting to %s/mcp: %v", baseURL, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callText(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// addEcho registers mcpecho as a shared stdio server in the given mode,
// approves it and returns an agent token with the given scopes.
func addEcho(t *testing.T, g *gateway, name, mode string, scopes string) string {
	t.Helper()
	body := fmt.Sprintf(`{"name":%q,"command":%q,"shared":true,"isolation":{"mode_override":%q}}`,
		name, testbin.Build(t, "internal/cmd/mcpecho"), mode)
	if c, b := g.request(t, "POST", "/api/v1/servers", body); c != 201 {
		t.Fatalf("creating %s: %d %s", name, c, b)
	}
	if c, b := g.request(t, "POST", "/api/v1/servers/"+name+"/approve", ""); c != 200 {
		t.Fatalf("approving %s: %d %s", name, c, b)
	}
	c, b := g.request(t, "POST", "/api/v1/tokens", `{"name":"agent","scopes":`+scopes+`}`)
	if c != 201 {
		t.Fatalf("token: %d %s", c, b)
	}
	var tok struct{ Token string }
	json.Unmarshal(b, &tok)
	return tok.Token
}

// childUID finds a running mcpecho whose command line names the binary and
// returns its uid.
func childUIDs(t *testing.T, binary string) []int {
	t.Helper()
	var uids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || exe != binary {
			continue
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(st), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				uid, _ := strconv.Atoi(f[1])
				uids = append(uids, uid)
			}
		}
	}
	return uids
}

// The whole path through the built binary: REST creates and approves a
// stdio server in sandbox mode, an MCP client finds and calls its tool, and
// the child really runs confined, as the sandbox uid.
func TestMCPThroughTheBinary(t *testing.T) {
	if _, ok := sandbox.Available(sandbox.RecommendedMinABI); !ok {
		need(t, "Landlock ABI below %d", sandbox.RecommendedMinABI)
	}
	g := startGateway(t, "MCPGATE_DATA_DIR="+dataDir(t))
	token := addEcho(t, g, "echo", "sandbox", `["read"]`)
	cs := mcpClient(t, "http://"+g.addr, token)
	ctx := context.Background()

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "retrieve_tools", Arguments: map[string]any{"query": "send my words back to me"}})
	if err != nil || res.IsError || !strings.Contains(callText(t, res), "echo:echo") {
		t.Fatalf("retrieve_tools: %v %s", err, callText(t, res))
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "call_tool_read", Arguments: map[string]any{"name": "echo:echo", "args": map[string]any{"text": "confined"}}})
	if err != nil || res.IsError || !strings.Contains(callText(t, res), "confined") {
		t.Fatalf("call_tool_read: %v %s", err, callText(t, res))
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "call_tool_destructive", Arguments: map[string]any{"name": "echo:delete_notes", "args": map[string]any{}}})
	if err != nil || !res.IsError || !strings.Contains(callText(t, res), "destructive") {
		t.Fatalf("a read token called a destructive tool: %v %s", err, callText(t, res))
	}
	if os.Geteuid() == 0 {
		uids := childUIDs(t, testbin.Build(t, "internal/cmd/mcpecho"))
		if len(uids) == 0 {
			t.Fatal("no mcpecho child found")
		}
		for _, uid := range uids {
			if uid != 65534 {
				t.Errorf("a sandboxed child runs as uid %d, want 65534", uid)
			}
		}
	}
	c, b := g.request(t, "GET", "/api/v1/servers/echo", "")
	if c != 200 || !strings.Contains(string(b), `"state":"ready"`) || !strings.Contains(string(b), `"source":"server-mode"`) {
		t.Fatalf("server object: %d %s", c, b)
	}
	_, b = g.request(t, "GET", "/metrics", "")
	for _, want := range []string{
		`mcpgate_tool_calls_total{server="echo",variant="read",outcome="ok"} 1`,
		`mcpgate_tool_calls_total{server="echo",variant="destructive",outcome="refused"} 1`,
		`mcpgate_upstream_up{server="echo",state="ready"} 1`,
		`mcpgate_upstream_starts{server="echo"} 1`,
		`mcpgate_db_pool_connections{state="total"}`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// SIGTERM during a long tool call: the call completes, the gateway exits
// 0, and nothing of the child remains.
func TestSIGTERMDuringLongCall(t *testing.T) {
	data := dataDir(t)
	g := startGateway(t, "MCPGATE_DATA_DIR="+data, "MCPGATE_SHUTDOWN_TIMEOUT=20s")
	token := addEcho(t, g, "slow", "none", `["read"]`)
	cs := mcpClient(t, "http://"+g.addr, token)
	echo := testbin.Build(t, "internal/cmd/mcpecho")

	done := make(chan error, 1)
	var res *mcp.CallToolResult
	go func() {
		var err error
		res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "call_tool_read",
			Arguments: map[string]any{"name": "slow:sleep", "args": map[string]any{"millis": 1500}}})
		done <- err
	}()
	// The call is in flight once the child says so on stderr, which the
	// gateway keeps as the server's log.
	waitFor(t, 10*time.Second, "the call to reach the child", func() (bool, error) {
		_, b := g.request(t, "GET", "/api/v1/servers/slow/logs?tail=20", "")
		return strings.Contains(string(b), "sleep: started"), nil
	})
	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil || res.IsError || callText(t, res) != "slept" {
			t.Fatalf("the in-flight call: %v %+v", err, res)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the in-flight call did not finish")
	}
	select {
	case err := <-g.done:
		g.done <- err
		if err != nil {
			t.Fatalf("gateway exit: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("gateway did not exit")
	}
	if uids := childUIDs(t, echo); len(uids) > 0 {
		t.Fatalf("children left after shutdown: %v", uids)
	}
	if _, err := os.Stat(filepath.Join(data, "pg", "data", "postmaster.pid")); err == nil {
		t.Error("the private PostgreSQL did not stop")
	}
}
