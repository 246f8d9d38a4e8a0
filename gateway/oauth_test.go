package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/mcpgate/mcpgate/apikey"
	"github.com/mcpgate/mcpgate/oauth"
	"github.com/mcpgate/mcpgate/settings"
	"github.com/mcpgate/mcpgate/store"
	"github.com/mcpgate/mcpgate/upstream"
)

// authServer is a small OAuth 2.1 authorization server for these tests:
// metadata, dynamic registration, an authorization endpoint that approves
// at once for the subject in X-Test-User, and a token endpoint with PKCE
// S256, resource indicators and rotating refresh tokens.
type authServer struct {
	srv      *httptest.Server
	resource string

	mu        sync.Mutex
	clients   map[string]string // id -> secret
	redirects map[string][]string
	codes     map[string]authCode
	access    map[string]string // access token -> subject
	refresh   map[string]string // refresh token -> subject
	refreshes int
}

type authCode struct{ client, redirect, challenge, subject string }

func newAuthServer(t testing.TB) *authServer {
	as := &authServer{clients: map[string]string{}, redirects: map[string][]string{}, codes: map[string]authCode{},
		access: map[string]string{}, refresh: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, _ *http.Request) {
		u := as.srv.URL
		writeTestJSON(w, http.StatusOK, map[string]any{
			"issuer": u, "authorization_endpoint": u + "/authorize", "token_endpoint": u + "/token",
			"registration_endpoint": u + "/register", "response_types_supported": []string{"code"},
			"grant_types_supported":                 []string{"authorization_code", "refresh_token"},
			"code_challenge_methods_supported":      []string{"S256"},
			"token_endpoint_auth_methods_supported": []string{"client_secret_basic"},
		})
	})
	mux.HandleFunc("POST /register", func(w http.ResponseWriter, r *http.Request) {
		var meta oauthex.ClientRegistrationMetadata
		if err := json.NewDecoder(r.Body).Decode(&meta); err != nil || len(meta.RedirectURIs) == 0 {
			writeTestJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_client_metadata"})
			return
		}
		id, secret := randomText("client-"), randomText("secret-")
		as.mu.Lock()
		as.clients[id], as.redirects[id] = secret, meta.RedirectURIs
		as.mu.Unlock()
		writeTestJSON(w, http.StatusCreated, map[string]any{"client_id": id, "client_secret": secret,
			"redirect_uris": meta.RedirectURIs, "token_endpoint_auth_method": "client_secret_basic"})
	})
	mux.HandleFunc("GET /authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		subject := r.Header.Get("X-Test-User")
		as.mu.Lock()
		ok := subject != "" && slices.Contains(as.redirects[q.Get("client_id")], q.Get("redirect_uri")) &&
			q.Get("code_challenge_method") == "S256" && q.Get("resource") == as.resource && q.Get("state") != ""
		code := randomText("code-")
		if ok {
			as.codes[code] = authCode{client: q.Get("client_id"), redirect: q.Get("redirect_uri"),
				challenge: q.Get("code_challenge"), subject: subject}
		}
		as.mu.Unlock()
		if !ok {
			http.Error(w, "bad authorization request", http.StatusBadRequest)
			return
		}
		back, _ := url.Parse(q.Get("redirect_uri"))
		bq := back.Query()
		bq.Set("code", code)
		bq.Set("state", q.Get("state"))
		bq.Set("iss", as.srv.URL)
		back.RawQuery = bq.Encode()
		http.Redirect(w, r, back.String(), http.StatusFound)
	})
	mux.HandleFunc("POST /token", as.token)
	as.srv = httptest.NewServer(mux)
	t.Cleanup(as.srv.Close)
	return as
}

