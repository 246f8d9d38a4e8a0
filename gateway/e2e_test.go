package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/apikey"
	"github.com/mcpgate/mcpgate/store"
)

func callTool(t testing.TB, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("calling %s: %v", name, err)
	}
	return res
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func retrieve(t testing.TB, cs *mcp.ClientSession, query string, limit int) []toolHit {
	t.Helper()
	res := callTool(t, cs, "retrieve_tools", map[string]any{"query": query, "limit": limit})
	if res.IsError {
		t.Fatalf("retrieve_tools %q: %s", query, resultText(res))
	}
	var out struct {
		Tools []toolHit `json:"tools"`
	}
	if err := json.Unmarshal([]byte(resultText(res)), &out); err != nil {
		t.Fatalf("retrieve_tools reply: %v", err)
	}
	return out.Tools
}

func hitNames(hits []toolHit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.Name
	}
	return out
}

// remoteUpstream serves an in-process go-sdk MCP server over Streamable
// HTTP; its tools can change while it runs.
func remoteUpstream(t testing.TB) (string, *mcp.Server) {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "forecast",
		Description: "Report the weather forecast for a city: temperature, rain and wind",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in struct {
		City string `json:"city"`
	}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "sunny in " + in.City}}}, nil, nil
	})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(ts.Close)
	return ts.URL, s
}

func everythingBin() (string, bool) {
	dir := os.Getenv("MCPGATE_NPM_DIR")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "mcpgate", "npm")
	}
	p := filepath.Join(dir, "node_modules", ".bin", "mcp-server-everything")
	_, err := os.Stat(p)
	return p, err == nil
}

