// Package oauth signs the gateway in to remote MCP servers that require
// OAuth (the MCP authorization spec): discovery from the server's 401
// (RFC 9728 protected resource metadata, RFC 8414 authorization server
// metadata), dynamic client registration (RFC 7591) when no client id is
// configured, the authorization code flow with PKCE S256 and resource
// indicators (RFC 8707), and refresh before expiry, one at a time across
// replicas.
//
// Everything lives in Postgres (through store), so a flow started on one
// replica can end on another and a refresh made by one is seen by all.
// Tokens are per user or, for a server whose OAuth mode is shared, one per
// server; the mode decides which token a call carries. No token, secret,
// state or verifier ever appears in an error, a log line or a status.
//
// # Wiring
//
//   - POST /api/v1/servers/{name}/oauth/start: Start; answer the URL and set
//     Authorization.Cookie on the response (it binds the flow to the browser).
//   - GET /oauth/callback (public, on the gateway's listener): Callback with
//     ParamsFromRequest(r, userIDIfKnown); ErrBadState is 400.
//   - DELETE /api/v1/servers/{name}/oauth: Forget.
//   - The server object's oauth field: Status, or Statuses for a listing.
//   - Upstream sessions: StreamableClientTransport.OAuthHandler = Handler;
//     for SSE, the HTTP client's transport wrapped by Transport. In per-user
//     mode (Mode) each user needs a session of their own.
package oauth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mcpgate/mcpgate/store"
)

// Sentinel errors. Their messages, and those of errors wrapping them, never
// carry a token or secret.
var (
	// ErrNotOAuth means the server cannot use OAuth: it is not a remote
	// (streamable-http or sse) server with a URL.
	ErrNotOAuth = errors.New("server is not a remote MCP server; OAuth does not apply")
	// ErrBadState means a callback's state is unknown, expired, already used
	// or was started by another user. The REST layer answers 400.
	ErrBadState = errors.New("unknown, expired or already used OAuth state")
	// ErrDenied means the authorization server (or the user there) refused.
	ErrDenied = errors.New("authorization refused by the authorization server")
	// ErrNoToken means nobody authorized this server for this caller yet.
	ErrNoToken = errors.New("no OAuth token for this server; authorize it first")
	// ErrExpired means the stored token expired or was revoked and cannot be
	// refreshed; the user has to authorize again.
	ErrExpired = errors.New("OAuth token expired and cannot be refreshed; authorize again")
	// ErrURLChanged means the server's URL changed since its token was
	// issued: the token is not sent to the new URL (another host, maybe);
	// the user has to authorize again.
	ErrURLChanged = errors.New("the server's URL changed since it was authorized; authorize again")
	// ErrDiscovery means the server's authorization server could not be
	// found or does not meet the MCP authorization spec.
	ErrDiscovery = errors.New("discovering the OAuth authorization server")
)

// Status values of a server's OAuth token, as the server object shows them.
const (
	StatusNone       = "none"
	StatusAuthorized = "authorized"
	StatusExpired    = "expired"
	StatusError      = "error"
)

// CallbackPath is where the authorization server sends the browser back, on
// the gateway's own listener.
const CallbackPath = "/oauth/callback"

// Options configure a Manager. A nil *Options is PublicURL "http://localhost:8080".
type Options struct {
	// PublicURL is the gateway's external base URL (MCPGATE_PUBLIC_URL); the
	// redirect URI is PublicURL + CallbackPath.
	PublicURL string
	// HTTPClient makes discovery, registration and token requests. The
	// default refuses private, link-local and CGNAT addresses at dial time
	// (loopback is allowed), as the go-sdk does for discovery; an operator
	// with an internal IdP passes a client of their own.
	HTTPClient *http.Client
	Logger     *slog.Logger
	NowFunc    func() time.Time
	// FlowTTL bounds the time from start to callback; default 10 min.
	FlowTTL time.Duration
	// RefreshMargin: a token this close to its expiry is refreshed before
	// use; default 1 min.
	RefreshMargin time.Duration
	// RequestTimeout bounds each request to an authorization server, and a
	// token look-up made through a TokenSource; default 30 s.
	RequestTimeout time.Duration
	// ClientName is the client_name of dynamic registrations; default "mcpgate".
	ClientName string
	// AllowUnboundCallbacks accepts a callback that neither comes from a
	// session of the user who started the flow nor carries the flow's
	// binding cookie (a flow started from a CLI and finished in a browser
	// the gateway does not know). Weaker: anyone the user sends the
	// authorization link to can attach their upstream account to the user.
	AllowUnboundCallbacks bool
}

