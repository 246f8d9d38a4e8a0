package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/mcpgate/mcpgate/isolation"
	"github.com/mcpgate/mcpgate/settings"
	"github.com/mcpgate/mcpgate/store"
)

// config returns the runtime settings, or the defaults before any are stored.
func (s *Server) config(ctx context.Context) (settings.Config, error) {
	cfg := s.defaults()
	err := s.store.GetSetting(ctx, settings.Key, &cfg)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return cfg, err
	}
	return cfg, nil
}

func (s *Server) defaults() settings.Config {
	return settings.Defaults(isolation.DefaultGlobal(s.host()))
}

// writeServer answers with one server object.
func (s *Server) writeServer(w http.ResponseWriter, r *http.Request, status int, srv store.Server) error {
	v, err := s.view(r.Context(), srv)
	if err != nil {
		return err
	}
	return writeJSON(w, status, v)
}

func (s *Server) view(ctx context.Context, srv store.Server) (serverView, error) {
	cfg, err := s.config(ctx)
	if err != nil {
		return serverView{}, err
	}
	return s.viewWith(ctx, srv, cfg.Isolation.GlobalMode)
}

func (s *Server) viewWith(ctx context.Context, srv store.Server, globalMode string) (serverView, error) {
	var userID int64
	p := principal(ctx)
	if p != nil {
		userID = p.User.ID
	}
	v := viewServer(srv, resolveIsolation(srv, globalMode, s.host()), s.liveStatus(srv.Name, userID))
	var err error
	if p != nil {
		v.OAuth, err = s.oauthView(ctx, p, srv)
	}
	return v, err
}

// liveStatus is what this replica's gateway knows of a server, as the user
// sees it (a per-user OAuth server runs one instance per user).
func (s *Server) liveStatus(name string, userID int64) statusView {
	if s.gw == nil {
		return statusView{State: "unknown"}
	}
	st := s.gw.StatusFor(name, userID)
	return statusView{State: st.State, LastError: st.LastError, ToolCount: st.ToolCount, ConnectedSince: st.ConnectedSince}
}

// visibleServer loads a server the principal may see; anything else is 404.
func (s *Server) visibleServer(r *http.Request) (store.Server, error) {
	p := principal(r.Context())
	name := chi.URLParam(r, "name")
	if !p.AllowsServer(name) {
		return store.Server{}, notFound("server")
	}
	srv, err := s.store.GetServer(r.Context(), p.Scope(), name)
	if errors.Is(err, store.ErrNotFound) {
		return store.Server{}, notFound("server")
	}
	return srv, err
}

// canManage says whether p may change srv: admins may change any, members
// their own personal servers.
func canManage(p *Principal, srv store.Server) error {
	if p.IsAdmin() {
		return nil
	}
	if srv.Shared || srv.OwnerID != p.User.ID {
		return forbidden("shared servers are changed by admins only")
	}
	return nil
}

// manageableServer loads a server the principal may change.
func (s *Server) manageableServer(r *http.Request) (store.Server, error) {
	p := principal(r.Context())
	if err := requireUser(p); err != nil {
		return store.Server{}, err
	}
	srv, err := s.visibleServer(r)
	if err != nil {
		return srv, err
	}
	return srv, canManage(p, srv)
}

// checkMemberIsolation keeps a member's stdio server from running unconfined.
func (s *Server) checkMemberIsolation(ctx context.Context, srv store.Server) error {
	if srv.Protocol != "stdio" {
		return nil
	}
	owner, err := s.store.GetUser(ctx, srv.OwnerID)
	if err != nil {
		return err
	}
	if owner.Role == "admin" {
		return nil
	}
	cfg, err := s.config(ctx)
	if err != nil {
		return err
	}
	eff := resolveIsolation(srv, cfg.Isolation.GlobalMode, s.host())
	if eff.Mode == isolation.None {
		return forbidden("a member's stdio server must run isolated, but this one resolves to mode none (%s); "+
			"leave isolation.enabled_override and isolation.mode_override unset or choose docker or sandbox", eff.Source)
	}
	return nil
}

func (s *Server) listServers(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	list, err := s.store.ListServers(r.Context(), p.Scope())
	if err != nil {
		return err
	}
	cfg, err := s.config(r.Context())
	if err != nil {
		return err
	}
	out := make([]serverView, 0, len(list))
	for _, srv := range list {
		if p.AllowsServer(srv.Name) {
			v, err := s.viewWith(r.Context(), srv, cfg.Isolation.GlobalMode)
			if err != nil {
				return err
			}
			out = append(out, v)
		}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"servers": out})
}

func (s *Server) getServer(w http.ResponseWriter, r *http.Request) error {
	srv, err := s.visibleServer(r)
	if err != nil {
		return err
	}
	return s.writeServer(w, r, http.StatusOK, srv)
}

