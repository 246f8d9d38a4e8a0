package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mcpgate/mcpgate/openapi"
	"github.com/mcpgate/mcpgate/store"
)

// Problem is an RFC 9457 problem: a status, a public detail, and a private
// cause that is logged and never sent.
type Problem struct {
	Type      string `json:"type,omitempty"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	cause     error
	header    http.Header
}

func (p *Problem) Error() string { return fmt.Sprintf("%d %s: %s", p.Status, p.Title, p.Detail) }
func (p *Problem) Unwrap() error { return p.cause }

func newProblem(status int, detail string) *Problem {
	return &Problem{Title: http.StatusText(status), Status: status, Detail: detail}
}

func badRequest(format string, args ...any) *Problem {
	return newProblem(http.StatusBadRequest, fmt.Sprintf(format, args...))
}

func forbidden(format string, args ...any) *Problem {
	return newProblem(http.StatusForbidden, fmt.Sprintf(format, args...))
}

func notFound(what string) *Problem {
	return newProblem(http.StatusNotFound, "no such "+what)
}

func unauthorized(detail string) *Problem {
	p := newProblem(http.StatusUnauthorized, detail)
	p.header = http.Header{"WWW-Authenticate": {`Bearer realm="mcpgate"`}}
	return p
}

// readOnlyHints explain, for fields a client may echo back, what to send
// instead.
var readOnlyHints = map[string]string{
	"isolation.enabled":   "isolation.enabled is read-only (the effective state); send isolation.enabled_override: true, false, or null to inherit the global setting",
	"isolation_effective": "isolation_effective is read-only (it is computed); change isolation.enabled_override or isolation.mode_override",
	"quarantined":         "quarantined is read-only here; use POST /servers/{name}/approve or /quarantine",
	"oauth":               "oauth is read-only here; configure it with PUT /servers/{name}/oauth/config, remove it with DELETE /servers/{name}/oauth/config",
}

func readOnly(field string) *Problem {
	if h, ok := readOnlyHints[field]; ok {
		return badRequest("%s", h)
	}
	return badRequest("%s is read-only", field)
}

// toProblem is the only place where errors become HTTP statuses.
func toProblem(err error) *Problem {
	var (
		p       *Problem
		reqErr  *openapi3filter.RequestError
		noRoute *openapi.ErrNoRoute
		method  *openapi.ErrMethod
		tooBig  *http.MaxBytesError
		pgErr   *pgconn.PgError
	)
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &tooBig):
		return newProblem(http.StatusRequestEntityTooLarge, "request body is larger than "+strconv.FormatInt(tooBig.Limit, 10)+" bytes")
	case errors.As(err, &reqErr):
		detail := openapi.Describe(reqErr)
		for field := range readOnlyHints {
			if strings.Contains(detail, ": "+field+": readOnly") {
				return readOnly(field)
			}
		}
		return newProblem(http.StatusBadRequest, detail)
	case errors.As(err, &noRoute):
		return newProblem(http.StatusNotFound, "no such route")
	case errors.As(err, &method):
		return newProblem(http.StatusMethodNotAllowed, "method not allowed on this route")
	case errors.Is(err, store.ErrNotFound):
		return newProblem(http.StatusNotFound, "no such resource")
	case errors.Is(err, store.ErrConflict):
		return newProblem(http.StatusConflict, "a resource with that name already exists")
	case errors.Is(err, context.DeadlineExceeded):
		q := newProblem(http.StatusServiceUnavailable, "timed out; retrying may work")
		q.header = http.Header{"Retry-After": {"1"}}
		q.cause = err
		return q
	case errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "08"), pgconn.SafeToRetry(err), isConnErr(err):
		q := newProblem(http.StatusServiceUnavailable, "database unavailable; retrying may work")
		q.header = http.Header{"Retry-After": {"2"}}
		q.cause = err
		return q
	}
	q := newProblem(http.StatusInternalServerError, "internal error; the request id identifies it in the logs")
	q.cause = err
	return q
}

func isConnErr(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}

type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// handle turns a handler's error into a problem response, logged once here.
func (s *Server) handle(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeProblem(w, r, err)
		}
	}
}

func (s *Server) writeProblem(w http.ResponseWriter, r *http.Request, err error) {
	p := toProblem(err)
	level := slog.LevelInfo // 4xx is ordinary traffic; 5xx is our bug or an outage
	if p.Status >= 500 {
		level = slog.LevelError
	}
	out := *p
	out.RequestID = requestID(r.Context())
	attrs := []slog.Attr{slog.Int("status", p.Status), slog.String("detail", p.Detail), slog.String("request_id", out.RequestID)}
	if p.cause != nil {
		attrs = append(attrs, slog.String("err", p.cause.Error()))
	}
	s.log.LogAttrs(r.Context(), level, "request failed", attrs...)
	for k, v := range p.header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(&out)
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	return json.NewEncoder(w).Encode(v)
}
