package oauth_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/keyring"
	"github.com/mcpgate/mcpgate/oauth"
	"github.com/mcpgate/mcpgate/server"
	"github.com/mcpgate/mcpgate/store"
)

const admin = "rest-admin-token-0123456789abcdef0123456789"

// The REST side of the flow, through the real HTTP server: configure OAuth
// on a server, start, let a browser (with the start response's cookie)
// authorize and land on the gateway's own /oauth/callback, see the state in
// the server object, and forget the token.
func TestRESTFlow(t *testing.T) {
	db := oauth.Database(t)
	kr, err := keyring.Generate(filepath.Join(t.TempDir(), "key"))
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(db.Pool, kr)
	as := oauth.NewTestAS(t)
	rs := oauth.NewTestRS(t, as)

	var handler http.Handler
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	defer gw.Close()
	m, err := oauth.New(st, &oauth.Options{PublicURL: gw.URL})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Store: st, AdminToken: admin, OAuth: m})
	if err != nil {
		t.Fatal(err)
	}
	handler = srv.Handler()

	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	call := func(method, path, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, gw.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+admin)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := browser.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	oauthOf := func() map[string]any {
		t.Helper()
		code, b := call("GET", "/api/v1/servers/protected", "")
		var v struct{ OAuth map[string]any }
		if code != 200 || json.Unmarshal(b, &v) != nil {
			t.Fatalf("GET server: %d %s", code, b)
		}
		return v.OAuth
	}

	if code, b := call("POST", "/api/v1/servers", `{"name":"protected","url":"`+rs.Endpoint()+`","shared":true,"quarantined":false,
		"oauth":{"mode":"per-user","client_secret":"never-shown-secret-1234"}}`); code != 201 {
		t.Fatalf("create: %d %s", code, b)
	}
	if o := oauthOf(); o["mode"] != "per-user" || o["status"] != "none" || o["client_secret_set"] != true {
		t.Fatalf("oauth before authorizing: %v", o)
	}
	if code, b := call("PATCH", "/api/v1/servers/protected", `{"oauth":{"mode":"shared"}}`); code != 400 || !strings.Contains(string(b), "oauth/config") {
		t.Fatalf("PATCH oauth: %d %s, want 400 pointing at /oauth/config", code, b)
	}
	if code, b := call("PUT", "/api/v1/servers/protected/oauth/config", `{"mode":"per-user"}`); code != 200 {
		t.Fatalf("PUT config: %d %s", code, b)
	}

	code, b := call("POST", "/api/v1/servers/protected/oauth/start", "")
	var start struct {
		URL string `json:"authorization_url"`
	}
	if code != 200 || json.Unmarshal(b, &start) != nil || start.URL == "" {
		t.Fatalf("start: %d %s", code, b)
	}
	// The browser that called start logs in at the AS and is sent back to
	// the gateway's callback, with the binding cookie in its jar.
	req, _ := http.NewRequest("GET", start.URL, nil)
	req.Header.Set("X-Test-User", "alice")
	resp, err := browser.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), "authorized for <b>protected</b>") {
		t.Fatalf("callback: %d %s", resp.StatusCode, page)
	}
	if o := oauthOf(); o["status"] != "authorized" || o["expires_at"] == nil {
		t.Fatalf("oauth after authorizing: %v", o)
	}
	// The state was single-use.
	cb, _ := http.NewRequest("GET", resp.Request.URL.String(), nil)
	again, err := browser.Do(cb)
	if err != nil {
		t.Fatal(err)
	}
	again.Body.Close()
	if again.StatusCode != 400 || again.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("replayed callback: %d %s", again.StatusCode, again.Header.Get("Content-Type"))
	}
	if code, _ := call("DELETE", "/api/v1/servers/protected/oauth", ""); code != 204 {
		t.Fatalf("forget: %d", code)
	}
	if o := oauthOf(); o["status"] != "none" {
		t.Fatalf("oauth after forgetting: %v", o)
	}
	_, all := call("GET", "/api/v1/servers", "")
	if strings.Contains(string(all), "never-shown-secret") {
		t.Fatal("a read shows the client secret")
	}
}
