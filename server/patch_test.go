package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/isolation"
	"github.com/mcpgate/mcpgate/store"
)

func ptr[T any](v T) *T { return &v }

// rawIsolation reads the stored overrides straight from the row.
func rawIsolation(t *testing.T, name string) (enabled *bool, mode *string) {
	t.Helper()
	err := testDB.Pool.QueryRow(context.Background(),
		`SELECT isolation_enabled_override, isolation_mode_override FROM servers WHERE name = $1`, name).Scan(&enabled, &mode)
	if err != nil {
		t.Fatal(err)
	}
	return enabled, mode
}

func show[T any](p *T) string {
	if p == nil {
		return "NULL"
	}
	return fmt.Sprint(*p)
}

// TestTriStatePatch: for each override, each of absent / null / value,
// starting from each stored state, gives the expected raw value and the
// expected isolation_effective.
func TestTriStatePatch(t *testing.T) {
	host := isolation.Host{LandlockABI: 7, DockerAvailable: true}
	h := newHarness(t, host)
	_, adminPAT := h.user("admin")
	// The global mode is sandbox for this table.
	if r := h.do("PATCH", "/api/v1/config", adminPAT, `{"isolation":{"global_mode":"sandbox"}}`); r.Status != 200 {
		t.Fatalf("setting global mode: %d %s", r.Status, r.Body)
	}
	// Back to what the other tests expect, not to this host's default.
	defer h.do("PATCH", "/api/v1/config", adminPAT, `{"isolation":{"global_mode":"sandbox"}}`)

	type state struct {
		enabled *bool
		mode    *string
	}
	starts := []state{{nil, nil}, {ptr(true), nil}, {ptr(false), nil}, {nil, ptr("docker")}, {ptr(false), ptr("none")}}
	patches := []struct {
		name string
		body string
		want func(state) state
	}{
		{"enabled absent", `{"enabled":true}`, func(s state) state { return s }},
		{"enabled null", `{"isolation":{"enabled_override":null}}`, func(s state) state { return state{nil, s.mode} }},
		{"enabled true", `{"isolation":{"enabled_override":true}}`, func(s state) state { return state{ptr(true), s.mode} }},
		{"enabled false", `{"isolation":{"enabled_override":false}}`, func(s state) state { return state{ptr(false), s.mode} }},
		{"mode absent", `{"isolation":{}}`, func(s state) state { return s }},
		{"mode null", `{"isolation":{"mode_override":null}}`, func(s state) state { return state{s.enabled, nil} }},
		{"mode docker", `{"isolation":{"mode_override":"docker"}}`, func(s state) state { return state{s.enabled, ptr("docker")} }},
		{"mode none", `{"isolation":{"mode_override":"none"}}`, func(s state) state { return state{s.enabled, ptr("none")} }},
		{"isolation null", `{"isolation":null}`, func(s state) state { return state{} }},
	}
	for _, st := range starts {
		for _, p := range patches {
			name := fmt.Sprintf("from %s/%s, %s", show(st.enabled), show(st.mode), p.name)
			t.Run(name, func(t *testing.T) {
				srv := unique("tri")
				// Stored state set straight in the store, so the patch under test is the only API write.
				me := h.do("GET", "/api/v1/me", adminPAT, nil).JSON(t)["user"].(map[string]any)
				ownerID := int64(me["id"].(float64))
				if _, err := h.store.CreateServer(context.Background(), store.Actor{}, store.Server{
					Name: srv, Protocol: "stdio", Command: "npx", Args: []string{"-y", "pkg"}, Enabled: true,
					OwnerID: ownerID, Env: map[string]string{}, Headers: map[string]string{},
					Isolation: store.Isolation{EnabledOverride: st.enabled, ModeOverride: st.mode},
				}); err != nil {
					t.Fatal(err)
				}
				resp := h.do("PATCH", "/api/v1/servers/"+srv, adminPAT, p.body, "application/merge-patch+json")
				if resp.Status != 200 {
					t.Fatalf("PATCH %s = %d %s", p.body, resp.Status, resp.Body)
				}
				want := p.want(st)
				gotE, gotM := rawIsolation(t, srv)
				if show(gotE) != show(want.enabled) || show(gotM) != show(want.mode) {
					t.Errorf("stored enabled_override=%s mode_override=%s, want %s/%s", show(gotE), show(gotM), show(want.enabled), show(want.mode))
				}
				wantEff := isolation.Resolve(isolation.Server{Protocol: "stdio", Command: "npx", EnabledOverride: want.enabled, ModeOverride: want.mode}, "sandbox", host)
				var body struct {
					Isolation struct {
						Enabled bool `json:"enabled"`
					} `json:"isolation"`
					Eff isolation.Effective `json:"isolation_effective"`
				}
				json.Unmarshal(resp.Body, &body)
				if body.Eff != wantEff {
					t.Errorf("isolation_effective = %+v, want %+v", body.Eff, wantEff)
				}
				if body.Isolation.Enabled != wantEff.Isolated {
					t.Errorf("isolation.enabled = %v, want %v", body.Isolation.Enabled, wantEff.Isolated)
				}
			})
		}
	}
}

