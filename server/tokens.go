package server

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/mcpgate/mcpgate/apikey"
	"github.com/mcpgate/mcpgate/store"
)

const (
	defaultTokenTTL = 30 * 24 * time.Hour
	maxTokenTTL     = 365 * 24 * time.Hour
)

// Scopes are cumulative: each implies the ones before it.
var scopeOrder = []string{"read", "write", "destructive"}

type tokenView struct {
	ID         int64      `json:"id"`
	Name       string     `json:"name"`
	Kind       string     `json:"kind"`
	UserID     int64      `json:"user_id"`
	Prefix     string     `json:"prefix"`
	Last4      string     `json:"last4"`
	Scopes     []string   `json:"scopes"`
	Servers    []string   `json:"servers"`
	ExpiresAt  time.Time  `json:"expires_at"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	Revoked    bool       `json:"revoked"`
}

func viewToken(t store.Token) tokenView {
	return tokenView{t.ID, t.Name, t.Kind, t.UserID, t.Prefix, t.Last4, t.Scopes, t.Servers, t.ExpiresAt, t.CreatedAt,
		t.LastUsedAt, t.RevokedAt != nil}
}

// expandScopes returns the cumulative closure of the highest scope named.
func expandScopes(scopes []string) []string {
	top := 0
	for _, s := range scopes {
		if i := slices.Index(scopeOrder, s); i > top {
			top = i
		}
	}
	return slices.Clone(scopeOrder[:top+1])
}

// parseLifetime reads "30d", "12h" or "90m".
func parseLifetime(s string) (time.Duration, error) {
	if s == "" {
		return defaultTokenTTL, nil
	}
	n, err := strconv.Atoi(s[:len(s)-1])
	if err != nil || n <= 0 {
		return 0, badRequest("expires_in must look like 30d, 12h or 90m")
	}
	unit := map[byte]time.Duration{'d': 24 * time.Hour, 'h': time.Hour, 'm': time.Minute}[s[len(s)-1]]
	if unit == 0 {
		return 0, badRequest("expires_in must look like 30d, 12h or 90m")
	}
	d := time.Duration(n) * unit
	if d > maxTokenTTL {
		return 0, badRequest("expires_in is at most 365d")
	}
	return d, nil
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	if err := requireUser(p); err != nil {
		return err
	}
	var in struct {
		Name      string   `json:"name"`
		Kind      string   `json:"kind"`
		Scopes    []string `json:"scopes"`
		Servers   []string `json:"servers"`
		ExpiresIn string   `json:"expires_in"`
		UserID    *int64   `json:"user_id"`
	}
	if err := decodeJSON(r, &in); err != nil {
		return err
	}
	if in.Kind == "" {
		in.Kind = apikey.Agent
	}
	owner := p.User
	if in.UserID != nil && *in.UserID != p.User.ID {
		if !p.IsAdmin() {
			return badRequest("user_id is writable by admins only; members create tokens for themselves")
		}
		u, err := s.store.GetUser(r.Context(), *in.UserID)
		if errors.Is(err, store.ErrNotFound) {
			return badRequest("user_id %d: no such user", *in.UserID)
		} else if err != nil {
			return err
		}
		owner = u
	}
	ttl, err := parseLifetime(in.ExpiresIn)
	if err != nil {
		return err
	}
	scopes, servers := scopeOrder, []string{"*"}
	if in.Kind == apikey.Personal {
		if in.Scopes != nil || in.Servers != nil {
			return badRequest("personal access tokens act with all of their user's rights: scopes and servers apply to agent tokens only")
		}
	} else {
		scopes = []string{"read"}
		if in.Scopes != nil {
			scopes = expandScopes(in.Scopes)
		}
		if in.Servers != nil {
			servers = slices.Compact(slices.Sorted(slices.Values(in.Servers)))
			if slices.Contains(servers, "*") && len(servers) > 1 {
				return badRequest(`servers is either ["*"] or a list of server names`)
			}
		}
	}
	key, err := apikey.New(in.Kind)
	if err != nil {
		return err
	}
	t, err := s.store.CreateToken(r.Context(), p.Actor(r.Context()), store.NewToken{
		UserID: owner.ID, Name: in.Name, Kind: in.Kind, Prefix: key.Display, Last4: key.Last4, Hash: key.Hash[:],
		Scopes: scopes, Servers: servers, ExpiresAt: time.Now().Add(ttl).UTC().Truncate(time.Second),
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, struct {
		tokenView
		Token string `json:"token"`
	}{viewToken(t), key.Plain})
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	if err := requireUser(p); err != nil {
		return err
	}
	userID := p.User.ID
	if q := r.URL.Query().Get("user_id"); q != "" {
		id, _ := strconv.ParseInt(q, 10, 64)
		if id != p.User.ID && !p.IsAdmin() {
			return forbidden("members list only their own tokens")
		}
		userID = id
	} else if p.IsAdmin() {
		userID = 0
	}
	tokens, err := s.store.ListTokens(r.Context(), userID)
	if err != nil {
		return err
	}
	out := make([]tokenView, 0, len(tokens))
	for _, t := range tokens {
		out = append(out, viewToken(t))
	}
	return writeJSON(w, http.StatusOK, map[string]any{"tokens": out})
}

// ownToken loads a token the principal may manage; another user's is 404.
func (s *Server) ownToken(r *http.Request) (store.Token, error) {
	p := principal(r.Context())
	if err := requireUser(p); err != nil {
		return store.Token{}, err
	}
	id, err := pathID(r)
	if err != nil {
		return store.Token{}, err
	}
	t, err := s.store.GetToken(r.Context(), id)
	if err != nil {
		return store.Token{}, err
	}
	if t.UserID != p.User.ID && !p.IsAdmin() {
		return store.Token{}, notFound("token")
	}
	return t, nil
}

func (s *Server) getToken(w http.ResponseWriter, r *http.Request) error {
	t, err := s.ownToken(r)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, viewToken(t))
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) error {
	t, err := s.ownToken(r)
	if err != nil {
		return err
	}
	p := principal(r.Context())
	if err := s.store.RevokeToken(r.Context(), p.Actor(r.Context()), t.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
