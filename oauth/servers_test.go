package oauth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
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
)

// testAS is a small OAuth 2.1 authorization server: RFC 8414 metadata,
// RFC 7591 registration, an authorization endpoint that approves at once for
// the user named by the X-Test-User header, and a token endpoint with PKCE
// S256, RFC 8707 resource checks and rotating refresh tokens.
type testAS struct {
	srv      *httptest.Server
	resource string // the only resource it issues tokens for

	mu      sync.Mutex
	clients map[string]*asClient
	codes   map[string]*asCode
	access  map[string]*asGrant
	refresh map[string]*asGrant
	// secrets holds every secret value it issued or was shown, for the
	// plaintext-at-rest check.
	secrets       []string
	registrations int
	revocations   int
	exchanges     int
	refreshes     int
	refreshTried  int
	// holdRefresh, when set, is waited on by every refresh grant after it
	// announced itself on refreshSeen.
	holdRefresh chan struct{}
	refreshSeen chan struct{}
}

type asClient struct {
	secret    string
	redirects []string
}

type asCode struct {
	client, redirect, challenge, resource, subject string
}

type asGrant struct {
	client, subject string
	expiry          time.Time
	refresh         string // the refresh token issued with an access token
}

func newTestAS(t testing.TB) *testAS {
	as := &testAS{clients: map[string]*asClient{}, codes: map[string]*asCode{},
		access: map[string]*asGrant{}, refresh: map[string]*asGrant{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", as.metadata)
	mux.HandleFunc("POST /register", as.register)
	mux.HandleFunc("GET /authorize", as.authorize)
	mux.HandleFunc("POST /token", as.token)
	mux.HandleFunc("POST /revoke", as.revoke)
	as.srv = httptest.NewServer(mux)
	t.Cleanup(as.srv.Close)
	return as
}

func randText(prefix string) string {
	var b [18]byte
	rand.Read(b[:])
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

func (as *testAS) remember(vs ...string) {
	as.secrets = append(as.secrets, vs...)
}

// Secrets returns a copy of every secret the server has seen.
func (as *testAS) Secrets() []string {
	as.mu.Lock()
	defer as.mu.Unlock()
	return slices.Clone(as.secrets)
}

func (as *testAS) counts() (registrations, exchanges, refreshes int) {
	as.mu.Lock()
	defer as.mu.Unlock()
	return as.registrations, as.exchanges, as.refreshes
}

// addClient pre-registers a client, as an operator would at an IdP.
func (as *testAS) addClient(id, secret, redirect string) {
	as.mu.Lock()
	defer as.mu.Unlock()
	as.clients[id] = &asClient{secret: secret, redirects: []string{redirect}}
	as.remember(secret)
}

// lookup validates an access token for the resource server.
func (as *testAS) lookup(tok string) (*asGrant, bool) {
	as.mu.Lock()
	defer as.mu.Unlock()
	g, ok := as.access[tok]
	if !ok || time.Now().After(g.expiry) {
		return nil, false
	}
	c := *g
	return &c, true
}

// revokeAccess drops an access token but keeps its refresh token, as a
// server that shortened a token's life would.
func (as *testAS) revokeAccess(tok string) {
	as.mu.Lock()
	defer as.mu.Unlock()
	delete(as.access, tok)
}

// revokeRefresh drops every refresh token of a subject.
func (as *testAS) revokeRefresh(subject string) {
	as.mu.Lock()
	defer as.mu.Unlock()
	for k, g := range as.refresh {
		if g.subject == subject {
			delete(as.refresh, k)
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func oauthError(w http.ResponseWriter, status int, code string) {
	writeJSON(w, status, map[string]string{"error": code})
}

func (as *testAS) metadata(w http.ResponseWriter, r *http.Request) {
	u := as.srv.URL
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                         as.srv.URL,
		"authorization_endpoint":                         u + "/authorize",
		"token_endpoint":                                 u + "/token",
		"revocation_endpoint":                            u + "/revoke",
		"registration_endpoint":                          u + "/register",
		"response_types_supported":                       []string{"code"},
		"grant_types_supported":                          []string{"authorization_code", "refresh_token"},
		"code_challenge_methods_supported":               []string{"S256"},
		"token_endpoint_auth_methods_supported":          []string{"client_secret_basic"},
		"scopes_supported":                               []string{"mcp:tools", "offline_access"},
		"authorization_response_iss_parameter_supported": true,
	})
}

func (as *testAS) register(w http.ResponseWriter, r *http.Request) {
	var meta oauthex.ClientRegistrationMetadata
	if err := json.NewDecoder(r.Body).Decode(&meta); err != nil || len(meta.RedirectURIs) == 0 {
		oauthError(w, http.StatusBadRequest, "invalid_client_metadata")
		return
	}
	as.mu.Lock()
	id, secret := randText("client-"), randText("csecret-")
	as.clients[id] = &asClient{secret: secret, redirects: meta.RedirectURIs}
	as.registrations++
	as.remember(secret)
	as.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]any{
		"client_id": id, "client_secret": secret, "redirect_uris": meta.RedirectURIs,
		"token_endpoint_auth_method": "client_secret_basic", "client_id_issued_at": time.Now().Unix(),
	})
}

func (as *testAS) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	subject := r.Header.Get("X-Test-User")
	if subject == "" {
		http.Error(w, "log in first", http.StatusUnauthorized)
		return
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	c := as.clients[q.Get("client_id")]
	redirect := q.Get("redirect_uri")
	if c == nil || !slices.Contains(c.redirects, redirect) {
		http.Error(w, "unknown client or redirect", http.StatusBadRequest)
		return
	}
	if q.Get("response_type") != "code" || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" ||
		q.Get("resource") != as.resource || q.Get("state") == "" {
		http.Error(w, "bad authorization request", http.StatusBadRequest)
		return
	}
	code := randText("code-")
	as.codes[code] = &asCode{client: q.Get("client_id"), redirect: redirect, challenge: q.Get("code_challenge"),
		resource: q.Get("resource"), subject: subject}
	as.remember(code, q.Get("state"))
	back, _ := url.Parse(redirect)
	bq := back.Query()
	bq.Set("code", code)
	bq.Set("state", q.Get("state"))
	bq.Set("iss", as.srv.URL)
	back.RawQuery = bq.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

func (as *testAS) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request")
		return
	}
	id, secret, ok := r.BasicAuth()
	if ok {
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
	} else {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	f := r.PostForm
	if f.Get("grant_type") == "refresh_token" {
		as.mu.Lock()
		as.refreshTried++
		hold, seen := as.holdRefresh, as.refreshSeen
		as.mu.Unlock()
		if seen != nil {
			seen <- struct{}{}
		}
		if hold != nil {
			<-hold
		}
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	c := as.clients[id]
	if c == nil || c.secret != secret {
		oauthError(w, http.StatusUnauthorized, "invalid_client")
		return
	}
	if f.Get("resource") != as.resource {
		oauthError(w, http.StatusBadRequest, "invalid_target")
		return
	}
	var subject string
	switch f.Get("grant_type") {
	case "authorization_code":
		code := as.codes[f.Get("code")]
		delete(as.codes, f.Get("code")) // single use, even when the rest fails
		if code == nil || code.client != id || code.redirect != f.Get("redirect_uri") || code.resource != f.Get("resource") {
			oauthError(w, http.StatusBadRequest, "invalid_grant")
			return
		}
		sum := sha256.Sum256([]byte(f.Get("code_verifier")))
		if base64.RawURLEncoding.EncodeToString(sum[:]) != code.challenge {
			oauthError(w, http.StatusBadRequest, "invalid_grant")
			return
		}
		as.remember(f.Get("code_verifier"))
		as.exchanges++
		subject = code.subject
	case "refresh_token":
		g := as.refresh[f.Get("refresh_token")]
		if g == nil || g.client != id {
			oauthError(w, http.StatusBadRequest, "invalid_grant")
			return
		}
		// Rotation: the old refresh token and its access token die.
		delete(as.refresh, f.Get("refresh_token"))
		for k, a := range as.access {
			if a.refresh == f.Get("refresh_token") {
				delete(as.access, k)
			}
		}
		as.refreshes++
		subject = g.subject
	default:
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type")
		return
	}
	at, rt := randText("at-"), randText("rt-")
	exp := time.Now().Add(time.Hour)
	as.access[at] = &asGrant{client: id, subject: subject, expiry: exp, refresh: rt}
	as.refresh[rt] = &asGrant{client: id, subject: subject}
	as.remember(at, rt)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{
		"access_token": at, "token_type": "Bearer", "expires_in": 3600, "refresh_token": rt, "scope": "mcp:tools",
	})
}

// revoke implements RFC 7009 for a confidential client: a refresh token
// takes its access tokens with it.
func (as *testAS) revoke(w http.ResponseWriter, r *http.Request) {
	id, secret, _ := r.BasicAuth()
	id, _ = url.QueryUnescape(id)
	secret, _ = url.QueryUnescape(secret)
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request")
		return
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	if c := as.clients[id]; c == nil || c.secret != secret {
		oauthError(w, http.StatusUnauthorized, "invalid_client")
		return
	}
	tok := r.PostForm.Get("token")
	if g := as.refresh[tok]; g != nil && g.client == id {
		delete(as.refresh, tok)
		for k, a := range as.access {
			if a.refresh == tok {
				delete(as.access, k)
			}
		}
		as.revocations++
	}
	if g := as.access[tok]; g != nil && g.client == id {
		delete(as.access, tok)
		as.revocations++
	}
	w.WriteHeader(http.StatusOK)
}

// testRS is a Streamable HTTP MCP server that requires the AS's tokens. It
// records, for every request, which subject's token came with which caller
// (the X-Caller header the test's client sets), so a test can assert that a
// user's calls never carried another user's token.
type testRS struct {
	srv      *httptest.Server
	endpoint string

	mu   sync.Mutex
	seen []seenRequest
}

type seenRequest struct {
	caller, subject, token string
}

func newTestRS(t testing.TB, as *testAS) *testRS {
	rs := &testRS{}
	mux := http.NewServeMux()
	rs.srv = httptest.NewServer(mux)
	t.Cleanup(rs.srv.Close)
	rs.endpoint = rs.srv.URL + "/mcp"
	as.resource = rs.endpoint
	prmURL := rs.srv.URL + "/.well-known/oauth-protected-resource/mcp"
	mux.Handle("/.well-known/oauth-protected-resource/mcp", auth.ProtectedResourceMetadataHandler(
		&oauthex.ProtectedResourceMetadata{Resource: rs.endpoint, AuthorizationServers: []string{as.srv.URL},
			ScopesSupported: []string{"mcp:tools"}}))

	server := mcp.NewServer(&mcp.Implementation{Name: "protected", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "whoami"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: req.Extra.TokenInfo.UserID}}}, nil, nil
	})
	verify := func(_ context.Context, tok string, r *http.Request) (*auth.TokenInfo, error) {
		g, ok := as.lookup(tok)
		rs.mu.Lock()
		defer rs.mu.Unlock()
		if !ok {
			rs.seen = append(rs.seen, seenRequest{caller: r.Header.Get("X-Caller"), token: tok})
			return nil, fmt.Errorf("%w: unknown or expired token", auth.ErrInvalidToken)
		}
		rs.seen = append(rs.seen, seenRequest{caller: r.Header.Get("X-Caller"), subject: g.subject, token: tok})
		return &auth.TokenInfo{UserID: g.subject, Expiration: g.expiry, Scopes: []string{"mcp:tools"}}, nil
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	mux.Handle("/mcp", auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{ResourceMetadataURL: prmURL})(h))
	return rs
}

func (rs *testRS) requests() []seenRequest {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return slices.Clone(rs.seen)
}

// callerHeader marks a test client's requests with the gateway user they
// stand for, so the resource server can tell whose call a token came with.
type callerHeader struct {
	caller string
	base   http.RoundTripper
}

func (c callerHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Caller", c.caller)
	return c.base.RoundTrip(r)
}

func subjects(reqs []seenRequest, caller string) []string {
	var out []string
	for _, r := range reqs {
		if r.caller == caller && !slices.Contains(out, r.subject) {
			out = append(out, r.subject)
		}
	}
	return out
}

func containsAny(s string, secrets []string) string {
	for _, v := range secrets {
		if v != "" && strings.Contains(s, v) {
			return v
		}
	}
	return ""
}