// expectedEffective spot-checks the resolution through the API, including
// inherited and source.
func TestEffectiveOnTheWire(t *testing.T) {
	h := newHarness(t, isolation.Host{LandlockABI: 7})
	_, adminPAT := h.user("admin")
	if r := h.do("PATCH", "/api/v1/config", adminPAT, `{"isolation":{"global_mode":"sandbox"}}`); r.Status != 200 {
		t.Fatalf("setting global mode: %d %s", r.Status, r.Body)
	}
	cases := []struct {
		body string
		want isolation.Effective
	}{
		{`{"name":"%s","command":"npx"}`, isolation.Effective{Mode: "sandbox", Isolated: true, GlobalMode: "sandbox", Inherited: true, Source: "global"}},
		{`{"name":"%s","command":"npx","isolation":{"enabled_override":false}}`, isolation.Effective{Mode: "none", GlobalMode: "sandbox", Source: "server-opt-out"}},
		{`{"name":"%s","command":"npx","isolation":{"mode_override":"docker"}}`, isolation.Effective{Mode: "docker", GlobalMode: "sandbox", Source: "docker-unavailable"}},
		{`{"name":"%s","command":"/usr/bin/docker"}`, isolation.Effective{Mode: "none", GlobalMode: "sandbox", Source: "already-docker"}},
		{`{"name":"%s","url":"https://x.example.test/mcp"}`, isolation.Effective{Mode: "none", GlobalMode: "sandbox", Source: "not-stdio"}},
	}
	for _, c := range cases {
		resp := h.do("POST", "/api/v1/servers", adminPAT, fmt.Sprintf(c.body, unique("eff")))
		if resp.Status != 201 {
			t.Fatalf("%s: %d %s", c.body, resp.Status, resp.Body)
		}
		var got struct {
			Eff isolation.Effective `json:"isolation_effective"`
		}
		json.Unmarshal(resp.Body, &got)
		if got.Eff != c.want {
			t.Errorf("%s: isolation_effective = %+v, want %+v", c.body, got.Eff, c.want)
		}
	}
}

// A GET body with its read-only fields removed, sent back as a PATCH,
// changes nothing; with isolation.enabled left in, it is refused and nothing
// changes either.
func TestEchoedGetChangesNothing(t *testing.T) {
	h := newHarness(t, isolation.Host{LandlockABI: 7})
	_, adminPAT := h.user("admin")
	name := unique("echo")
	create := fmt.Sprintf(`{"name":"%s","command":"npx","args":["-y","@scope/pkg"],"env":{"API_KEY":"sk-live-abcdefghijklmnop","SHORT":"abc"},
		"working_dir":"/srv","isolation":{"mode_override":"sandbox","memory_limit":"512m","cpu_limit":1.5}}`, name)
	if r := h.do("POST", "/api/v1/servers", adminPAT, create); r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	before := rowSnapshot(t, name)
	get := h.do("GET", "/api/v1/servers/"+name, adminPAT, nil).JSON(t)

	withEnabled := map[string]any{}
	for k, v := range get {
		withEnabled[k] = v
	}
	for _, f := range append(serverReadOnly, "name") {
		delete(withEnabled, f)
	}
	resp := h.do("PATCH", "/api/v1/servers/"+name, adminPAT, withEnabled)
	if resp.Status != 400 || !strings.Contains(string(resp.Body), "enabled_override") {
		t.Fatalf("echo with isolation.enabled: %d %s; want 400 naming enabled_override", resp.Status, resp.Body)
	}
	if after := rowSnapshot(t, name); after != before {
		t.Fatalf("a refused PATCH changed the row:\nbefore %s\nafter  %s", before, after)
	}

	delete(withEnabled["isolation"].(map[string]any), "enabled")
	resp = h.do("PATCH", "/api/v1/servers/"+name, adminPAT, withEnabled, "application/merge-patch+json")
	if resp.Status != 200 {
		t.Fatalf("echo without read-only fields: %d %s", resp.Status, resp.Body)
	}
	if after := rowSnapshot(t, name); after != before {
		t.Fatalf("an echoed GET changed the row:\nbefore %s\nafter  %s", before, after)
	}
	// The secrets survived the masked echo.
	srv, err := h.store.GetServer(context.Background(), store.Scope{All: true}, name)
	if err != nil || srv.Env["API_KEY"] != "sk-live-abcdefghijklmnop" || srv.Env["SHORT"] != "abc" {
		t.Fatalf("secrets after echo: %v %v", srv.Env, err)
	}
}

// rowSnapshot is the row's writable columns, decrypted, as text.
func rowSnapshot(t *testing.T, name string) string {
	t.Helper()
	srv, err := store.New(testDB.Pool, testSealer(t)).GetServer(context.Background(), store.Scope{All: true}, name)
	if err != nil {
		t.Fatal(err)
	}
	srv.UpdatedAt = srv.CreatedAt
	b, _ := json.Marshal(srv)
	return string(b)
}

