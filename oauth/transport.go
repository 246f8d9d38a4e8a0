package oauth

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"golang.org/x/oauth2"
)

// ErrNeedsAuthorization is what a call fails with when the upstream refuses
// the token (or there is none) and refreshing does not help: the user has
// to go through Start again.
var ErrNeedsAuthorization = errors.New("upstream requires OAuth authorization; start it from the server's oauth/start")

// Handler returns the auth.OAuthHandler for
// mcp.StreamableClientTransport.OAuthHandler when userID calls the server
// at endpoint (its configured URL, the transport's Endpoint):
// its TokenSource reads the token from Postgres (refreshing before expiry),
// and on a 401 it refreshes once and lets the SDK retry. It never runs an
// interactive flow: that starts from the REST API.
func (m *Manager) Handler(serverID, userID int64, endpoint string) auth.OAuthHandler {
	return &handler{m: m, serverID: serverID, userID: userID, endpoint: endpoint}
}

type handler struct {
	m                *Manager
	serverID, userID int64
	endpoint         string
}

func (h *handler) TokenSource(context.Context) (oauth2.TokenSource, error) {
	return h.m.TokenSource(h.serverID, h.userID, h.endpoint), nil
}

func (h *handler) Authorize(ctx context.Context, req *http.Request, resp *http.Response) error {
	drain(resp.Body)
	if resp.StatusCode == http.StatusForbidden {
		// Step-up (insufficient_scope) needs the user; a plain 403 is final.
		return fmt.Errorf("%w: the upstream answered 403", ErrNeedsAuthorization)
	}
	return h.m.renew(ctx, h.serverID, h.userID, h.endpoint, bearer(req.Header))
}

// renew handles a 401 for a request that carried sent (maybe ""): it
// refreshes the stored token unless a concurrent refresh already replaced it.
func (m *Manager) renew(ctx context.Context, serverID, userID int64, endpoint, sent string) error {
	t, err := m.st.GetOAuthTokenFor(ctx, serverID, userID)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNeedsAuthorization, ErrNoToken)
	}
	if subtle.ConstantTimeCompare(t.URLHash, hashURL(endpoint)) != 1 {
		return fmt.Errorf("%w: %v", ErrNeedsAuthorization, ErrURLChanged)
	}
	if sent == "" {
		sent = t.AccessToken // the request had none: treat the stored one as refused
	}
	if _, err := m.refresh(ctx, t.ServerID, t.UserID, sent); err != nil {
		return fmt.Errorf("%w: %v", ErrNeedsAuthorization, err)
	}
	return nil
}

func bearer(h http.Header) string {
	v := h.Get("Authorization")
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return v[7:]
	}
	return ""
}

// Transport returns an http.RoundTripper for an SSE upstream (whose SDK
// transport has no OAuthHandler): on requests to endpoint's origin it
// replaces any Authorization header with the caller's token, and on a 401 it
// refreshes and retries once; to any other origin it sends no Authorization
// at all. base nil is http.DefaultTransport.
func (m *Manager) Transport(base http.RoundTripper, endpoint string, serverID, userID int64) (http.RoundTripper, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("oauth transport: endpoint is not an absolute http(s) URL")
	}
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{m: m, base: base, endpoint: endpoint, origin: origin(u), serverID: serverID, userID: userID}, nil
}

type transport struct {
	m                *Manager
	base             http.RoundTripper
	endpoint, origin string
	serverID, userID int64
}

func origin(u *url.URL) string {
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return strings.ToLower(u.Scheme) + "://" + host + ":" + port
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if origin(req.URL) != t.origin {
		if req.Header.Get("Authorization") == "" {
			return t.base.RoundTrip(req)
		}
		r := req.Clone(req.Context())
		r.Header.Del("Authorization")
		return t.base.RoundTrip(r)
	}
	tok, err := t.m.Token(req.Context(), t.serverID, t.userID, t.endpoint)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	resp, err := t.base.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, err
	}
	if req.Body != nil && req.GetBody == nil {
		// Cannot replay the body: renew for the next request only.
		t.m.renew(req.Context(), t.serverID, t.userID, t.endpoint, tok.AccessToken)
		return resp, nil
	}
	if err := t.m.renew(req.Context(), t.serverID, t.userID, t.endpoint, tok.AccessToken); err != nil {
		return resp, nil // the 401 stands
	}
	tok2, err := t.m.Token(req.Context(), t.serverID, t.userID, t.endpoint)
	if err != nil {
		return resp, nil
	}
	drain(resp.Body)
	r2 := req.Clone(req.Context())
	if req.GetBody != nil {
		if r2.Body, err = req.GetBody(); err != nil {
			return nil, err
		}
	}
	r2.Header.Set("Authorization", "Bearer "+tok2.AccessToken)
	return t.base.RoundTrip(r2)
}
