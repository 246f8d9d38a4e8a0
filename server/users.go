package server

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/mcpgate/mcpgate/store"
)

type userView struct {
	ID        int64     `json:"id"`
	Email     string    `json:"email"`
	Name      string    `json:"name"`
	Role      string    `json:"role"`
	Disabled  bool      `json:"disabled"`
	Builtin   bool      `json:"builtin,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

func viewUser(u store.User) userView {
	return userView{u.ID, u.Email, u.Name, u.Role, u.Disabled, u.Builtin, u.CreatedAt}
}

// decodeJSON decodes a body the OpenAPI validator has already checked;
// unknown fields are still refused, in case the document allows more than
// the handler reads.
func decodeJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("invalid JSON body: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

func pathID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
	if err != nil || id < 1 {
		return 0, badRequest("id must be a positive integer")
	}
	return id, nil
}

func (s *Server) getMe(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	out := map[string]any{"user": viewUser(p.User), "auth": p.Via}
	if p.Token != nil {
		out["token"] = viewToken(*p.Token)
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) listUsers(w http.ResponseWriter, r *http.Request) error {
	if err := requireAdmin(principal(r.Context())); err != nil {
		return err
	}
	users, err := s.store.ListUsers(r.Context())
	if err != nil {
		return err
	}
	out := make([]userView, 0, len(users))
	for _, u := range users {
		out = append(out, viewUser(u))
	}
	return writeJSON(w, http.StatusOK, map[string]any{"users": out})
}

func (s *Server) createUser(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	if err := requireAdmin(p); err != nil {
		return err
	}
	var in struct {
		Email string `json:"email"`
		Name  string `json:"name"`
		Role  string `json:"role"`
	}
	if err := decodeJSON(r, &in); err != nil {
		return err
	}
	if in.Role == "" {
		in.Role = "member"
	}
	u, err := s.store.CreateUser(r.Context(), p.Actor(r.Context()), strings.TrimSpace(in.Email), in.Name, in.Role)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, viewUser(u))
}

// adminTarget checks the caller is an admin and reads the {id} of the path.
func adminTarget(r *http.Request) (*Principal, int64, error) {
	p := principal(r.Context())
	if err := requireAdmin(p); err != nil {
		return nil, 0, err
	}
	id, err := pathID(r)
	return p, id, err
}

func (s *Server) getUser(w http.ResponseWriter, r *http.Request) error {
	_, id, err := adminTarget(r)
	if err != nil {
		return err
	}
	u, err := s.store.GetUser(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, viewUser(u))
}

func (s *Server) updateUser(w http.ResponseWriter, r *http.Request) error {
	p, id, err := adminTarget(r)
	if err != nil {
		return err
	}
	var in struct {
		Name     *string `json:"name"`
		Role     *string `json:"role"`
		Disabled *bool   `json:"disabled"`
	}
	if err := decodeJSON(r, &in); err != nil {
		return err
	}
	target, err := s.store.GetUser(r.Context(), id)
	if err != nil {
		return err
	}
	if target.Builtin && (in.Role != nil || in.Disabled != nil) {
		return badRequest("the built-in admin's role and disabled flag cannot change; unset MCPGATE_ADMIN_TOKEN to turn it off")
	}
	if id == p.User.ID && ((in.Role != nil && *in.Role != "admin") || (in.Disabled != nil && *in.Disabled)) {
		return badRequest("you cannot demote or disable yourself")
	}
	u, err := s.store.UpdateUser(r.Context(), p.Actor(r.Context()), id, store.UserPatch{Name: in.Name, Role: in.Role, Disabled: in.Disabled})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, viewUser(u))
}

func (s *Server) deleteUser(w http.ResponseWriter, r *http.Request) error {
	p, id, err := adminTarget(r)
	if err != nil {
		return err
	}
	if id == p.User.ID {
		return badRequest("you cannot delete yourself")
	}
	target, err := s.store.GetUser(r.Context(), id)
	if err != nil {
		return err
	}
	if target.Builtin {
		return badRequest("the built-in admin cannot be deleted")
	}
	if err := s.store.DeleteUser(r.Context(), p.Actor(r.Context()), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
