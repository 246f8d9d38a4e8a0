package oauth

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"github.com/mcpgate/mcpgate/store"
)

// TokenError is an error answer of a token endpoint (RFC 6749 §5.2). It
// holds the error code only: the description is the server's free text.
type TokenError struct {
	StatusCode int
	Code       string // invalid_grant, invalid_client, …
}

func (e *TokenError) Error() string {
	if e.Code == "" {
		return "token endpoint answered " + strconv.Itoa(e.StatusCode)
	}
	return "token endpoint answered " + strconv.Itoa(e.StatusCode) + " " + e.Code
}

type tokenResponse struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	RefreshToken string `json:"refresh_token"`
	Scope        string `json:"scope"`
	ExpiresIn    json.Number
}

func (r *tokenResponse) UnmarshalJSON(b []byte) error {
	var raw struct {
		AccessToken  string          `json:"access_token"`
		TokenType    string          `json:"token_type"`
		RefreshToken string          `json:"refresh_token"`
		Scope        string          `json:"scope"`
		ExpiresIn    json.RawMessage `json:"expires_in"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	r.AccessToken, r.TokenType, r.RefreshToken, r.Scope = raw.AccessToken, raw.TokenType, raw.RefreshToken, raw.Scope
	// Some servers send expires_in as a string.
	r.ExpiresIn = json.Number(strings.Trim(string(raw.ExpiresIn), `"`))
	return nil
}

func (r *tokenResponse) storeToken(now time.Time) store.OAuthToken {
	t := store.OAuthToken{AccessToken: r.AccessToken, RefreshToken: r.RefreshToken, TokenType: r.TokenType,
		Scope: r.Scope, Status: store.OAuthAuthorized}
	if n, err := r.ExpiresIn.Int64(); err == nil && n > 0 {
		t.Expiry = now.Add(time.Duration(n) * time.Second)
	}
	return t
}

// post builds a form POST to an authorization server endpoint,
// authenticated as the client.
func (cl client) post(ctx context.Context, endpoint string, form url.Values) (*http.Request, error) {
	basic := cl.AuthMethod == "client_secret_basic" && cl.Secret != ""
	if !basic {
		form.Set("client_id", cl.ID)
		if cl.AuthMethod == "client_secret_post" && cl.Secret != "" {
			form.Set("client_secret", cl.Secret)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, errors.New("building a request to the authorization server")
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if basic {
		// RFC 6749 §2.3.1: both parts are form-encoded before base64.
		req.SetBasicAuth(url.QueryEscape(cl.ID), url.QueryEscape(cl.Secret))
	}
	return req, nil
}

// tokenRequest posts a grant to the token endpoint, authenticating as cl.
// Its errors never quote the response: a success body holds tokens.
func (m *Manager) tokenRequest(ctx context.Context, d *discovery, cl client, params map[string]string) (*tokenResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	form := url.Values{}
	for k, v := range params {
		if v != "" {
			form.Set(k, v)
		}
	}
	req, err := cl.post(ctx, d.TokenURL, form)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := m.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is known; the error may not repeat it
		}
		return nil, fmt.Errorf("token request to %s: %w", d.TokenURL, err)
	}
	defer drain(resp.Body)
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("reading token response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		json.Unmarshal(body, &e)
		return nil, &TokenError{StatusCode: resp.StatusCode, Code: oauthErrorCode(e.Error)}
	}
	var tr tokenResponse
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "application/x-www-form-urlencoded" || mt == "text/plain" {
		// GitHub-style form answers.
		v, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, errors.New("token response is not form-encoded")
		}
		tr = tokenResponse{AccessToken: v.Get("access_token"), TokenType: v.Get("token_type"),
			RefreshToken: v.Get("refresh_token"), Scope: v.Get("scope"), ExpiresIn: json.Number(v.Get("expires_in"))}
	} else if err := json.Unmarshal(body, &tr); err != nil {
		return nil, errors.New("token response is not JSON")
	}
	if tr.AccessToken == "" {
		return nil, errors.New("token response has no access_token")
	}
	if tr.TokenType != "" && !strings.EqualFold(tr.TokenType, "bearer") {
		return nil, fmt.Errorf("token type %q is not supported", oauthErrorCode(tr.TokenType))
	}
	tr.TokenType = "Bearer"
	return &tr, nil
}

// fresh reports whether t can be used as it is at now.
func (m *Manager) fresh(t store.OAuthToken, now time.Time) bool {
	return t.Status == store.OAuthAuthorized && t.AccessToken != "" &&
		(t.Expiry.IsZero() || now.Add(m.margin).Before(t.Expiry))
}

func toOAuth2(t store.OAuthToken) *oauth2.Token {
	return &oauth2.Token{AccessToken: t.AccessToken, TokenType: "Bearer", Expiry: t.Expiry}
}

