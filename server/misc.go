package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	"github.com/mcpgate/mcpgate/settings"
	"github.com/mcpgate/mcpgate/store"
)

func (s *Server) getStatus(w http.ResponseWriter, r *http.Request) error {
	cfg, err := s.config(r.Context())
	if err != nil {
		return err
	}
	total, enabled, err := s.store.CountServers(r.Context())
	if err != nil {
		return err
	}
	host := s.host()
	iso := map[string]any{
		"global_mode":      cfg.Isolation.GlobalMode,
		"landlock_abi":     host.LandlockABI,
		"docker_available": host.DockerAvailable,
	}
	if v := s.dockerAPI(); v != "" {
		iso["docker_api_version"] = v
	}
	return writeJSON(w, http.StatusOK, map[string]any{
		"version": s.version, "edition": "server", "replica_id": s.replicaID,
		"isolation": iso,
		"servers":   map[string]int{"total": total, "enabled": enabled},
	})
}

func (s *Server) getConfig(w http.ResponseWriter, r *http.Request) error {
	if err := requireAdmin(principal(r.Context())); err != nil {
		return err
	}
	cfg, err := s.config(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, cfg)
}

func (s *Server) updateConfig(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	if err := requireAdmin(p); err != nil {
		return err
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	var out settings.Config
	err = s.store.UpdateSetting(r.Context(), p.Actor(r.Context()), settings.Key, func(cur []byte) (any, error) {
		c := s.defaults()
		if cur != nil {
			if err := json.Unmarshal(cur, &c); err != nil {
				return nil, err
			}
		}
		next, err := settings.Apply(c, s.defaults(), body)
		if err != nil {
			return nil, badRequest("%v", err)
		}
		out = next
		return next, nil
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) listActivity(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	if err := requireUser(p); err != nil {
		return err
	}
	q := r.URL.Query()
	f := store.ActivityFilter{Action: q.Get("action"), Server: q.Get("server")}
	f.UserID, _ = strconv.ParseInt(q.Get("user_id"), 10, 64)
	f.Before, _ = strconv.ParseInt(q.Get("before"), 10, 64)
	f.Limit, _ = strconv.Atoi(q.Get("limit"))
	if !p.IsAdmin() {
		if f.UserID != 0 && f.UserID != p.User.ID {
			return forbidden("members see only their own activity")
		}
		f.UserID = p.User.ID
	}
	list, err := s.store.ListActivity(r.Context(), f)
	if err != nil {
		return err
	}
	if list == nil {
		list = []store.Activity{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"activity": list})
}

func (s *Server) getDoctor(w http.ResponseWriter, r *http.Request) error {
	if err := requireAdmin(principal(r.Context())); err != nil {
		return err
	}
	if s.doctor == nil {
		return newProblem(http.StatusServiceUnavailable, "doctor is not configured on this replica")
	}
	return writeJSON(w, http.StatusOK, s.doctor(r.Context()))
}