// Manager runs upstream OAuth for one gateway replica. Several Managers on
// one database cooperate: refreshes are serialized by a row lock.
type Manager struct {
	st          *store.Store
	hc          *http.Client
	log         *slog.Logger
	now         func() time.Time
	redirectURI string
	// callbackPath and secure shape the binding cookie.
	callbackPath string
	secure       bool
	allowUnbound bool
	flowTTL      time.Duration
	margin       time.Duration
	timeout      time.Duration
	clientName   string

	// locks serializes refreshes within this process, so that goroutines
	// wait here instead of each holding a pool connection on the row lock.
	mu    sync.Mutex
	locks map[tokenKey]*keyLock
}

type tokenKey struct{ serverID, userID int64 }

type keyLock struct {
	ch   chan struct{} // a one-slot semaphore, so waiting can honour ctx
	refs int
}

// New returns a Manager on st.
func New(st *store.Store, opts *Options) (*Manager, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.PublicURL == "" {
		o.PublicURL = "http://localhost:8080"
	}
	u, err := url.Parse(o.PublicURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("public URL %q: want an absolute http(s) URL without query or fragment", o.PublicURL)
	}
	m := &Manager{
		st:           st,
		hc:           o.HTTPClient,
		log:          o.Logger,
		now:          o.NowFunc,
		redirectURI:  strings.TrimRight(u.String(), "/") + CallbackPath,
		callbackPath: strings.TrimRight(u.Path, "/") + CallbackPath,
		secure:       u.Scheme == "https",
		allowUnbound: o.AllowUnboundCallbacks,
		flowTTL:      o.FlowTTL,
		margin:       o.RefreshMargin,
		timeout:      o.RequestTimeout,
		clientName:   o.ClientName,
		locks:        map[tokenKey]*keyLock{},
	}
	if m.hc == nil {
		m.hc = &http.Client{Transport: guardedTransport(), Timeout: 60 * time.Second}
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if m.now == nil {
		m.now = time.Now
	}
	if m.flowTTL <= 0 {
		m.flowTTL = 10 * time.Minute
	}
	if m.margin <= 0 {
		m.margin = time.Minute
	}
	if m.timeout <= 0 {
		m.timeout = 30 * time.Second
	}
	if m.clientName == "" {
		m.clientName = "mcpgate"
	}
	return m, nil
}

// RedirectURI is the callback URL given to authorization servers.
func (m *Manager) RedirectURI() string { return m.redirectURI }

// lock takes the in-process lock of one token; unlock releases it.
func (m *Manager) lock(ctx context.Context, k tokenKey) (unlock func(), err error) {
	m.mu.Lock()
	l := m.locks[k]
	if l == nil {
		l = &keyLock{ch: make(chan struct{}, 1)}
		m.locks[k] = l
	}
	l.refs++
	m.mu.Unlock()
	release := func() {
		m.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(m.locks, k)
		}
		m.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}

// hashURL binds flows and tokens to the server URL they were made for.
func hashURL(u string) []byte {
	h := sha256.Sum256([]byte("url:" + u))
	return h[:]
}

func hashState(state string) []byte {
	h := sha256.Sum256([]byte(state))
	return h[:]
}

// guardedTransport refuses to dial private, link-local, CGNAT, multicast and
// unspecified addresses, whatever name resolved to them: URLs learnt from a
// server's metadata must not make the gateway reach its own network.
func guardedTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{
		Timeout:   30 * time.Second,
		KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				host = address
			}
			ip, err := netip.ParseAddr(host)
			if err != nil {
				return fmt.Errorf("dialing %q: not an IP address", host)
			}
			if forbiddenIP(ip) {
				return fmt.Errorf("dialing %s: non-public address refused", ip)
			}
			return nil
		},
	}).DialContext
	return t
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

func forbiddenIP(ip netip.Addr) bool {
	ip = ip.Unmap()
	return !ip.IsValid() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsMulticast() || ip.IsUnspecified() || cgnat.Contains(ip)
}

// drain reads a little of a body before closing it, so the connection can be
// reused.
func drain(b io.ReadCloser) {
	io.Copy(io.Discard, io.LimitReader(b, 64<<10))
	b.Close()
}