// Token returns the access token a call by userID to the server at
// endpoint (its configured URL) carries: the user's own, or the shared one,
// per the server's mode. It refreshes the token first when it is expired or
// about to be. ErrNoToken: none stored; ErrExpired: stored but not
// refreshable; ErrURLChanged: issued for another URL.
func (m *Manager) Token(ctx context.Context, serverID, userID int64, endpoint string) (*oauth2.Token, error) {
	t, err := m.st.GetOAuthTokenFor(ctx, serverID, userID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrNoToken
	}
	if err != nil {
		return nil, fmt.Errorf("reading OAuth token: %w", err)
	}
	if subtle.ConstantTimeCompare(t.URLHash, hashURL(endpoint)) != 1 {
		return nil, ErrURLChanged
	}
	if m.fresh(t, m.now()) {
		return toOAuth2(t), nil
	}
	if t.Status == store.OAuthExpired {
		// Refused for good: retrying would only hammer the token endpoint.
		return nil, ErrExpired
	}
	t, err = m.refresh(ctx, t.ServerID, t.UserID, "")
	if err != nil {
		return nil, err
	}
	return toOAuth2(t), nil
}

// refresh renews the token in slot (serverID, owner) under the row lock.
// rejected, when set, is an access token the resource server refused: the
// stored token is then renewed even if it looks fresh, unless it is already
// another one (a concurrent refresh won).
func (m *Manager) refresh(ctx context.Context, serverID, owner int64, rejected string) (store.OAuthToken, error) {
	unlock, err := m.lock(ctx, tokenKey{serverID, owner})
	if err != nil {
		return store.OAuthToken{}, err
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(ctx, m.timeout+5*time.Second)
	defer cancel()
	t, err := m.st.UpdateOAuthToken(ctx, serverID, owner, func(cur store.OAuthToken, cfg store.ServerOAuth) (*store.OAuthToken, error) {
		now := m.now()
		if cur.Status == store.OAuthExpired {
			return nil, ErrExpired
		}
		if rejected == "" && m.fresh(cur, now) {
			return nil, nil // another replica refreshed while we waited
		}
		if rejected != "" && cur.AccessToken != rejected && cur.Status == store.OAuthAuthorized {
			return nil, nil
		}
		if cur.RefreshToken == "" {
			next := cur
			next.Status, next.LastError = store.OAuthExpired, "expired and no refresh token"
			return &next, ErrExpired
		}
		d, cl, err := stored(cfg)
		if err != nil {
			return nil, err
		}
		tr, err := m.tokenRequest(ctx, d, cl, map[string]string{
			"grant_type":    "refresh_token",
			"refresh_token": cur.RefreshToken,
			"resource":      d.Resource,
		})
		if err != nil {
			next := cur
			next.LastError = "refresh failed: " + err.Error()
			var te *TokenError
			if errors.As(err, &te) && (te.Code == "invalid_grant" || te.Code == "invalid_client" || te.Code == "unauthorized_client") {
				next.Status = store.OAuthExpired
				return &next, fmt.Errorf("%w (%v)", ErrExpired, err)
			}
			next.Status = store.OAuthError
			if cur.Status == store.OAuthAuthorized && rejected == "" && !cur.Expiry.IsZero() && now.Before(cur.Expiry) {
				// Still valid for a little while: keep using it, retry later.
				next.Status = store.OAuthAuthorized
			}
			return &next, fmt.Errorf("refreshing OAuth token: %w", err)
		}
		next := tr.storeToken(now)
		if next.RefreshToken == "" {
			next.RefreshToken = cur.RefreshToken // not rotated
		}
		if next.Scope == "" {
			next.Scope = cur.Scope
		}
		return &next, nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return store.OAuthToken{}, ErrNoToken
	}
	if err != nil {
		if t.Status == store.OAuthAuthorized && t.AccessToken != "" && rejected == "" && !errors.Is(err, ErrExpired) &&
			(t.Expiry.IsZero() || m.now().Before(t.Expiry)) {
			m.log.WarnContext(ctx, "oauth refresh failed; using the current token until it expires",
				"server_id", serverID, "err", err)
			return t, nil
		}
		return store.OAuthToken{}, err
	}
	if t.Status != store.OAuthAuthorized {
		return store.OAuthToken{}, ErrExpired
	}
	m.log.DebugContext(ctx, "oauth token ready", "server_id", serverID, "shared", owner == 0)
	return t, nil
}

// TokenSource returns an oauth2.TokenSource over Token. Token has no
// context: each call gets RequestTimeout.
func (m *Manager) TokenSource(serverID, userID int64, endpoint string) oauth2.TokenSource {
	return tokenSource{m: m, serverID: serverID, userID: userID, endpoint: endpoint}
}

type tokenSource struct {
	m                *Manager
	serverID, userID int64
	endpoint         string
}

func (ts tokenSource) Token() (*oauth2.Token, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ts.m.timeout+10*time.Second)
	defer cancel()
	return ts.m.Token(ctx, ts.serverID, ts.userID, ts.endpoint)
}

// Status is what the server object shows of a caller's OAuth token: never
// the token.
type Status struct {
	Status    string     `json:"status"` // none, authorized, expired, error
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

func (m *Manager) status(st store.OAuthTokenState, endpoint string) Status {
	if subtle.ConstantTimeCompare(st.URLHash, hashURL(endpoint)) != 1 {
		return Status{Status: StatusExpired} // issued for the server's old URL
	}
	s := Status{Status: st.Status}
	if !st.Expiry.IsZero() {
		e := st.Expiry
		s.ExpiresAt = &e
	}
	if s.Status == store.OAuthAuthorized && !st.HasRefresh && !st.Expiry.IsZero() && !m.now().Before(st.Expiry) {
		s.Status = StatusExpired
	}
	return s
}

// Status returns the state of the token a call by userID to srv would use;
// StatusNone when there is none (or no OAuth configuration).
func (m *Manager) Status(ctx context.Context, srv store.Server, userID int64) (Status, error) {
	t, err := m.st.GetOAuthTokenFor(ctx, srv.ID, userID)
	if errors.Is(err, store.ErrNotFound) {
		return Status{Status: StatusNone}, nil
	}
	if errors.Is(err, store.ErrSecret) {
		return Status{Status: StatusError}, nil
	}
	if err != nil {
		return Status{}, err
	}
	return m.status(store.OAuthTokenState{Status: t.Status, Expiry: t.Expiry, HasRefresh: t.RefreshToken != "",
		URLHash: t.URLHash}, srv.URL), nil
}

// Statuses returns Status for each of servers as userID sees it, by server
// id, with one query: for listings.
func (m *Manager) Statuses(ctx context.Context, userID int64, servers []store.Server) (map[int64]Status, error) {
	list, err := m.st.ListOAuthTokenStates(ctx, userID)
	if err != nil {
		return nil, err
	}
	byID := make(map[int64]store.OAuthTokenState, len(list))
	for _, st := range list {
		byID[st.ServerID] = st
	}
	out := make(map[int64]Status, len(servers))
	for _, srv := range servers {
		if st, ok := byID[srv.ID]; ok {
			out[srv.ID] = m.status(st, srv.URL)
		} else {
			out[srv.ID] = Status{Status: StatusNone}
		}
	}
	return out, nil
}

// Forget deletes the token userID's calls to the server use: their own, or
// the shared one in shared mode (the REST layer lets only the owner or an
// admin do that), and asks the authorization server to revoke it (RFC 7009)
// when it offers that; a failed revocation is logged, not returned, since
// the token is gone from the gateway either way. No token is not an error.
func (m *Manager) Forget(ctx context.Context, a store.Actor, serverID, userID int64) error {
	cfg, err := m.st.GetServerOAuth(ctx, serverID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading OAuth configuration: %w", err)
	}
	owner := userID
	if cfg.Mode == store.OAuthShared {
		owner = 0
	}
	old, oldErr := m.st.GetOAuthToken(ctx, serverID, owner)
	if err := m.st.DeleteOAuthToken(ctx, a, serverID, owner); err != nil {
		return fmt.Errorf("forgetting OAuth token: %w", err)
	}
	if oldErr != nil {
		return nil
	}
	d, cl, err := stored(cfg)
	if err != nil || d.RevocationURL == "" {
		return nil
	}
	for _, tok := range []struct{ value, hint string }{{old.RefreshToken, "refresh_token"}, {old.AccessToken, "access_token"}} {
		if tok.value == "" {
			continue
		}
		if err := m.revoke(ctx, d, cl, tok.value, tok.hint); err != nil {
			m.log.WarnContext(ctx, "oauth revocation failed", "server_id", serverID, "err", err)
		}
	}
	return nil
}

// revoke asks the authorization server to revoke a token (RFC 7009).
func (m *Manager) revoke(ctx context.Context, d *discovery, cl client, token, hint string) error {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	req, err := cl.post(ctx, d.RevocationURL, url.Values{"token": {token}, "token_type_hint": {hint}})
	if err != nil {
		return err
	}
	resp, err := m.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("revocation request to %s: %w", d.RevocationURL, err)
	}
	drain(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("revocation endpoint answered %d", resp.StatusCode)
	}
	return nil
}

// Mode returns the server's OAuth mode (store.OAuthPerUser or
// store.OAuthShared), or "" when it has no OAuth configuration.
func (m *Manager) Mode(ctx context.Context, serverID int64) (string, error) {
	cfg, err := m.st.GetServerOAuth(ctx, serverID)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return cfg.Mode, nil
}