func (s *Server) createServer(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	if err := requireUser(p); err != nil {
		return err
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	srv, oauthIn, err := decodeServerCreate(body, p.IsAdmin())
	if err != nil {
		return err
	}
	srv.OwnerID = p.User.ID
	if err := checkServer(&srv, s.extraArgs); err != nil {
		return err
	}
	if oauthIn != nil && srv.Protocol == "stdio" {
		return badRequest("oauth applies to remote (streamable-http, sse) servers only")
	}
	if err := s.checkMemberIsolation(r.Context(), srv); err != nil {
		return err
	}
	created, err := s.store.CreateServer(r.Context(), p.Actor(r.Context()), srv)
	if err != nil {
		return err
	}
	if err := s.applyOAuth(r.Context(), p, created, oauthIn); err != nil {
		return err
	}
	w.Header().Set("Location", "/api/v1/servers/"+created.Name)
	return s.writeServer(w, r, http.StatusCreated, created)
}

func (s *Server) updateServer(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	if _, err := s.manageableServer(r); err != nil {
		return err
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	patch, err := decodeServerPatch(body)
	if err != nil {
		return err
	}
	if patch.Shared.IsSpecified() && !p.IsAdmin() {
		return badRequest("%s", describeChange("shared"))
	}

	updated, err := s.store.UpdateServer(r.Context(), p.Actor(r.Context()), p.Scope(), chi.URLParam(r, "name"), "server.update",
		func(cur *store.Server) error {
			next := applyServerPatch(*cur, patch)
			if err := checkServer(&next, s.extraArgs); err != nil {
				return err
			}
			if err := s.checkMemberIsolation(r.Context(), next); err != nil {
				return err
			}
			*cur = next
			return nil
		})
	if err != nil {
		return err
	}

	return s.writeServer(w, r, http.StatusOK, updated)
}

func (s *Server) deleteServer(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	srv, err := s.manageableServer(r)
	if err != nil {
		return err
	}
	if err := s.store.DeleteServer(r.Context(), p.Actor(r.Context()), p.Scope(), srv.Name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) restartServer(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	srv, err := s.manageableServer(r)
	if err != nil {
		return err
	}
	if err := s.restart(r.Context(), p, srv); err != nil {
		return err
	}
	return s.writeServer(w, r, http.StatusAccepted, srv)
}

func (s *Server) setQuarantine(w http.ResponseWriter, r *http.Request, quarantined bool) error {
	p := principal(r.Context())
	srv, err := s.manageableServer(r)
	if err != nil {
		return err
	}
	if !quarantined && s.gw != nil {
		// Approval pins the tools the server offers now, so it needs them.
		updated, err := s.gw.Approve(r.Context(), p.Actor(r.Context()), srv.Name)
		if err != nil {
			return upstreamProblem(err, "approving needs the server's current tools, and they could not be listed")
		}
		return s.writeServer(w, r, http.StatusOK, updated)
	}
	action := "server.approve"
	if quarantined {
		action = "server.quarantine"
	}
	updated, err := s.store.UpdateServer(r.Context(), p.Actor(r.Context()), p.Scope(), srv.Name, action, func(cur *store.Server) error {
		cur.Quarantined = quarantined
		return nil
	})
	if err != nil {
		return err
	}
	return s.writeServer(w, r, http.StatusOK, updated)
}

func (s *Server) approveServer(w http.ResponseWriter, r *http.Request) error {
	return s.setQuarantine(w, r, false)
}

func (s *Server) quarantineServer(w http.ResponseWriter, r *http.Request) error {
	return s.setQuarantine(w, r, true)
}

func (s *Server) listServerTools(w http.ResponseWriter, r *http.Request) error {
	srv, err := s.visibleServer(r)
	if err != nil {
		return err
	}
	out := []toolView{}
	if s.gw != nil && srv.Enabled {
		tools, err := s.gw.Tools(r.Context(), srv.Name)
		if err != nil {
			return upstreamProblem(err, "the server's tools could not be listed")
		}
		for _, t := range tools {
			out = append(out, toolView{Name: srv.Name + ":" + t.Name, Server: srv.Name, Tool: t.Name, Title: t.Title,
				Description: t.Description, Annotations: t.Annotations, InputSchema: t.InputSchema,
				OutputSchema: t.OutputSchema, Variant: t.Variant, State: t.State, Pin: t.Pin})
		}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"tools": out})
}

func (s *Server) getServerLogs(w http.ResponseWriter, r *http.Request) error {
	srv, err := s.manageableServer(r)
	if err != nil {
		return err
	}
	tail := 200
	if v, err := strconv.Atoi(r.URL.Query().Get("tail")); err == nil {
		tail = v
	}
	lines := []string{}
	if s.gw != nil {
		lines = s.gw.Logs(srv.Name, tail)
	}
	return writeJSON(w, http.StatusOK, map[string]any{"lines": lines})
}

func (s *Server) searchTools(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	limit := 20
	if v, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil {
		limit = v
	}
	out := []toolView{}
	if s.gw != nil {
		for _, t := range s.gw.SearchAs(p.caller(), r.URL.Query().Get("q"), limit) {
			out = append(out, toolView{Name: t.Name, Server: t.Server, Tool: t.Tool, Title: t.Title,
				Description: t.Description, Annotations: t.Annotations, InputSchema: t.InputSchema, Score: t.Score})
		}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"tools": out})
}

// restart asks every replica to reconnect the server.
func (s *Server) restart(ctx context.Context, p *Principal, srv store.Server) error {
	if s.gw == nil {
		return s.store.RecordServerAction(ctx, p.Actor(ctx), "server.restart", srv.Name)
	}
	if !srv.Enabled {
		return newProblem(http.StatusConflict, "the server is disabled; enable it first")
	}
	if err := s.gw.Restart(ctx, p.Actor(ctx), srv.Name); err != nil {
		return upstreamProblem(err, "the server did not come back; see its status and logs")
	}
	return nil
}

// upstreamProblem reports a failure of an upstream server as 502, keeping
// our own errors (not found, timeouts, database) as they map.
func upstreamProblem(err error, detail string) error {
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return err
	}
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	q := newProblem(http.StatusBadGateway, detail)
	q.cause = err
	return q
}
