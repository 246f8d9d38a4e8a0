package oauth

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"github.com/mcpgate/mcpgate/store"
)

// Authorization is a started flow: where to send the browser, and the
// cookie that binds the flow to that browser.
type Authorization struct {
	// URL is the authorization server's page to send the user's browser to.
	URL string
	// Cookie must be set on the response to the start request when that
	// request comes from the browser that will come back (the UI): the
	// callback then accepts the flow from that browser even if it cannot
	// tell who the user is. Its Secure flag follows PublicURL's scheme.
	Cookie    *http.Cookie
	ExpiresAt time.Time
}

// Start begins an authorization of srv for userID. It discovers the
// authorization server, registers a client when none is configured, and
// stores the flow (hashes of its state and browser binding, the sealed PKCE
// verifier) for Callback. A server without an OAuth configuration gets one,
// in per-user mode. In shared mode the token will serve every caller: the
// REST layer lets only the server's owner or an admin start it.
func (m *Manager) Start(ctx context.Context, srv store.Server, userID int64) (Authorization, error) {
	authURL, cookie, exp, err := m.start(ctx, srv, userID)
	if err != nil {
		return Authorization{}, err
	}
	return Authorization{URL: authURL, Cookie: cookie, ExpiresAt: exp}, nil
}

func (m *Manager) start(ctx context.Context, srv store.Server, userID int64) (string, *http.Cookie, time.Time, error) {
	fail := func(err error) (string, *http.Cookie, time.Time, error) { return "", nil, time.Time{}, err }
	if !isRemote(srv) {
		return fail(ErrNotOAuth)
	}
	if userID == 0 {
		return fail(errors.New("starting OAuth: no user"))
	}
	cfg, err := m.st.GetServerOAuth(ctx, srv.ID)
	if errors.Is(err, store.ErrNotFound) {
		if err := m.st.PutServerOAuth(ctx, store.Actor{UserID: userID},
			store.ServerOAuth{ServerID: srv.ID, Mode: store.OAuthPerUser}); err != nil {
			return fail(fmt.Errorf("configuring OAuth: %w", err))
		}
		cfg, err = m.st.GetServerOAuth(ctx, srv.ID)
	}
	if err != nil {
		return fail(fmt.Errorf("reading OAuth configuration: %w", err))
	}
	if _, err := m.st.DeleteExpiredOAuthFlows(ctx, m.now()); err != nil {
		m.log.WarnContext(ctx, "deleting expired oauth flows", "err", err)
	}

	var (
		d  *discovery
		cl client
	)
	err = m.st.UpdateOAuthDiscovery(ctx, srv.ID, func(cur store.ServerOAuth) ([]byte, []byte, error) {
		var err error
		if d, err = m.discover(ctx, srv.URL); err != nil {
			return nil, nil, err
		}
		var reg *registration
		if cl, reg, err = m.resolveClient(ctx, cur, d); err != nil {
			return nil, nil, err
		}
		regJSON := cur.Registration
		if reg != nil {
			if regJSON, err = json.Marshal(reg); err != nil {
				return nil, nil, err
			}
		}
		discJSON, err := json.Marshal(d)
		return regJSON, discJSON, err
	})
	if err != nil {
		return fail(err)
	}

	state, binding := randomState(), randomState()
	verifier := oauth2.GenerateVerifier()
	now := m.now()
	exp := now.Add(m.flowTTL)
	if err := m.st.CreateOAuthFlow(ctx, store.OAuthFlow{
		StateHash: hashState(state), ServerID: srv.ID, UserID: userID, Shared: cfg.Mode == store.OAuthShared,
		BindingHash: hashState(binding), URLHash: hashURL(srv.URL), Verifier: verifier, RedirectURI: m.redirectURI, CreatedAt: now, ExpiresAt: exp,
	}); err != nil {
		return fail(fmt.Errorf("saving OAuth flow: %w", err))
	}
	scopes := cfg.Scopes
	if len(scopes) == 0 {
		scopes = d.ServerScopes
	}
	if d.OfflineSupported && !slices.Contains(scopes, "offline_access") {
		// Without it some servers issue no refresh token.
		scopes = append(slices.Clip(scopes), "offline_access")
	}
	oc := oauth2.Config{ClientID: cl.ID, Endpoint: oauth2.Endpoint{AuthURL: d.AuthURL},
		RedirectURL: m.redirectURI, Scopes: scopes}
	m.log.InfoContext(ctx, "oauth flow started", "server", srv.Name, "user_id", userID, "issuer", d.Issuer)
	cookie := &http.Cookie{Name: BindingCookieName(state), Value: binding, Path: m.callbackPath,
		MaxAge: int(m.flowTTL / time.Second), HttpOnly: true, Secure: m.secure, SameSite: http.SameSiteLaxMode}
	return oc.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier),
		oauth2.SetAuthURLParam("resource", d.Resource)), cookie, exp, nil
}

// randomState returns 256 random bits, URL-safe.
func randomState() string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// BindingCookieName is the name of the browser binding cookie of the flow
// with this state: one per flow, so flows started at once do not collide.
func BindingCookieName(state string) string {
	return "mcpgate_oauth_" + hex.EncodeToString(hashState("cookie:" + state)[:6])
}

// CallbackParams are the query of a request to CallbackPath, plus who made it.
type CallbackParams struct {
	// UserID is the user the gateway authenticated on the callback request,
	// 0 if it could not tell. When set, it must be the user who started.
	UserID int64
	// Binding is the value of the flow's binding cookie, if the browser sent
	// it. An unauthenticated callback (UserID 0) needs it.
	Binding string
	State   string
	Code    string
	Iss     string // RFC 9207
	// Error is the authorization server's error code, when it refused.
	Error string
}

