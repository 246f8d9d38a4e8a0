package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/apikey"
	"github.com/mcpgate/mcpgate/store"
)

// Principal is who a request acts for.
type Principal struct {
	User  store.User
	Token *store.Token // the agent or personal token used, if any
	Via   string       // admin-token, token, jwt, socket
}

// IsAgent reports whether the request came with a narrow agent token.
func (p *Principal) IsAgent() bool { return p.Token != nil && p.Token.Kind == apikey.Agent }

// IsAdmin reports whether the user is an admin. Agent tokens of admins are
// still agent tokens: routes check IsAgent first.
func (p *Principal) IsAdmin() bool { return p.User.Role == "admin" }

// Scope is the part of the server table this principal may touch.
func (p *Principal) Scope() store.Scope { return store.Scope{UserID: p.User.ID, All: p.IsAdmin()} }

// AllowsServer reports whether the token's server list admits name.
func (p *Principal) AllowsServer(name string) bool {
	if p.Token == nil || p.Token.Kind != apikey.Agent {
		return true
	}
	return slices.Contains(p.Token.Servers, "*") || slices.Contains(p.Token.Servers, name)
}

// Actor is the principal as the activity log records it.
func (p *Principal) Actor(ctx context.Context) store.Actor {
	a := store.Actor{UserID: p.User.ID, RequestID: requestID(ctx)}
	if p.Token != nil {
		a.TokenID = p.Token.ID
	}
	return a
}

type principalKey struct{}

func principal(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// requireUser refuses agent tokens: they are for MCP clients and may not
// manage anything.
func requireUser(p *Principal) error {
	if p.IsAgent() {
		return forbidden("agent tokens cannot use this route; use a personal access token or sign in")
	}
	return nil
}

func requireAdmin(p *Principal) error {
	if err := requireUser(p); err != nil {
		return err
	}
	if !p.IsAdmin() {
		return forbidden("this route is for admins")
	}
	return nil
}

// authenticate resolves the bearer token to a principal, or answers 401.
// Every failure looks the same to the client, so nothing about which tokens
// exist leaks; the log says which rule applied.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var (
			p   *Principal
			err error
		)
		if fromSocket(r.Context()) {
			var u store.User
			if u, err = s.store.EnsureBuiltinAdmin(r.Context()); err == nil {
				p = &Principal{User: u, Via: "socket"}
			}
		} else {
			p, err = s.resolveBearer(r.Context(), r.Header.Get("Authorization"))
		}
		if err != nil {
			s.writeProblem(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

var errBadToken = unauthorized("missing, malformed, unknown, expired or revoked bearer token")

func (s *Server) resolveBearer(ctx context.Context, header string) (*Principal, error) {
	raw, ok := strings.CutPrefix(header, "Bearer ")
	if !ok {
		raw, ok = strings.CutPrefix(header, "bearer ")
	}
	raw = strings.TrimSpace(raw)
	if !ok || raw == "" {
		return nil, errBadToken
	}
	if s.adminTokenHash != nil {
		h := sha256.Sum256([]byte(raw))
		if apikey.Equal(h[:], s.adminTokenHash) {
			u, err := s.store.EnsureBuiltinAdmin(ctx)
			if err != nil {
				return nil, err
			}
			return &Principal{User: u, Via: "admin-token"}, nil
		}
	}
	if apikey.Looks(raw) {
		return s.resolveAPIKey(ctx, raw)
	}
	if strings.Count(raw, ".") == 2 && s.jwt != nil {
		u, err := s.jwt.verify(ctx, raw)
		if err != nil {
			s.log.InfoContext(ctx, "jwt refused", "reason", err.Error())
			return nil, errBadToken
		}
		if u.Disabled {
			return nil, errBadToken
		}
		return &Principal{User: u, Via: "jwt"}, nil
	}
	return nil, errBadToken
}

func (s *Server) resolveAPIKey(ctx context.Context, raw string) (*Principal, error) {
	_, hash, ok := apikey.Parse(raw)
	if !ok {
		return nil, errBadToken // refused before any database look-up
	}
	t, err := s.store.LookupToken(ctx, hash[:])
	if errors.Is(err, store.ErrNotFound) {
		return nil, errBadToken
	} else if err != nil {
		return nil, err
	}
	switch {
	case t.RevokedAt != nil:
		s.log.InfoContext(ctx, "token refused", "reason", "revoked", "token_id", t.ID)
		return nil, errBadToken
	case !time.Now().Before(t.ExpiresAt):
		s.log.InfoContext(ctx, "token refused", "reason", "expired", "token_id", t.ID)
		return nil, errBadToken
	case t.User.Disabled:
		s.log.InfoContext(ctx, "token refused", "reason", "user disabled", "token_id", t.ID)
		return nil, errBadToken
	}
	if err := s.store.TouchToken(ctx, t.ID); err != nil {
		s.log.WarnContext(ctx, "recording token use", "err", err.Error())
	}
	tok := t.Token
	return &Principal{User: t.User, Token: &tok, Via: "token"}, nil
}