func TestEndToEnd(t *testing.T) {
	e := newEnv(t)
	url, _ := remoteUpstream(t)
	e.addEcho(e.admin, "echo1", true, nil)
	e.addRemote(e.admin, "web", url)
	g := e.gateway(nil)
	e.approve(g, "echo1")
	e.approve(g, "web")
	ts := e.serve(g)
	cs, _ := connect(t, ts.URL+"/mcp", e.token(e.alice, apikey.Personal, nil, nil))

	t.Run("retrieve_tools finds a paraphrase", func(t *testing.T) {
		hits := retrieve(t, cs, "send my words back to me", 3)
		if len(hits) == 0 || hits[0].Name != "echo1:echo" {
			t.Fatalf("retrieve_tools = %v, want echo1:echo first", hitNames(hits))
		}
		if hits[0].Call != "call_tool_read" || hits[0].State != ToolApproved {
			t.Errorf("echo hit = %+v, want call_tool_read and approved", hits[0])
		}
		hits = retrieve(t, cs, "will it rain tomorrow in Paris", 3)
		if len(hits) == 0 || hits[0].Name != "web:forecast" {
			t.Fatalf("retrieve_tools = %v, want web:forecast first", hitNames(hits))
		}
	})

	t.Run("variants per annotations", func(t *testing.T) {
		tools := map[string]string{"echo": "read", "add_note": "write", "delete_notes": "destructive"}
		args := map[string]map[string]any{"echo": {"text": "hi"}, "add_note": {"note": "n"}, "delete_notes": {}}
		for tool, need := range tools {
			for _, used := range []string{"read", "write", "destructive"} {
				res := callTool(t, cs, "call_tool_"+used, map[string]any{"name": "echo1:" + tool, "args": args[tool]})
				if used == need {
					if res.IsError {
						t.Errorf("%s via %s: refused: %s", tool, used, resultText(res))
					}
					continue
				}
				if !res.IsError || !strings.Contains(resultText(res), "call_tool_"+need) {
					t.Errorf("%s via %s: got %q (isError %v), want a refusal naming call_tool_%s", tool, used, resultText(res), res.IsError, need)
				}
			}
		}
		res := callTool(t, cs, "call_tool_read", map[string]any{"name": "echo1:echo", "args": map[string]any{"text": "hello"}})
		if got := resultText(res); got != "hello" {
			t.Errorf("echo = %q, want hello", got)
		}
		res = callTool(t, cs, "call_tool_read", map[string]any{"name": "web:forecast", "args": map[string]any{"city": "Oslo"}})
		if got := resultText(res); got != "sunny in Oslo" {
			t.Errorf("forecast = %q (isError %v)", got, res.IsError)
		}
	})

	t.Run("scopes", func(t *testing.T) {
		ro, _ := connect(t, ts.URL+"/mcp", e.token(e.alice, apikey.Agent, []string{"read"}, []string{"*"}))
		res := callTool(t, ro, "call_tool_write", map[string]any{"name": "echo1:add_note", "args": map[string]any{"note": "n"}})
		if !res.IsError || !strings.Contains(resultText(res), `"write" scope`) {
			t.Errorf("write call with a read token: %q, want a refusal naming the write scope", resultText(res))
		}
		res = callTool(t, ro, "call_tool_read", map[string]any{"name": "echo1:echo", "args": map[string]any{"text": "ok"}})
		if res.IsError {
			t.Errorf("read call with a read token refused: %s", resultText(res))
		}
		wr, _ := connect(t, ts.URL+"/mcp", e.token(e.alice, apikey.Agent, []string{"write"}, []string{"*"}))
		res = callTool(t, wr, "call_tool_destructive", map[string]any{"name": "echo1:delete_notes"})
		if !res.IsError || !strings.Contains(resultText(res), `"destructive" scope`) {
			t.Errorf("destructive call with a write token: %q", resultText(res))
		}
		res = callTool(t, wr, "call_tool_write", map[string]any{"name": "echo1:add_note", "args": map[string]any{"note": "n"}})
		if res.IsError {
			t.Errorf("write call with a write token refused: %s", resultText(res))
		}
	})

	t.Run("token limited to one server", func(t *testing.T) {
		only := e.token(e.alice, apikey.Agent, []string{"destructive"}, []string{"echo1"})
		lim, _ := connect(t, ts.URL+"/mcp", only)
		for _, h := range retrieve(t, lim, "weather forecast rain city echo text", 50) {
			if h.Server != "echo1" {
				t.Errorf("limited token sees %s", h.Name)
			}
		}
		res := callTool(t, lim, "call_tool_read", map[string]any{"name": "web:forecast", "args": map[string]any{"city": "x"}})
		if !res.IsError || !strings.Contains(resultText(res), "unknown tool") {
			t.Errorf("limited token calling web:forecast: %q", resultText(res))
		}
		res = callTool(t, lim, "describe_tool", map[string]any{"name": "web:forecast"})
		if !res.IsError {
			t.Errorf("limited token describes web:forecast: %q", resultText(res))
		}
		all, _ := connect(t, ts.URL+"/mcp/all", only)
		lt, err := all.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tl := range lt.Tools {
			names = append(names, tl.Name)
		}
		slices.Sort(names)
		if want := []string{"echo1__add_note", "echo1__delete_notes", "echo1__echo", "echo1__sleep"}; !slices.Equal(names, want) {
			t.Errorf("/mcp/all tools = %v, want %v", names, want)
		}
		res = callTool(t, all, "echo1__echo", map[string]any{"text": "direct"})
		if resultText(res) != "direct" {
			t.Errorf("/mcp/all echo = %q", resultText(res))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if res, err := all.CallTool(ctx, &mcp.CallToolParams{Name: "web__forecast", Arguments: map[string]any{}}); err == nil && !res.IsError {
			t.Errorf("/mcp/all called web__forecast through a token limited to echo1: %q", resultText(res))
		}
	})

	t.Run("describe_tool", func(t *testing.T) {
		res := callTool(t, cs, "describe_tool", map[string]any{"name": "echo1:add_note"})
		var h toolHit
		if err := json.Unmarshal([]byte(resultText(res)), &h); err != nil || h.Call != "call_tool_write" || h.InputSchema == nil {
			t.Errorf("describe_tool = %s (%v)", resultText(res), err)
		}
	})

	t.Run("unauthenticated", func(t *testing.T) {
		resp, err := http.Post(ts.URL+"/mcp", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("no token: status %d, want 401", resp.StatusCode)
		}
	})
}

func TestServerEverything(t *testing.T) {
	bin, ok := everythingBin()
	require(t, ok, "server-everything not installed (run .ci/npm-servers.sh)")
	e := newEnv(t)
	if _, err := e.st.CreateServer(context.Background(), store.Actor{UserID: e.admin.ID}, store.Server{
		Name: "everything", Protocol: "stdio", Command: bin, Enabled: true, Quarantined: true, Shared: true, OwnerID: e.admin.ID,
	}); err != nil {
		t.Fatal(err)
	}
	g := e.gateway(nil)
	e.approve(g, "everything")
	cs, _ := connect(t, e.serve(g).URL+"/mcp", e.token(e.admin, apikey.Personal, nil, nil))
	res := callTool(t, cs, "describe_tool", map[string]any{"name": "everything:echo"})
	var h toolHit
	if err := json.Unmarshal([]byte(resultText(res)), &h); err != nil || h.Call == "" {
		t.Fatalf("describe everything:echo: %s", resultText(res))
	}
	res = callTool(t, cs, h.Call, map[string]any{"name": "everything:echo", "args": map[string]any{"message": "via gateway"}})
	if res.IsError || !strings.Contains(resultText(res), "via gateway") {
		t.Errorf("everything:echo = %q (isError %v)", resultText(res), res.IsError)
	}
}

func TestPersonalServers(t *testing.T) {
	e := newEnv(t)
	e.addEcho(e.alice, "alice-notes", false, nil)
	e.addEcho(e.admin, "shared", true, nil)
	g := e.gateway(nil)
	waitKnown(t, g, "alice-notes")
	if st := g.Status("alice-notes").State; st != StateQuarantined {
		t.Errorf("new personal server state %q, want quarantined", st)
	}
	if inst, _ := g.sup.Instance("alice-notes"); inst.State() != "stopped" {
		t.Errorf("personal server started before any use: %s", inst.State())
	}
	// The owner approves a personal server (MayManage), which starts it.
	srv, err := e.st.GetServer(context.Background(), store.Scope{UserID: e.alice.ID}, "alice-notes")
	if err != nil || !MayManage(Caller{UserID: e.alice.ID}, srv) || MayManage(Caller{UserID: e.bob.ID}, srv) {
		t.Fatalf("MayManage for the owner and another member is wrong (%v)", err)
	}
	if _, err := g.Approve(context.Background(), store.Actor{UserID: e.alice.ID}, "alice-notes"); err != nil {
		t.Fatal(err)
	}
	e.approve(g, "shared")
	ts := e.serve(g)

	alice, aliceRec := connect(t, ts.URL+"/mcp", e.token(e.alice, apikey.Agent, nil, nil))
	bobToken := e.token(e.bob, apikey.Agent, nil, nil)
	bob, _ := connect(t, ts.URL+"/mcp", bobToken)
	admin, _ := connect(t, ts.URL+"/mcp", e.token(e.admin, apikey.Personal, nil, nil))

	if hits := retrieve(t, alice, "store a short note", 20); !slices.Contains(hitNames(hits), "alice-notes:add_note") {
		t.Errorf("alice does not find her own server's tool: %v", hitNames(hits))
	}
	res := callTool(t, alice, "call_tool_write", map[string]any{"name": "alice-notes:add_note", "args": map[string]any{"note": "mine"}})
	if res.IsError {
		t.Fatalf("alice calling her server: %s", resultText(res))
	}
	for who, cs := range map[string]*mcp.ClientSession{"bob": bob, "admin": admin} {
		for _, h := range retrieve(t, cs, "store a short note echo text delete", 50) {
			if h.Server == "alice-notes" {
				t.Errorf("%s sees %s", who, h.Name)
			}
		}
		res := callTool(t, cs, "call_tool_write", map[string]any{"name": "alice-notes:add_note", "args": map[string]any{"note": "theirs"}})
		if !res.IsError || !strings.Contains(resultText(res), "unknown tool") {
			t.Errorf("%s calling alice's server: %q", who, resultText(res))
		}
	}
	bobAll, _ := connect(t, ts.URL+"/mcp/all", bobToken)
	lt, err := bobAll.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range lt.Tools {
		if strings.HasPrefix(tl.Name, "alice-notes") {
			t.Errorf("bob's /mcp/all lists %s", tl.Name)
		}
	}

	t.Run("first use is a direct call", func(t *testing.T) {
		// A replica where alice's server never ran: no search first.
		g2 := e.gateway(nil)
		cs, _ := connect(t, e.serve(g2).URL+"/mcp", e.token(e.alice, apikey.Personal, nil, nil))
		res := callTool(t, cs, "call_tool_read", map[string]any{"name": "alice-notes:echo", "args": map[string]any{"text": "cold"}})
		if resultText(res) != "cold" {
			t.Errorf("first call to a cold personal server: %q", resultText(res))
		}
	})

	t.Run("session id bound to its user", func(t *testing.T) {
		sid := aliceRec.sessionID()
		if sid == "" {
			t.Fatal("the gateway issued no Mcp-Session-Id")
		}
		aliceRec.mu.Lock()
		sent := aliceRec.sent
		aliceRec.mu.Unlock()
		if sent == 0 {
			t.Error("the SDK client never sent the session id back: binding would be moot")
		}
		post := func(token, sid string) int {
			body := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`
			req, _ := http.NewRequest(http.MethodPost, ts.URL+"/mcp", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Mcp-Session-Id", sid)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		if code := post(bobToken, sid); code != http.StatusNotFound {
			t.Errorf("alice's session id with bob's token: status %d, want 404", code)
		}
		if code := post(e.token(e.alice, apikey.Personal, nil, nil), sid); code != http.StatusOK {
			t.Errorf("alice's session id with another of her tokens: status %d, want 200", code)
		}
		if code := post(bobToken, sid[:len(sid)-2]+"AA"); code != http.StatusNotFound {
			t.Errorf("forged session id: status %d, want 404", code)
		}
		// The SDK client carries on with its own session.
		if res := callTool(t, alice, "call_tool_read", map[string]any{"name": "alice-notes:echo", "args": map[string]any{"text": "still"}}); resultText(res) != "still" {
			t.Errorf("alice after the refusals: %q", resultText(res))
		}
	})

}