// CallbackResult says what a successful callback authorized.
type CallbackResult struct {
	ServerID   int64
	ServerName string
	UserID     int64 // who started the flow
	Shared     bool  // the token is the server's shared one
}

// Callback finishes a flow: it takes the flow of the state (single use,
// whoever presents it), checks that it has not expired and belongs to the
// caller, checks the issuer, exchanges the code with the PKCE verifier and
// the resource, and stores the token. A bad state is ErrBadState and
// stores nothing.
func (m *Manager) Callback(ctx context.Context, p CallbackParams) (CallbackResult, error) {
	if p.State == "" {
		return CallbackResult{}, ErrBadState
	}
	f, err := m.st.TakeOAuthFlow(ctx, hashState(p.State))
	if errors.Is(err, store.ErrNotFound) {
		return CallbackResult{}, ErrBadState
	}
	if err != nil {
		return CallbackResult{}, fmt.Errorf("reading OAuth flow: %w", err)
	}
	if !m.now().Before(f.ExpiresAt) {
		return CallbackResult{}, ErrBadState
	}
	switch {
	case p.UserID != 0 && p.UserID != f.UserID:
		// The flow is burnt as well: a state in someone else's hands is leaked.
		m.log.WarnContext(ctx, "oauth state presented by another user", "user_id", p.UserID, "flow_user_id", f.UserID)
		return CallbackResult{}, ErrBadState
	case p.UserID == 0 && subtle.ConstantTimeCompare(hashState(p.Binding), f.BindingHash) != 1 && !m.allowUnbound:
		// Not the browser that started it: someone may have been sent a link
		// to a flow that would store their upstream account under another user.
		m.log.WarnContext(ctx, "oauth callback from a browser without the flow's binding", "flow_user_id", f.UserID)
		return CallbackResult{}, ErrBadState
	}
	res := CallbackResult{ServerID: f.ServerID, UserID: f.UserID, Shared: f.Shared}
	if res.ServerName, err = m.st.OAuthServerName(ctx, f.ServerID); err != nil {
		return CallbackResult{}, fmt.Errorf("reading server: %w", err)
	}
	if p.Error != "" {
		return res, fmt.Errorf("%w: %s", ErrDenied, oauthErrorCode(p.Error))
	}
	if p.Code == "" {
		return res, fmt.Errorf("%w: no code in the callback", ErrDenied)
	}
	cfg, err := m.st.GetServerOAuth(ctx, f.ServerID)
	if err != nil {
		return res, fmt.Errorf("reading OAuth configuration: %w", err)
	}
	if (cfg.Mode == store.OAuthShared) != f.Shared {
		// The mode changed since the flow started: the token would land in
		// the wrong slot.
		return res, ErrBadState
	}
	d, cl, err := stored(cfg)
	if err != nil {
		return res, err
	}
	if err := checkIssuer(p.Iss, d); err != nil {
		return res, err
	}
	tr, err := m.tokenRequest(ctx, d, cl, map[string]string{
		"grant_type":    "authorization_code",
		"code":          p.Code,
		"redirect_uri":  f.RedirectURI,
		"code_verifier": f.Verifier,
		"resource":      d.Resource,
	})
	if err != nil {
		return res, fmt.Errorf("exchanging the code: %w", err)
	}
	owner := f.UserID
	if f.Shared {
		owner = 0
	}
	tok := tr.storeToken(m.now())
	tok.ServerID, tok.UserID, tok.URLHash = f.ServerID, owner, f.URLHash
	if err := m.st.PutOAuthToken(ctx, tok); err != nil {
		return res, fmt.Errorf("saving OAuth token: %w", err)
	}
	m.log.InfoContext(ctx, "oauth authorized", "server", res.ServerName, "user_id", f.UserID, "shared", f.Shared)
	return res, nil
}

// checkIssuer applies RFC 9207: a server that advertises iss must send the
// right one, and any iss sent must be the right one (mix-up attacks).
func checkIssuer(iss string, d *discovery) error {
	if iss == "" {
		if d.IssSupported {
			return fmt.Errorf("%w: the callback lacks the iss its authorization server promises", ErrDenied)
		}
		return nil
	}
	if strings.TrimRight(iss, "/") != strings.TrimRight(d.Issuer, "/") {
		return fmt.Errorf("%w: the callback names another issuer", ErrDenied)
	}
	return nil
}

// oauthErrorCode keeps an RFC 6749 error code printable and short; it comes
// from the browser's query and is attacker-controlled.
func oauthErrorCode(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return strings.Map(func(r rune) rune {
		if r >= 0x20 && r < 0x7f && r != '"' && r != '\\' {
			return r
		}
		return -1
	}, s)
}

// ParamsFromRequest reads a callback request: its query and the flow's
// binding cookie. userID is who the gateway authenticated on it (0: nobody).
func ParamsFromRequest(r *http.Request, userID int64) CallbackParams {
	q := r.URL.Query()
	p := CallbackParams{UserID: userID, State: q.Get("state"), Code: q.Get("code"), Iss: q.Get("iss"),
		Error: q.Get("error")}
	if p.State != "" {
		if c, err := r.Cookie(BindingCookieName(p.State)); err == nil {
			p.Binding = c.Value
		}
	}
	return p
}