func (as *authServer) token(w http.ResponseWriter, r *http.Request) {
	fail := func(code string) { writeTestJSON(w, http.StatusBadRequest, map[string]string{"error": code}) }
	if err := r.ParseForm(); err != nil {
		fail("invalid_request")
		return
	}
	id, secret, _ := r.BasicAuth()
	id, _ = url.QueryUnescape(id)
	secret, _ = url.QueryUnescape(secret)
	f := r.PostForm
	as.mu.Lock()
	defer as.mu.Unlock()
	if s, ok := as.clients[id]; !ok || s != secret || f.Get("resource") != as.resource {
		fail("invalid_client")
		return
	}
	var subject string
	switch f.Get("grant_type") {
	case "authorization_code":
		c, ok := as.codes[f.Get("code")]
		delete(as.codes, f.Get("code"))
		sum := sha256.Sum256([]byte(f.Get("code_verifier")))
		if !ok || c.client != id || c.redirect != f.Get("redirect_uri") ||
			base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge {
			fail("invalid_grant")
			return
		}
		subject = c.subject
	case "refresh_token":
		s, ok := as.refresh[f.Get("refresh_token")]
		if !ok {
			fail("invalid_grant")
			return
		}
		delete(as.refresh, f.Get("refresh_token"))
		as.refreshes++
		subject = s
	default:
		fail("unsupported_grant_type")
		return
	}
	at, rt := randomText("at-"), randomText("rt-")
	as.access[at], as.refresh[rt] = subject, subject
	writeTestJSON(w, http.StatusOK, map[string]any{"access_token": at, "token_type": "Bearer", "expires_in": 3600,
		"refresh_token": rt})
}

// revokeAccessOf drops every access token of subject, keeping the refresh
// tokens: the upstream now refuses what the gateway holds.
func (as *authServer) revokeAccessOf(subject string) {
	as.mu.Lock()
	defer as.mu.Unlock()
	for k, s := range as.access {
		if s == subject {
			delete(as.access, k)
		}
	}
}

func (as *authServer) refreshCount() int {
	as.mu.Lock()
	defer as.mu.Unlock()
	return as.refreshes
}

func writeTestJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func randomText(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// protectedServer is a Streamable HTTP MCP server that accepts only the
// authorization server's tokens. Its whoami tool answers the token's
// subject; it records every request's Authorization header, custom header
// and the subject each upstream MCP session used.
type protectedServer struct {
	endpoint string

	mu       sync.Mutex
	authz    []string            // every Authorization header received
	custom   []string            // every X-Custom header received
	sessions map[string][]string // Mcp-Session-Id (or SSE sessionid) -> subjects seen on it
}

func newProtectedServer(t testing.TB, as *authServer, sse bool) *protectedServer {
	ps := &protectedServer{sessions: map[string][]string{}}
	mux := http.NewServeMux()
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	ps.endpoint = ts.URL + "/mcp"
	as.resource = ps.endpoint
	prm := ts.URL + "/.well-known/oauth-protected-resource/mcp"
	mux.Handle("/.well-known/oauth-protected-resource/mcp", auth.ProtectedResourceMetadataHandler(
		&oauthex.ProtectedResourceMetadata{Resource: ps.endpoint, AuthorizationServers: []string{as.srv.URL}}))
	// streamOwner is the subject whose token opened the SSE stream: the
	// SDK's SSE handler passes no token info to tools.
	newServer := func(streamOwner string) *mcp.Server {
		s := mcp.NewServer(&mcp.Implementation{Name: "protected", Version: "1"}, nil)
		mcp.AddTool(s, &mcp.Tool{Name: "whoami", Description: "Say whose account the call runs as",
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
			func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
				who := streamOwner
				if req.Extra != nil && req.Extra.TokenInfo != nil {
					who = req.Extra.TokenInfo.UserID
				}
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: who}}}, nil, nil
			})
		return s
	}
	s := newServer("")
	verify := func(_ context.Context, tok string, r *http.Request) (*auth.TokenInfo, error) {
		as.mu.Lock()
		subject, ok := as.access[tok]
		as.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("%w: unknown token", auth.ErrInvalidToken)
		}
		sid := r.Header.Get("Mcp-Session-Id")
		if sid == "" {
			sid = r.URL.Query().Get("sessionid") // SSE
		}
		if sid != "" {
			ps.mu.Lock()
			if !slices.Contains(ps.sessions[sid], subject) {
				ps.sessions[sid] = append(ps.sessions[sid], subject)
			}
			ps.mu.Unlock()
		}
		return &auth.TokenInfo{UserID: subject, Expiration: time.Now().Add(time.Hour)}, nil
	}
	var mcpHandler http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	if sse {
		mcpHandler = mcp.NewSSEHandler(func(r *http.Request) *mcp.Server {
			return newServer(auth.TokenInfoFromContext(r.Context()).UserID)
		}, nil)
	}
	h := auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{ResourceMetadataURL: prm})(mcpHandler)
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ps.mu.Lock()
		ps.authz = append(ps.authz, r.Header.Get("Authorization"))
		ps.custom = append(ps.custom, r.Header.Get("X-Custom"))
		ps.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	return ps
}

