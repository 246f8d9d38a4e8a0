package server

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net/http"
	"time"

	"github.com/mcpgate/mcpgate/oauth"
	"github.com/mcpgate/mcpgate/store"
)

// oauthConfigView is a server's upstream OAuth as REST shows it: the
// configuration, masked, and the caller's own token state, never a token.
type oauthConfigView struct {
	Mode            *string    `json:"mode"`
	ClientID        string     `json:"client_id"`
	ClientSecretSet bool       `json:"client_secret_set"`
	Scopes          []string   `json:"scopes"`
	Status          string     `json:"status"`
	ExpiresAt       *time.Time `json:"expires_at"`
}

// oauthView returns the server's OAuth view for the caller.
func (s *Server) oauthView(ctx context.Context, p *Principal, srv store.Server) (oauthConfigView, error) {
	v := oauthConfigView{Scopes: []string{}, Status: oauth.StatusNone}
	if s.oauth == nil || srv.Protocol == "stdio" {
		return v, nil
	}
	cfg, err := s.store.GetServerOAuth(ctx, srv.ID)
	if errors.Is(err, store.ErrNotFound) {
		return v, nil
	} else if err != nil {
		return v, err
	}
	mode := cfg.Mode
	v.Mode, v.ClientID, v.ClientSecretSet, v.Scopes = &mode, cfg.ClientID, cfg.ClientSecret != "", cfg.Scopes
	if v.Scopes == nil {
		v.Scopes = []string{}
	}
	st, err := s.oauth.Status(ctx, srv, p.User.ID)
	if err != nil {
		return v, err
	}
	v.Status, v.ExpiresAt = st.Status, st.ExpiresAt
	return v, nil
}

// oauthInput is the writable part of a server's oauth object.
type oauthInput struct {
	Mode         string   `json:"mode"`
	ClientID     string   `json:"client_id"`
	ClientSecret *string  `json:"client_secret"`
	Scopes       []string `json:"scopes"`
}