func TestPatchRefusals(t *testing.T) {
	h := newHarness(t, isolation.Host{LandlockABI: 7})
	memberUser, memberPAT := h.user("member")
	_, adminPAT := h.user("admin")
	name := unique("ref")
	if r := h.do("POST", "/api/v1/servers", memberPAT, fmt.Sprintf(`{"name":"%s","command":"npx"}`, name)); r.Status != 201 {
		t.Fatalf("member create stdio: %d %s", r.Status, r.Body)
	}
	before := rowSnapshot(t, name)
	tests := []struct {
		who, body string
		status    int
		mention   string
	}{
		{memberPAT, `{"isolation":{"enabled":false}}`, 400, "enabled_override"},
		{memberPAT, `{"isolation":{"enabled":null}}`, 400, "enabled_override"},
		{memberPAT, `{"isolation":{"mode_override":"vm"}}`, 400, "sandbox"},
		{memberPAT, `{"name":"renamed"}`, 400, "name"},
		{memberPAT, `{"owner":null}`, 400, "owner"},
		{memberPAT, `{"created_at":"2020-01-01T00:00:00Z"}`, 400, "created_at"},
		{memberPAT, `{"quarantined":false}`, 400, "approve"},
		{memberPAT, `{"status":{}}`, 400, "status"},
		{memberPAT, `{"isolation_effective":{}}`, 400, "isolation_effective"},
		{memberPAT, `{"shared":true}`, 400, "admins"},
		{memberPAT, `{"unknown_field":1}`, 400, "unknown_field"},
		{memberPAT, `{"isolation":{"enabled_override":false}}`, 403, "isolated"},
		{memberPAT, `{"isolation":{"mode_override":"none"}}`, 403, "isolated"},
		{memberPAT, `{"url":"https://x.example.test"}`, 400, "command"},
		{memberPAT, `not json`, 400, ""},
		{memberPAT, `[]`, 400, ""},
		{memberPAT, `{"env":{"BAD NAME":"x"}}`, 400, "env"},
		{memberPAT, `{"isolation":{"memory_limit":"lots"}}`, 400, "memory_limit"},
		{memberPAT, `{"isolation":{"extra_args":{"privileged":true}}}`, 400, "privileged"},
		{memberPAT, `{"isolation":{"extra_args":{"pids_limit":"many"}}}`, 400, "pids_limit"},
		{adminPAT, `{"isolation":{"enabled_override":false}}`, 403, "isolated"}, // the owner is a member
	}
	for _, tt := range tests {
		resp := h.do("PATCH", "/api/v1/servers/"+name, tt.who, tt.body, "application/merge-patch+json")
		if resp.Status != tt.status || !strings.Contains(string(resp.Body), tt.mention) {
			t.Errorf("PATCH %s = %d %s; want %d mentioning %q", tt.body, resp.Status, resp.Body, tt.status, tt.mention)
		}
		if after := rowSnapshot(t, name); after != before {
			t.Fatalf("refused PATCH %s changed the row", tt.body)
		}
	}
	_ = memberUser
	// Creation is held to the same rules.
	for _, body := range []string{
		`{"name":"%s","command":"npx","isolation":{"enabled_override":false}}`,
		`{"name":"%s","command":"npx","isolation":{"enabled":true}}`,
		`{"name":"%s","command":"npx","shared":true}`,
		`{"name":"%s","command":"npx","quarantined":false}`,
		`{"name":"%s"}`,
		`{"name":"%s","command":"npx","url":"https://x.example.test"}`,
	} {
		n := unique("c")
		resp := h.do("POST", "/api/v1/servers", memberPAT, fmt.Sprintf(body, n))
		if resp.Status < 400 || resp.Status >= 500 {
			t.Errorf("POST %s = %d, want a 4xx", body, resp.Status)
		}
		if _, err := h.store.GetServer(context.Background(), store.Scope{All: true}, n); err == nil {
			t.Errorf("refused POST %s created the server", body)
		}
	}
}

func TestBodyLimitAndRequestID(t *testing.T) {
	h := newHarness(t, isolation.Host{})
	_, adminPAT := h.user("admin")
	big := `{"name":"x","env":{"A":"` + strings.Repeat("a", 2<<20) + `"}}`
	if r := h.do("POST", "/api/v1/servers", adminPAT, big); r.Status != 413 {
		t.Errorf("2 MiB body = %d, want 413", r.Status)
	}
	req := h.do("GET", "/api/v1/status", adminPAT, nil)
	if len(req.Header.Get("X-Request-Id")) == 0 {
		t.Error("no X-Request-Id generated")
	}
	// An incoming id is echoed and lands in the activity log of a mutation.
	r := newRequest(t, h, "POST", "/api/v1/users", adminPAT, `{"email":"`+unique("rid")+`@example.test"}`)
	r.Header.Set("X-Request-Id", "trace-abc-123")
	resp, err := h.http.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("X-Request-Id") != "trace-abc-123" {
		t.Errorf("X-Request-Id = %q, want the client's", resp.Header.Get("X-Request-Id"))
	}
	act := h.do("GET", "/api/v1/activity?action=user.create&limit=5", adminPAT, nil)
	if !bytes.Contains(act.Body, []byte("trace-abc-123")) {
		t.Errorf("activity does not carry the request id: %s", act.Body)
	}
}