// seen returns copies of what the server recorded.
func (ps *protectedServer) seen() (authz, custom []string, sessions map[string][]string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	sessions = make(map[string][]string, len(ps.sessions))
	for k, v := range ps.sessions {
		sessions[k] = slices.Clone(v)
	}
	return slices.Clone(ps.authz), slices.Clone(ps.custom), sessions
}

// testClock is the OAuth manager's clock, moved forward to expire tokens.
type testClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

// oauthEnv is a gateway with an OAuth manager, an authorization server, a
// protected MCP server and the gateway's callback route.
type oauthEnv struct {
	*env
	as    *authServer
	ps    *protectedServer
	m     *oauth.Manager
	clock *testClock
	g     *Gateway
	mcp   string // the gateway's /mcp URL
}

func newOAuthEnv(t testing.TB, sse bool) *oauthEnv {
	e := &oauthEnv{env: newEnv(t), clock: &testClock{}}
	e.as = newAuthServer(t)
	e.ps = newProtectedServer(t, e.as, sse)
	cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != oauth.CallbackPath {
			http.NotFound(w, r)
			return
		}
		res, err := e.m.Callback(r.Context(), oauth.ParamsFromRequest(r, 0))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, res.ServerName)
	}))
	t.Cleanup(cb.Close)
	m, err := oauth.New(e.st, &oauth.Options{PublicURL: cb.URL, NowFunc: e.clock.Now,
		Logger: slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
	return e
}

func (e *oauthEnv) start() {
	e.g = e.gateway(func(o *Options) { o.OAuth = e.m })
	e.mcp = e.serve(e.g).URL + "/mcp"
}

// addProtected stores a shared remote server on the protected MCP server
// with OAuth in mode, and a configured Authorization header that must never
// be sent once OAuth is on.
func (e *oauthEnv) addProtected(name, mode string) store.Server {
	return e.addProtectedAs(name, mode, "streamable-http")
}

func (e *oauthEnv) addProtectedAs(name, mode, protocol string) store.Server {
	e.t.Helper()
	ctx := context.Background()
	s, err := e.st.CreateServer(ctx, store.Actor{UserID: e.admin.ID}, store.Server{Name: name, Protocol: protocol,
		URL: e.ps.endpoint, Enabled: true, Quarantined: true, Shared: true, OwnerID: e.admin.ID,
		Headers: map[string]string{"Authorization": "Bearer configured-secret", "X-Custom": "kept"}})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.st.PutServerOAuth(ctx, store.Actor{UserID: e.admin.ID}, store.ServerOAuth{ServerID: s.ID, Mode: mode}); err != nil {
		e.t.Fatal(err)
	}
	return s
}

// authorize runs the authorization code flow for u as the subject of the
// same name: Start, the browser at the authorization server, Callback.
func (e *oauthEnv) authorize(srv store.Server, u store.User, subject string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := e.m.Start(ctx, srv, u.ID)
	if err != nil {
		e.t.Fatalf("starting OAuth for %s: %v", subject, err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.URL, nil)
	req.Header.Set("X-Test-User", subject)
	jar, _ := cookiejar.New(nil)
	cbURL, _ := url.Parse(e.m.RedirectURI())
	jar.SetCookies(cbURL, []*http.Cookie{a.Cookie}) // the browser that started the flow comes back
	resp, err := (&http.Client{Jar: jar}).Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != srv.Name {
		e.t.Fatalf("OAuth callback for %s: %d %s", subject, resp.StatusCode, body)
	}
}

// whoami calls the protected server's whoami tool through cs.
func whoamiVia(t testing.TB, cs *mcp.ClientSession, server string) *mcp.CallToolResult {
	t.Helper()
	return callTool(t, cs, "call_tool_read", map[string]any{"name": server + ":whoami"})
}

func mustBe(t testing.TB, res *mcp.CallToolResult, want string) {
	t.Helper()
	if res.IsError || resultText(res) != want {
		t.Fatalf("whoami answered %q (error: %v), want %q", resultText(res), res.IsError, want)
	}
}

// assertNoClientCredentials checks what reached the upstream: bearer
// tokens of the authorization server only, never a gateway token nor the
// configured Authorization header; the other configured header still.
func (e *oauthEnv) assertNoClientCredentials(gatewayTokens ...string) {
	e.t.Helper()
	authz, custom, _ := e.ps.seen()
	if len(authz) == 0 {
		e.t.Fatal("the protected server saw no requests")
	}
	for _, h := range authz {
		if h != "" && !strings.HasPrefix(h, "Bearer at-") {
			e.t.Errorf("the upstream received Authorization %q, not a token of its authorization server", h)
		}
		for _, tok := range gatewayTokens {
			if strings.Contains(h, tok) {
				e.t.Errorf("the MCP client's own token reached the upstream")
			}
		}
	}
	if !slices.Contains(custom, "kept") {
		e.t.Errorf("the configured X-Custom header was not sent: %q", custom)
	}
}

func TestOAuthPerUser(t *testing.T) {
	e := newOAuthEnv(t, false)
	srv := e.addProtected("protected", store.OAuthPerUser)
	e.start()
	aliceTok, bobTok := e.token(e.alice, apikey.Personal, nil, nil), e.token(e.bob, apikey.Personal, nil, nil)
	adminTok := e.token(e.admin, apikey.Personal, nil, nil)
	alice, _ := connect(t, e.mcp, aliceTok)
	bob, _ := connect(t, e.mcp, bobTok)
	admin, _ := connect(t, e.mcp, adminTok)

	// Nobody authorized (and only the approver sees the quarantined
	// server): a clear tool error naming the route, and no instance, let
	// alone a restarting one.
	res := whoamiVia(t, admin, "protected")
	if !res.IsError || !strings.Contains(resultText(res), "POST /api/v1/servers/protected/oauth/start") {
		t.Fatalf("call without a token: %q (error %v), want the oauth/start route", resultText(res), res.IsError)
	}
	if keys := e.g.sup.Keys(); len(keys) != 0 {
		t.Fatalf("instances %q were created for a user without a token", keys)
	}
	if _, ok := e.g.sup.Instance(userKey("protected", e.bob.ID)); ok {
		t.Fatal("an instance was created for a user without a token")
	}
	if st := e.g.Status("protected"); st.State != StateQuarantined {
		t.Fatalf("status before any token: %+v", st)
	}

	// The admin authorizes and approves: the listing comes from their session.
	e.authorize(srv, e.admin, "admin-account")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.g.Approve(ctx, store.Actor{UserID: e.admin.ID}, "protected"); err != nil {
		t.Fatalf("approving: %v", err)
	}

	// Bob still has no token of his own and does not borrow the admin's.
	res = whoamiVia(t, bob, "protected")
	if !res.IsError || !strings.Contains(resultText(res), "oauth/start") {
		t.Fatalf("bob without a token: %q", resultText(res))
	}

	e.authorize(srv, e.alice, "alice-account")
	e.authorize(srv, e.bob, "bob-account")
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { mustBe(t, whoamiVia(t, alice, "protected"), "alice-account") })
		wg.Go(func() { mustBe(t, whoamiVia(t, bob, "protected"), "bob-account") })
	}
	wg.Wait()
	for _, u := range []store.User{e.alice, e.bob} {
		if st := e.g.StatusFor("protected", u.ID); st.State != string(upstream.StateReady) {
			t.Fatalf("user %d's instance: %+v", u.ID, st)
		}
	}
	if st := e.g.Status("protected"); st.State != string(upstream.StateReady) {
		t.Fatalf("caller-independent status: %+v", st)
	}
	if st := e.g.StatusFor("protected", e.user("carol@example.test", "member").ID); st.State != string(upstream.StateStopped) {
		t.Fatalf("status for a user without an instance: %+v", st)
	}

	// Forced expiry (the manager's clock passes the token's lifetime): the
	// next call refreshes and succeeds.
	before := e.as.refreshCount()
	oldTok, err := e.st.GetOAuthToken(ctx, srv.ID, e.alice.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.advance(2 * time.Hour)
	mustBe(t, whoamiVia(t, alice, "protected"), "alice-account")
	newTok, err := e.st.GetOAuthToken(ctx, srv.ID, e.alice.ID)
	if err != nil {
		t.Fatal(err)
	}
	if e.as.refreshCount() <= before || newTok.AccessToken == oldTok.AccessToken {
		t.Fatalf("no refresh after the forced expiry (refreshes %d -> %d)", before, e.as.refreshCount())
	}

	// The upstream refuses bob's token before it expires: his session gets
	// a 401, refreshes through the OAuth handler and the call goes through.
	before = e.as.refreshCount()
	e.as.revokeAccessOf("bob-account")
	mustBe(t, whoamiVia(t, bob, "protected"), "bob-account")
	if e.as.refreshCount() != before+1 {
		t.Fatalf("refreshes after the upstream refused bob's token: %d, want %d", e.as.refreshCount(), before+1)
	}
	mustBe(t, whoamiVia(t, alice, "protected"), "alice-account")

	// Every upstream session carried one account's tokens only.
	_, _, sessions := e.ps.seen()
	if len(sessions) < 3 {
		t.Fatalf("the upstream saw %d sessions, want one per user (3)", len(sessions))
	}
	for sid, subjects := range sessions {
		if len(subjects) != 1 {
			t.Errorf("upstream session %s carried the tokens of %q", sid, subjects)
		}
	}
	e.assertNoClientCredentials(aliceTok, bobTok, adminTok)

	// Another replica has never listed the server: a search by a user with
	// a token lists it through that user's own session.
	g2 := e.gateway(func(o *Options) { o.OAuth = e.m })
	alice2, _ := connect(t, e.serve(g2).URL+"/mcp", aliceTok)
	hits := retrieve(t, alice2, "whoami account", 5)
	if !slices.Contains(hitNames(hits), "protected:whoami") || hits[0].State != ToolApproved {
		t.Fatalf("search on a fresh replica: %+v", hits)
	}
	if _, ok := g2.sup.Instance(userKey("protected", e.alice.ID)); !ok {
		t.Fatal("the fresh replica did not list through alice's instance")
	}
	mustBe(t, whoamiVia(t, alice2, "protected"), "alice-account")
}

func TestOAuthShared(t *testing.T) {
	e := newOAuthEnv(t, false)
	srv := e.addProtected("svc", store.OAuthShared)
	e.start()
	aliceTok, bobTok := e.token(e.alice, apikey.Personal, nil, nil), e.token(e.bob, apikey.Personal, nil, nil)
	alice, _ := connect(t, e.mcp, aliceTok)
	bob, _ := connect(t, e.mcp, bobTok)
	admin, _ := connect(t, e.mcp, e.token(e.admin, apikey.Personal, nil, nil))

	res := whoamiVia(t, admin, "svc")
	if !res.IsError || !strings.Contains(resultText(res), "shared account") ||
		!strings.Contains(resultText(res), "POST /api/v1/servers/svc/oauth/start") {
		t.Fatalf("call before the service account authorized: %q", resultText(res))
	}
	if inst, ok := e.g.sup.Instance("svc"); !ok || inst.Status().Starts != 0 || inst.State() != upstream.StateStopped {
		t.Fatal("the shared instance started without a token")
	}

	e.authorize(srv, e.admin, "service-account")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.g.Approve(ctx, store.Actor{UserID: e.admin.ID}, "svc"); err != nil {
		t.Fatalf("approving: %v", err)
	}
	mustBe(t, whoamiVia(t, alice, "svc"), "service-account")
	mustBe(t, whoamiVia(t, bob, "svc"), "service-account")
	if keys := e.g.sup.Keys(); !slices.Equal(keys, []string{"svc"}) {
		t.Fatalf("instances %q, want the one shared instance", keys)
	}
	if _, err := e.st.GetOAuthToken(ctx, srv.ID, e.admin.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the shared flow stored a personal token: %v", err)
	}
	e.assertNoClientCredentials(aliceTok, bobTok)
}

// A remote server that gets an OAuth configuration after the gateway read
// it (the configuration has no notification of its own) is re-read on the
// next call, which then carries the caller's token.
func TestOAuthConfiguredLater(t *testing.T) {
	e := newOAuthEnv(t, false)
	srv, err := e.st.CreateServer(context.Background(), store.Actor{UserID: e.admin.ID}, store.Server{Name: "later",
		Protocol: "streamable-http", URL: e.ps.endpoint, Enabled: true, Shared: true, OwnerID: e.admin.ID})
	if err != nil {
		t.Fatal(err)
	}
	e.start()
	if info := e.g.lookup("later"); info == nil || info.OAuth != "" {
		t.Fatalf("before configuring: %+v", info)
	}
	// Start configures per-user mode for a server without a configuration.
	e.authorize(srv, e.alice, "alice-account")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.g.Approve(ctx, store.Actor{UserID: e.alice.ID}, "later"); err != nil {
		t.Fatalf("approving: %v", err)
	}
	alice, _ := connect(t, e.mcp, e.token(e.alice, apikey.Personal, nil, nil))
	mustBe(t, whoamiVia(t, alice, "later"), "alice-account")
	if info := e.g.lookup("later"); info == nil || info.OAuth != store.OAuthPerUser {
		t.Fatalf("after configuring: %+v", info)
	}
	if _, ok := e.g.sup.Instance(userKey("later", e.alice.ID)); !ok {
		t.Fatal("alice's call did not go to an instance of her own")
	}
}

// A user's per-user instance counts against their cap on live instances,
// with their personal servers, and stops after the idle timeout.
func TestOAuthPerUserCapAndIdle(t *testing.T) {
	e := newOAuthEnv(t, false)
	cfg := settings.Defaults("none")
	cfg.Upstreams.MaxPersonalInstances = 1
	cfg.Upstreams.IdleTimeoutSeconds = 1
	if _, err := e.st.InitSetting(context.Background(), settings.Key, cfg); err != nil {
		t.Fatal(err)
	}
	srv := e.addProtected("protected", store.OAuthPerUser)
	e.addEcho(e.alice, "mine", false, nil)
	e.start()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.authorize(srv, e.alice, "alice-account")
	for _, n := range []string{"protected", "mine"} {
		if _, err := e.g.Approve(ctx, store.Actor{UserID: e.alice.ID}, n); err != nil {
			t.Fatalf("approving %s: %v", n, err)
		}
	}
	alice, _ := connect(t, e.mcp, e.token(e.alice, apikey.Personal, nil, nil))
	mustBe(t, whoamiVia(t, alice, "protected"), "alice-account")
	inst, ok := e.g.sup.Instance(userKey("protected", e.alice.ID))
	if !ok {
		t.Fatal("no instance for alice")
	}
	eventually(t, 10*time.Second, func() bool { return inst.State() == upstream.StateStopped },
		"alice's idle per-user instance stops")

	mustBe(t, whoamiVia(t, alice, "protected"), "alice-account")
	res := callTool(t, alice, "call_tool_read", map[string]any{"name": "mine:echo", "args": map[string]any{"text": "x"}})
	if res.IsError {
		t.Fatalf("personal server: %s", resultText(res))
	}
	if inst.State() != upstream.StateStopped {
		t.Fatalf("alice's per-user instance is %s after her personal server took the only slot", inst.State())
	}
}

// An SSE server gets the caller's token through the transport wrapper, and
// a refused token is refreshed and the request retried.
func TestOAuthPerUserSSE(t *testing.T) {
	e := newOAuthEnv(t, true)
	srv := e.addProtectedAs("legacy", store.OAuthPerUser, "sse")
	e.start()
	e.authorize(srv, e.alice, "alice-account")
	e.authorize(srv, e.bob, "bob-account")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.g.Approve(ctx, store.Actor{UserID: e.admin.ID}, "legacy"); err == nil ||
		!strings.Contains(err.Error(), "oauth/start") {
		t.Fatalf("approving without a token of the approver's own: %v", err)
	}
	if _, err := e.g.Approve(ctx, store.Actor{UserID: e.alice.ID}, "legacy"); err != nil {
		t.Fatalf("approving: %v", err)
	}
	aliceTok, bobTok := e.token(e.alice, apikey.Personal, nil, nil), e.token(e.bob, apikey.Personal, nil, nil)
	alice, _ := connect(t, e.mcp, aliceTok)
	bob, _ := connect(t, e.mcp, bobTok)
	mustBe(t, whoamiVia(t, alice, "legacy"), "alice-account")
	mustBe(t, whoamiVia(t, bob, "legacy"), "bob-account")

	before := e.as.refreshCount()
	e.as.revokeAccessOf("bob-account")
	mustBe(t, whoamiVia(t, bob, "legacy"), "bob-account")
	if e.as.refreshCount() != before+1 {
		t.Fatalf("refreshes after the upstream refused bob's token: %d, want %d", e.as.refreshCount(), before+1)
	}
	mustBe(t, whoamiVia(t, alice, "legacy"), "alice-account")
	_, _, sessions := e.ps.seen()
	if len(sessions) < 2 {
		t.Fatalf("the upstream saw %d sessions, want one per user (2)", len(sessions))
	}
	for sid, subjects := range sessions {
		if len(subjects) != 1 {
			t.Errorf("upstream session %s carried the tokens of %q", sid, subjects)
		}
	}
	e.assertNoClientCredentials(aliceTok, bobTok)
}

// BenchmarkOAuthCall measures a call through /mcp to a per-user OAuth
// server (mode and token looked up in Postgres per call) against the same
// call to a remote server without OAuth.
func BenchmarkOAuthCall(b *testing.B) {
	e := newOAuthEnv(b, false)
	srv := e.addProtected("protected", store.OAuthPerUser)
	plainURL, _ := remoteUpstream(b)
	e.addRemote(e.admin, "plain", plainURL)
	e.start()
	e.authorize(srv, e.alice, "alice-account")
	ctx := context.Background()
	for _, n := range []string{"protected", "plain"} {
		waitKnown(b, e.g, n)
		if _, err := e.g.Approve(ctx, store.Actor{UserID: e.alice.ID}, n); err != nil {
			b.Fatal(err)
		}
	}
	cs, _ := connect(b, e.mcp, e.token(e.alice, apikey.Personal, nil, nil))
	for _, bc := range []struct {
		name, tool string
		args       map[string]any
	}{{"oauth-per-user", "protected:whoami", map[string]any{}}, {"plain-remote", "plain:forecast", map[string]any{"city": "Oslo"}}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "call_tool_read", Arguments: map[string]any{"name": bc.tool, "args": bc.args}})
				if err != nil || res.IsError {
					b.Fatalf("%v %s", err, resultText(res))
				}
			}
		})
	}
}
