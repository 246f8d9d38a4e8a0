package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/apikey"
	"github.com/mcpgate/mcpgate/settings"
	"github.com/mcpgate/mcpgate/store"
)

// fakeAdmin stands in for the REST handlers the HTTP layer wires in; it
// records what reached it and stores through the same store calls.
type fakeAdmin struct {
	e     *env
	calls atomic.Int64
}

func (f *fakeAdmin) CreateServer(ctx context.Context, c Caller, body []byte) ([]byte, error) {
	f.calls.Add(1)
	var in struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(body, &in); err != nil || in.Name == "" {
		return nil, errors.New("name is required")
	}
	s, err := f.e.st.CreateServer(ctx, store.Actor{UserID: c.UserID}, store.Server{Name: in.Name, Protocol: "stdio",
		Command: f.e.echo, Enabled: true, Quarantined: true, OwnerID: c.UserID})
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{"name": s.Name, "quarantined": s.Quarantined})
}

func (f *fakeAdmin) PatchServer(ctx context.Context, c Caller, name string, patch []byte) ([]byte, error) {
	f.calls.Add(1)
	return nil, errors.New(`"command" cannot be empty`)
}

func (f *fakeAdmin) DeleteServer(ctx context.Context, c Caller, name string) error {
	f.calls.Add(1)
	return f.e.st.DeleteServer(ctx, store.Actor{UserID: c.UserID}, store.Scope{UserID: c.UserID, All: c.Admin}, name)
}

func TestUpstreamServersTool(t *testing.T) {
	e := newEnv(t)
	e.addEcho(e.admin, "shared1", true, nil)
	e.addEcho(e.bob, "bobs", false, nil)
	admin := &fakeAdmin{e: e}
	g := e.gateway(func(o *Options) { o.Admin = admin })
	e.approve(g, "shared1")
	url := e.serve(g).URL + "/mcp"
	member, _ := connect(t, url, e.token(e.alice, apikey.Personal, nil, nil))
	agent, _ := connect(t, url, e.token(e.alice, apikey.Agent, nil, []string{"shared1"}))

	res := callTool(t, member, "upstream_servers", map[string]any{"action": "list"})
	var out struct {
		Servers []serverSummary `json:"servers"`
	}
	if err := json.Unmarshal([]byte(resultText(res)), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Servers) != 1 || out.Servers[0].Name != "shared1" || out.Servers[0].Status.State != "ready" {
		t.Errorf("member's list = %+v, want shared1 only, ready", out.Servers)
	}
	if strings.Contains(resultText(res), e.echo) {
		t.Errorf("list shows the command: %s", resultText(res))
	}

	for _, action := range []string{"add", "patch", "remove", "restart"} {
		res := callTool(t, agent, "upstream_servers", map[string]any{"action": action, "name": "shared1", "server": map[string]any{"name": "x"}})
		if !res.IsError || !strings.Contains(resultText(res), "agent tokens cannot") {
			t.Errorf("agent %s: %q", action, resultText(res))
		}
	}
	if n := admin.calls.Load(); n != 0 {
		t.Errorf("agent actions reached the admin %d times", n)
	}

	res = callTool(t, member, "upstream_servers", map[string]any{"action": "restart", "name": "shared1"})
	if !res.IsError || !strings.Contains(resultText(res), "only admins") {
		t.Errorf("member restarting a shared server: %q", resultText(res))
	}
	res = callTool(t, member, "upstream_servers", map[string]any{"action": "restart", "name": "bobs"})
	if !res.IsError || !strings.Contains(resultText(res), "unknown server") {
		t.Errorf("member restarting another member's server: %q", resultText(res))
	}
	adminCS, _ := connect(t, url, e.token(e.admin, apikey.Personal, nil, nil))
	inst, _ := g.sup.Instance("shared1")
	before := inst.Status().Starts
	res = callTool(t, adminCS, "upstream_servers", map[string]any{"action": "restart", "name": "shared1"})
	if res.IsError || inst.Status().Starts != before+1 {
		t.Errorf("admin restart: %q; starts %d -> %d", resultText(res), before, inst.Status().Starts)
	}

	res = callTool(t, member, "upstream_servers", map[string]any{"action": "add", "server": map[string]any{"name": "alices"}})
	if res.IsError || !strings.Contains(resultText(res), `"alices"`) {
		t.Fatalf("add: %q", resultText(res))
	}
	waitKnown(t, g, "alices")
	res = callTool(t, member, "upstream_servers", map[string]any{"action": "patch", "name": "alices", "server": map[string]any{"command": ""}})
	if !res.IsError || !strings.Contains(resultText(res), "cannot be empty") {
		t.Errorf("patch error not passed through: %q", resultText(res))
	}
	res = callTool(t, member, "upstream_servers", map[string]any{"action": "remove", "name": "alices"})
	if res.IsError {
		t.Fatalf("remove: %q", resultText(res))
	}
	eventually(t, 5*time.Second, func() bool { return g.lookup("alices") == nil }, "the removed server goes")
}

