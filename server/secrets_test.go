package server

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/isolation"
	"github.com/mcpgate/mcpgate/store"
)

// dumpDatabase returns the whole test database as text, the way an attacker
// with a backup would read it.
func dumpDatabase(t *testing.T) []byte {
	t.Helper()
	ctx := context.Background()
	rows, err := testDB.Pool.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var n string
		rows.Scan(&n)
		tables = append(tables, n)
	}
	var buf bytes.Buffer
	for _, tb := range tables {
		var s string
		if err := testDB.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT coalesce(string_agg(t::text, E'\n'), '') FROM %q t`, tb)).Scan(&s); err != nil {
			t.Fatal(err)
		}
		buf.WriteString(s)
	}
	return buf.Bytes()
}

// A5, A6: the plaintext of a token appears in its create response and
// nowhere else: not in later reads, not in the database, not in the logs.
func TestA5A6TokenShownOnce(t *testing.T) {
	h := newHarness(t, isolation.Host{})
	_, pat := h.user("member")
	resp := h.do("POST", "/api/v1/tokens", pat, `{"name":"ci","scopes":["write"],"expires_in":"12h"}`)
	if resp.Status != 201 {
		t.Fatalf("create: %d %s", resp.Status, resp.Body)
	}
	created := resp.JSON(t)
	plain, _ := created["token"].(string)
	if !strings.HasPrefix(plain, "mcp_agt_") {
		t.Fatalf("token = %q", plain)
	}
	if got := fmt.Sprint(created["scopes"]); got != "[read write]" {
		t.Errorf("scopes = %s, want the cumulative [read write]", got)
	}
	id := int64(created["id"].(float64))
	// The token works, then its reads never show it.
	if r := h.do("GET", "/api/v1/me", plain, nil); r.Status != 200 {
		t.Fatalf("using the new token: %d", r.Status)
	}
	for _, path := range []string{"/api/v1/tokens", fmt.Sprintf("/api/v1/tokens/%d", id), "/api/v1/me", "/api/v1/activity"} {
		r := h.do("GET", path, pat, nil)
		if bytes.Contains(r.Body, []byte(plain)) || bytes.Contains(r.Body, []byte(plain[8:])) {
			t.Errorf("GET %s shows the token's plaintext", path)
		}
	}
	var hash []byte
	if err := testDB.Pool.QueryRow(context.Background(), `SELECT hash FROM tokens WHERE id = $1`, id).Scan(&hash); err != nil || len(hash) != 32 {
		t.Fatalf("stored hash: %x %v", hash, err)
	}
	dump := dumpDatabase(t)
	for _, part := range []string{plain, plain[8:30], plain[20:50]} {
		if bytes.Contains(dump, []byte(part)) {
			t.Errorf("the database holds %q of the token", part)
		}
	}
	if strings.Contains(allLogs.String(), plain[8:]) {
		t.Error("the logs hold the token")
	}
	// Revoked: refused at once.
	if r := h.do("DELETE", fmt.Sprintf("/api/v1/tokens/%d", id), pat, nil); r.Status != 204 {
		t.Fatalf("revoke: %d", r.Status)
	}
	if r := h.do("GET", "/api/v1/me", plain, nil); r.Status != 401 {
		t.Errorf("revoked token = %d, want 401", r.Status)
	}
}

func TestTokenRules(t *testing.T) {
	h := newHarness(t, isolation.Host{})
	other, _ := h.user("member")
	_, pat := h.user("member")
	_, adminPAT := h.user("admin")
	for _, tt := range []struct {
		who, body string
		status    int
	}{
		{pat, `{"name":"x","expires_in":"366d"}`, 400},
		{pat, `{"name":"x","expires_in":"365d"}`, 201},
		{pat, `{"name":"x","kind":"personal","scopes":["read"]}`, 400},
		{pat, `{"name":"x","kind":"personal"}`, 201},
		{pat, fmt.Sprintf(`{"name":"x","user_id":%d}`, other.ID), 400},
		{adminPAT, fmt.Sprintf(`{"name":"x","user_id":%d}`, other.ID), 201},
		{adminPAT, `{"name":"x","user_id":987654}`, 400},
		{pat, `{"name":"x","scopes":["admin"]}`, 400},
		{pat, `{"name":"x","servers":["*","a"]}`, 400},
		{pat, `{"name":""}`, 400},
	} {
		if r := h.do("POST", "/api/v1/tokens", tt.who, tt.body); r.Status != tt.status {
			t.Errorf("POST /tokens %s = %d %s, want %d", tt.body, r.Status, r.Body, tt.status)
		}
	}
	r := h.do("POST", "/api/v1/tokens", pat, `{"name":"d"}`).JSON(t)
	if fmt.Sprint(r["scopes"]) != "[read]" || fmt.Sprint(r["servers"]) != "[*]" {
		t.Errorf("defaults: scopes %v servers %v", r["scopes"], r["servers"])
	}
}

// Secrets in env, headers and URL credentials: masked on every read,
// sealed in the row, and a masked echo keeps them.
func TestServerSecretsMaskedAndSealed(t *testing.T) {
	h := newHarness(t, isolation.Host{LandlockABI: 7})
	_, adminPAT := h.user("admin")
	secretEnv, secretHeader, secretPW := "sk-env-secret-9f8e7d6c5b4a", "Bearer hdr-secret-1a2b3c4d5e", "url-password-77aa88bb"
	name := unique("sec")
	resp := h.do("POST", "/api/v1/servers", adminPAT, fmt.Sprintf(`{"name":"%s","url":"https://bot:%s@mcp.example.test/mcp","headers":{"Authorization":"%s"}}`, name, secretPW, secretHeader))
	if resp.Status != 201 {
		t.Fatalf("create http: %d %s", resp.Status, resp.Body)
	}
	name2 := unique("sec")
	if r := h.do("POST", "/api/v1/servers", adminPAT, fmt.Sprintf(`{"name":"%s","command":"npx","env":{"API_KEY":"%s"}}`, name2, secretEnv)); r.Status != 201 {
		t.Fatalf("create stdio: %d %s", r.Status, r.Body)
	}
	got := h.do("GET", "/api/v1/servers/"+name, adminPAT, nil).JSON(t)
	if got["headers"].(map[string]any)["Authorization"] != "••••5e" {
		t.Errorf("header shown as %v", got["headers"])
	}
	if u := got["url"].(string); strings.Contains(u, secretPW) || !strings.Contains(u, "••••bb") {
		t.Errorf("url shown as %s", u)
	}
	// Echo of the masked URL and header keeps them; a new value replaces them.
	if r := h.do("PATCH", "/api/v1/servers/"+name, adminPAT, map[string]any{"url": got["url"], "headers": got["headers"]}); r.Status != 200 {
		t.Fatalf("echo: %d %s", r.Status, r.Body)
	}
	srv, _ := h.store.GetServer(context.Background(), store.Scope{All: true}, name)
	if srv.Headers["Authorization"] != secretHeader || !strings.Contains(srv.URL, secretPW) {
		t.Fatalf("masked echo changed the secrets: %q", srv.Headers["Authorization"])
	}
	dump := dumpDatabase(t)
	for _, s := range []string{secretEnv, secretHeader, secretPW, "hdr-secret"} {
		if bytes.Contains(dump, []byte(s)) {
			t.Errorf("database holds %q in clear", s)
		}
	}
	for _, s := range []string{secretEnv, secretHeader, secretPW} {
		if strings.Contains(allBodies.String(), s) {
			t.Errorf("a response body held %q", s)
		}
		if strings.Contains(allLogs.String(), s) {
			t.Errorf("a log line held %q", s)
		}
	}
}

// Every log line and response body the suite produced so far, grepped for
// every secret the suite wrote (tests run in file order; this one is last).
func TestZZNoSecretAnywhere(t *testing.T) {
	for _, s := range []string{adminToken, "sk-env-secret-9f8e7d6c5b4a", "hdr-secret-1a2b3c4d5e", "url-password-77aa88bb", "upstream-secret-value-1", "sk-live-abcdefghijklmnop"} {
		if strings.Contains(allLogs.String(), s) {
			t.Errorf("logs hold %q", s)
		}
		if strings.Contains(allBodies.String(), s) {
			t.Errorf("response bodies hold %q", s)
		}
	}
}

// C3 through the API: a ciphertext moved to another row does not decrypt,
// and the answer is a 500 problem that carries neither value.
func TestMovedCiphertextAnswersWithoutLeaking(t *testing.T) {
	h := newHarness(t, isolation.Host{LandlockABI: 7})
	_, adminPAT := h.user("admin")
	a, b := unique("mv"), unique("mv")
	for name, secret := range map[string]string{a: "moved-secret-aaaa-1111", b: "kept-secret-bbbb-2222"} {
		if r := h.do("POST", "/api/v1/servers", adminPAT, fmt.Sprintf(`{"name":%q,"command":"npx","env":{"K":%q}}`, name, secret)); r.Status != 201 {
			t.Fatalf("create %s: %d %s", name, r.Status, r.Body)
		}
	}
	if _, err := testDB.Pool.Exec(context.Background(), `UPDATE servers SET env = (SELECT env FROM servers WHERE name = $1) WHERE name = $2`, a, b); err != nil {
		t.Fatal(err)
	}
	r := h.do("GET", "/api/v1/servers/"+b, adminPAT, nil)
	if r.Status != 500 || bytes.Contains(r.Body, []byte("secret")) || bytes.Contains(r.Body, []byte("v1:")) {
		t.Fatalf("GET of a row with a moved ciphertext: %d %s", r.Status, r.Body)
	}
	// Put the row right again for the other tests that list every server.
	if _, err := testDB.Pool.Exec(context.Background(), `DELETE FROM servers WHERE name = $1`, b); err != nil {
		t.Fatal(err)
	}
}
