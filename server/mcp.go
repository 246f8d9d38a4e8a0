package server

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"

	"github.com/go-chi/chi/v5"

	"github.com/mcpgate/mcpgate/apikey"
	"github.com/mcpgate/mcpgate/gateway"
	"github.com/mcpgate/mcpgate/store"
)

// caller maps a REST principal onto the gateway's view of it.
func (p *Principal) caller() gateway.Caller {
	c := gateway.Caller{UserID: p.User.ID, Email: p.User.Email, Admin: p.IsAdmin()}
	if p.Token != nil {
		c.TokenID = p.Token.ID
		c.Agent = p.Token.Kind == apikey.Agent
		c.Scopes, c.Servers = p.Token.Scopes, p.Token.Servers
	}
	return c
}

// principalOf rebuilds a principal from a gateway caller, for the
// upstream_servers tool, which goes through the REST handlers' rules.
func principalOf(c gateway.Caller) *Principal {
	role := "member"
	if c.Admin {
		role = "admin"
	}
	p := &Principal{User: store.User{ID: c.UserID, Email: c.Email, Role: role}, Via: "mcp"}
	if c.TokenID != 0 {
		kind := apikey.Personal
		if c.Agent {
			kind = apikey.Agent
		}
		p.Token = &store.Token{ID: c.TokenID, UserID: c.UserID, Kind: kind, Scopes: c.Scopes, Servers: c.Servers}
	}
	return p
}

// AuthenticateMCP resolves an MCP request's bearer token with the same rules
// as REST.
func (s *Server) AuthenticateMCP(ctx context.Context, bearer string) (gateway.Caller, error) {
	p, err := s.resolveBearer(ctx, "Bearer "+bearer)
	if err != nil {
		return gateway.Caller{}, err
	}
	return p.caller(), nil
}

// The upstream_servers tool changes servers through the REST handlers, so
// an MCP client meets exactly the REST rules and validation, OpenAPI
// included. Errors carry the problem's detail.

// CreateServer implements gateway.ServerAdmin.
func (s *Server) CreateServer(ctx context.Context, c gateway.Caller, body []byte) ([]byte, error) {
	return s.replay(ctx, c, http.MethodPost, "", body, s.createServer)
}

// PatchServer implements gateway.ServerAdmin.
func (s *Server) PatchServer(ctx context.Context, c gateway.Caller, name string, patch []byte) ([]byte, error) {
	return s.replay(ctx, c, http.MethodPatch, name, patch, s.updateServer)
}

// DeleteServer implements gateway.ServerAdmin.
func (s *Server) DeleteServer(ctx context.Context, c gateway.Caller, name string) error {
	_, err := s.replay(ctx, c, http.MethodDelete, name, nil, s.deleteServer)
	return err
}

// replay runs a REST handler for an MCP caller: OpenAPI validation, then the
// handler with the caller as principal. A refusal is the problem itself.
func (s *Server) replay(ctx context.Context, c gateway.Caller, method, name string, body []byte, h handlerFunc) ([]byte, error) {
	path := "/api/v1/servers"
	if name != "" {
		path += "/" + url.PathEscape(name)
	}
	if len(body) > MaxBodyBytes {
		return nil, toProblem(&http.MaxBytesError{Limit: MaxBodyBytes})
	}
	req := httptest.NewRequestWithContext(ctx, method, path, bytes.NewReader(body))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if _, _, err := s.api.ValidateRequest(req); err != nil {
		return nil, toProblem(err)
	}
	rctx := chi.NewRouteContext()
	rctx.URLParams.Add("name", name)
	ctx = context.WithValue(ctx, chi.RouteCtxKey, rctx)
	ctx = context.WithValue(ctx, principalKey{}, principalOf(c))
	req = httptest.NewRequestWithContext(ctx, method, path, bytes.NewReader(body))
	rec := httptest.NewRecorder()
	if err := h(rec, req); err != nil {
		return nil, toProblem(err)
	}
	return rec.Body.Bytes(), nil
}