func TestAuthCacheAndSessions(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int64
	g := e.gateway(func(o *Options) {
		o.AuthCacheTTL = time.Minute
		o.AuthenticateFunc = func(ctx context.Context, bearer string) (Caller, error) {
			calls.Add(1)
			return e.authenticate(ctx, bearer)
		}
	})
	ts := e.serve(g)
	tok := e.token(e.alice, apikey.Personal, nil, nil)
	post := func(token, sid, method string) (int, string) {
		req, _ := http.NewRequest(method, ts.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+token)
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Mcp-Session-Id")
	}
	code, sid := post(tok, "", http.MethodPost)
	if code != http.StatusOK || sid == "" {
		t.Fatalf("first request: %d, session id %q", code, sid)
	}
	if code, again := post(tok, sid, http.MethodPost); code != http.StatusOK || again != "" {
		t.Errorf("with its session id: %d, new id %q (want 200 and no new id)", code, again)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("authenticated %d times for one token, want 1 with the cache", n)
	}
	bad := "mcp_pat_" + strings.Repeat("A", 49)
	for range 2 {
		if code, _ := post(bad, "", http.MethodPost); code != http.StatusUnauthorized {
			t.Errorf("bad token: %d", code)
		}
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("failures were cached: %d authentications, want 3", n)
	}
	if code, _ := post(tok, sid, http.MethodDelete); code != http.StatusNoContent {
		t.Errorf("DELETE of one's own session: %d, want 204", code)
	}
	if code, _ := post(e.token(e.bob, apikey.Personal, nil, nil), sid, http.MethodDelete); code != http.StatusNotFound {
		t.Errorf("DELETE of another user's session: %d, want 404", code)
	}
}

func TestBlockedAndDisabled(t *testing.T) {
	e := newEnv(t)
	mode := "docker"
	if _, err := e.st.CreateServer(context.Background(), store.Actor{UserID: e.admin.ID}, store.Server{
		Name: "needs-docker", Protocol: "stdio", Command: e.echo, Enabled: true, Shared: true, OwnerID: e.admin.ID,
		Isolation: store.Isolation{ModeOverride: &mode}}); err != nil {
		t.Fatal(err)
	}
	s := e.addEcho(e.admin, "off", true, nil)
	if _, err := e.st.UpdateServer(context.Background(), store.Actor{}, store.Scope{All: true}, s.Name, "server.update",
		func(s *store.Server) error { s.Enabled = false; return nil }); err != nil {
		t.Fatal(err)
	}
	g := e.gateway(nil) // Host: no Docker engine
	st := g.Status("needs-docker")
	if st.State != "error" || !strings.Contains(st.LastError, "docker-unavailable") {
		t.Errorf("docker server without an engine: %+v", st)
	}
	if _, ok := g.sup.Instance("needs-docker"); ok {
		t.Errorf("a server that cannot run here was handed to the supervisor")
	}
	if st := g.Status("off"); st.State != "stopped" {
		t.Errorf("disabled server: %+v", st)
	}
	if err := g.Restart(context.Background(), store.Actor{}, "off"); err == nil {
		t.Errorf("restarting a disabled server succeeded")
	}
	if _, err := g.Tools(context.Background(), "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("tools of an unknown server: %v", err)
	}
	if lines := g.Logs("nope", 10); lines == nil || len(lines) != 0 {
		t.Errorf("logs of an unknown server: %v", lines)
	}
}

func TestPersonalCapAndIdle(t *testing.T) {
	e := newEnv(t)
	cfg := settings.Defaults("none")
	cfg.Upstreams.MaxPersonalInstances = 1
	cfg.Upstreams.IdleTimeoutSeconds = 1
	if _, err := e.st.InitSetting(context.Background(), settings.Key, cfg); err != nil {
		t.Fatal(err)
	}
	e.addEcho(e.alice, "one", false, nil)
	e.addEcho(e.alice, "two", false, nil)
	g := e.gateway(nil)
	for _, n := range []string{"one", "two"} {
		waitKnown(t, g, n)
		if _, err := g.Approve(context.Background(), store.Actor{UserID: e.alice.ID}, n); err != nil {
			t.Fatal(err)
		}
	}
	one, _ := g.sup.Instance("one")
	two, _ := g.sup.Instance("two")
	eventually(t, 10*time.Second, func() bool { return one.State() == "stopped" && two.State() == "stopped" },
		"both idle personal servers stop after the idle timeout")
	cs, _ := connect(t, e.serve(g).URL+"/mcp", e.token(e.alice, apikey.Personal, nil, nil))

	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, _ := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "call_tool_read",
			Arguments: map[string]any{"name": "one:sleep", "args": map[string]any{"millis": 3000}}})
		done <- res
	}()
	eventually(t, 10*time.Second, func() bool { return g.inflight.Load() == 1 && one.State() == "ready" }, "a call holds server one")
	res := callTool(t, cs, "call_tool_read", map[string]any{"name": "two:echo", "args": map[string]any{"text": "x"}})
	if !res.IsError || !strings.Contains(resultText(res), "too many running servers") {
		t.Errorf("second personal server over the cap of 1: %q", resultText(res))
	}
	if r := <-done; r == nil || r.IsError {
		t.Fatalf("the sleeping call failed: %+v", r)
	}
	// Once one is idle, two may take its place.
	res = callTool(t, cs, "call_tool_read", map[string]any{"name": "two:echo", "args": map[string]any{"text": "x"}})
	if res.IsError || two.State() != "ready" || one.State() != "stopped" {
		t.Errorf("two after one went idle: %q; one %s, two %s", resultText(res), one.State(), two.State())
	}
}