// applyOAuth stores a server's OAuth configuration (nil: none given). A
// masked client secret sent back keeps the stored one.
func (s *Server) applyOAuth(ctx context.Context, p *Principal, srv store.Server, in *oauthInput) error {
	if in == nil {
		return nil
	}
	if srv.Protocol == "stdio" {
		return badRequest("oauth applies to remote (streamable-http, sse) servers only")
	}
	cfg := store.ServerOAuth{ServerID: srv.ID, Mode: in.Mode, ClientID: in.ClientID, Scopes: in.Scopes}
	if cfg.Mode == "" {
		cfg.Mode = store.OAuthPerUser
	}
	cur, err := s.store.GetServerOAuth(ctx, srv.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	switch {
	case in.ClientSecret == nil:
		cfg.ClientSecret = cur.ClientSecret
	case *in.ClientSecret == mask(cur.ClientSecret) && cur.ClientSecret != "":
		cfg.ClientSecret = cur.ClientSecret
	default:
		cfg.ClientSecret = *in.ClientSecret
	}
	return s.store.PutServerOAuth(ctx, p.Actor(ctx), cfg)
}

// mayAuthorize checks who may start or forget an authorization: anyone who
// may use the server for their own per-user token, its managers for the
// shared one (or to configure OAuth on a server that has none).
func (s *Server) mayAuthorize(ctx context.Context, p *Principal, srv store.Server) (mode string, err error) {
	if srv.Protocol == "stdio" {
		return "", badRequest("oauth applies to remote (streamable-http, sse) servers only")
	}
	mode, err = s.oauth.Mode(ctx, srv.ID)
	if errors.Is(err, oauth.ErrNotOAuth) || errors.Is(err, store.ErrNotFound) {
		mode = ""
	} else if err != nil {
		return "", err
	}
	if mode != store.OAuthPerUser {
		if err := canManage(p, srv); err != nil {
			return "", forbidden("only those who manage this server may authorize its shared token or configure OAuth")
		}
	}
	return mode, nil
}

func (s *Server) putOAuthConfig(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	srv, err := s.manageableServer(r)
	if err != nil {
		return err
	}
	var in oauthInput
	if err := decodeJSON(r, &in); err != nil {
		return err
	}
	if err := s.applyOAuth(r.Context(), p, srv, &in); err != nil {
		return err
	}
	return s.writeServer(w, r, http.StatusOK, srv)
}

func (s *Server) deleteOAuthConfig(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	srv, err := s.manageableServer(r)
	if err != nil {
		return err
	}
	if err := s.store.DeleteServerOAuth(r.Context(), p.Actor(r.Context()), srv.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// authorizationTarget is the server of an oauth route and the token mode
// the caller may act on.
func (s *Server) authorizationTarget(r *http.Request) (*Principal, store.Server, string, error) {
	if s.oauth == nil {
		return nil, store.Server{}, "", newProblem(http.StatusServiceUnavailable, "upstream OAuth is not configured on this replica")
	}
	p := principal(r.Context())
	if err := requireUser(p); err != nil {
		return nil, store.Server{}, "", err
	}
	srv, err := s.visibleServer(r)
	if err != nil {
		return nil, store.Server{}, "", err
	}
	mode, err := s.mayAuthorize(r.Context(), p, srv)
	return p, srv, mode, err
}

func (s *Server) startOAuth(w http.ResponseWriter, r *http.Request) error {
	p, srv, _, err := s.authorizationTarget(r)
	if err != nil {
		return err
	}
	a, err := s.oauth.Start(r.Context(), srv, p.User.ID)
	if err != nil {
		return oauthProblem(err)
	}
	if a.Cookie != nil {
		http.SetCookie(w, a.Cookie)
	}
	return writeJSON(w, http.StatusOK, map[string]any{"authorization_url": a.URL, "expires_at": a.ExpiresAt})
}

func (s *Server) forgetOAuth(w http.ResponseWriter, r *http.Request) error {
	p, srv, mode, err := s.authorizationTarget(r)
	if err != nil {
		return err
	}
	userID := p.User.ID
	if mode == store.OAuthShared {
		userID = 0
	}
	if err := s.oauth.Forget(r.Context(), p.Actor(r.Context()), srv.ID, userID); err != nil && !errors.Is(err, store.ErrNotFound) {
		return oauthProblem(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// oauthCallback ends a flow in the user's browser. It is public: the state
// names the flow, and the flow is bound to the user who started it (their
// session, or the cookie set by the start response).
func (s *Server) oauthCallback(w http.ResponseWriter, r *http.Request) {
	if s.oauth == nil {
		s.writeProblem(w, r, newProblem(http.StatusServiceUnavailable, "upstream OAuth is not configured on this replica"))
		return
	}
	var userID int64
	if h := r.Header.Get("Authorization"); h != "" {
		if p, err := s.resolveBearer(r.Context(), h); err == nil {
			userID = p.User.ID
		}
	}
	res, err := s.oauth.Callback(r.Context(), oauth.ParamsFromRequest(r, userID))
	if err != nil {
		s.writeProblem(w, r, oauthProblem(err))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprintf(w, "<!doctype html><title>mcpgate</title><p>mcpgate is authorized for <b>%s</b>. You can close this window.</p>\n",
		html.EscapeString(res.ServerName))
}

// oauthProblem maps the oauth package's errors; its messages carry no
// secrets, so they may be shown.
func oauthProblem(err error) error {
	switch {
	case errors.Is(err, oauth.ErrBadState):
		return badRequest("%v", oauth.ErrBadState)
	case errors.Is(err, oauth.ErrDenied):
		return newProblem(http.StatusForbidden, oauth.ErrDenied.Error())
	case errors.Is(err, oauth.ErrNotOAuth):
		return badRequest("%v", oauth.ErrNotOAuth)
	case errors.Is(err, store.ErrNotFound), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	q := newProblem(http.StatusBadGateway, "the upstream's authorization server could not be used: "+err.Error())
	q.cause = err
	return q
}
