// Package server is mcpgate's HTTP surface: the REST API under /api/v1, the
// health endpoints, authentication, and the one place where errors become
// problem responses.
package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/mcpgate/mcpgate/doctor"
	"github.com/mcpgate/mcpgate/gateway"
	"github.com/mcpgate/mcpgate/isolation"
	"github.com/mcpgate/mcpgate/metrics"
	"github.com/mcpgate/mcpgate/migrations"
	"github.com/mcpgate/mcpgate/oauth"
	"github.com/mcpgate/mcpgate/openapi"
	"github.com/mcpgate/mcpgate/store"
)

// MaxBodyBytes bounds every REST request body.
const MaxBodyBytes = 1 << 20

// Options are what the HTTP surface needs from the process that runs it.
type Options struct {
	Store      *store.Store
	Log        *slog.Logger
	AdminToken string // bootstrap admin token; "" disables it
	ReplicaID  string
	Version    string
	// HostFunc reports what the host offers for isolation, probed at start.
	HostFunc         func() isolation.Host
	DockerAPIVersion func() string
	JWT              JWTOptions
	// ExtraArgs validates isolation.extra_args (the Docker runner's set).
	ExtraArgs ExtraArgsFunc
	// Doctor runs the deployment checks for GET /api/v1/doctor.
	Doctor func(ctx context.Context) doctor.Report
	// Metrics is the process's registry; nil makes a private one.
	Metrics *metrics.Registry
	// OAuth runs upstream OAuth flows; nil disables the oauth routes.
	OAuth *oauth.Manager
}

// Server serves the HTTP API of one replica.
type Server struct {
	store          *store.Store
	log            *slog.Logger
	api            *openapi.Validator
	adminTokenHash []byte
	replicaID      string
	version        string
	host           func() isolation.Host
	dockerAPI      func() string
	jwt            *jwtVerifier
	extraArgs      ExtraArgsFunc
	doctor         func(ctx context.Context) doctor.Report
	metrics        *metrics.Registry
	httpRequests   *metrics.Counter
	httpDuration   *metrics.Histogram
	gw             *gateway.Gateway
	oauth          *oauth.Manager
}

// SetGateway attaches the MCP core: /mcp and /mcp/all, and the live parts of
// the REST API (status, tools, logs, restart, approve, search). Without it
// the REST API answers from the store alone.
func (s *Server) SetGateway(gw *gateway.Gateway) { s.gw = gw }

// New builds the HTTP surface.
func New(opts Options) (*Server, error) {
	api, err := openapi.Load()
	if err != nil {
		return nil, err
	}
	s := &Server{
		store: opts.Store, log: opts.Log, api: api, replicaID: opts.ReplicaID, version: opts.Version,
		host: opts.HostFunc, dockerAPI: opts.DockerAPIVersion, extraArgs: opts.ExtraArgs,
		doctor: opts.Doctor, oauth: opts.OAuth,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.metrics = opts.Metrics
	if s.metrics == nil {
		s.metrics = metrics.NewRegistry()
	}
	s.httpRequests = s.metrics.NewCounter("mcpgate_http_requests_total", "HTTP requests by route and status.", "method", "route", "status")
	s.httpDuration = s.metrics.NewHistogram("mcpgate_http_request_duration_seconds", "HTTP request latency by route.",
		[]float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30}, "route")
	if s.host == nil {
		s.host = func() isolation.Host { return isolation.Host{} }
	}
	if s.dockerAPI == nil {
		s.dockerAPI = func() string { return "" }
	}
	if opts.AdminToken != "" {
		h := sha256.Sum256([]byte(opts.AdminToken))
		s.adminTokenHash = h[:]
	}
	if opts.JWT.SessionKey != nil || opts.JWT.Issuer != "" {
		s.jwt = newJWTVerifier(opts.JWT, opts.Store)
	}
	return s, nil
}

// Handler returns the routes of the replica.
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(s.requestID, s.logRequests, s.recoverer)
	r.NotFound(s.handle(func(http.ResponseWriter, *http.Request) error {
		return newProblem(http.StatusNotFound, "no such route")
	}))
	r.MethodNotAllowed(s.handle(func(http.ResponseWriter, *http.Request) error {
		return newProblem(http.StatusMethodNotAllowed, "method not allowed on this route")
	}))
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", s.handle(s.readyz))
	// The gateway authenticates MCP requests itself (the same token rules,
	// answered the way MCP clients expect: 401 with WWW-Authenticate).
	r.Get(oauth.CallbackPath, s.oauthCallback)
	r.Handle("/mcp", s.mcpHandler())
	r.Handle("/mcp/all", s.mcpHandler())
	r.With(s.authenticate).Get("/metrics", s.handle(func(w http.ResponseWriter, r *http.Request) error {
		if err := requireAdmin(principal(r.Context())); err != nil {
			return err
		}
		s.MetricsHandler().ServeHTTP(w, r)
		return nil
	}))

	r.Route("/api/v1", func(r chi.Router) {
		r.Get("/openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/yaml")
			w.Write(openapi.Spec)
		})
		r.Group(func(r chi.Router) {
			r.Use(s.limitBody, s.authenticate, s.validate)
			r.Get("/status", s.handle(s.getStatus))
			r.Get("/me", s.handle(s.getMe))

			r.Get("/users", s.handle(s.listUsers))
			r.Post("/users", s.handle(s.createUser))
			r.Get("/users/{id}", s.handle(s.getUser))
			r.Patch("/users/{id}", s.handle(s.updateUser))
			r.Delete("/users/{id}", s.handle(s.deleteUser))

			r.Get("/tokens", s.handle(s.listTokens))
			r.Post("/tokens", s.handle(s.createToken))
			r.Get("/tokens/{id}", s.handle(s.getToken))
			r.Delete("/tokens/{id}", s.handle(s.revokeToken))

			r.Get("/servers", s.handle(s.listServers))
			r.Post("/servers", s.handle(s.createServer))
			r.Get("/servers/{name}", s.handle(s.getServer))
			r.Patch("/servers/{name}", s.handle(s.updateServer))
			r.Delete("/servers/{name}", s.handle(s.deleteServer))
			r.Post("/servers/{name}/restart", s.handle(s.restartServer))
			r.Post("/servers/{name}/approve", s.handle(s.approveServer))
			r.Post("/servers/{name}/quarantine", s.handle(s.quarantineServer))
			r.Get("/servers/{name}/tools", s.handle(s.listServerTools))
			r.Get("/servers/{name}/logs", s.handle(s.getServerLogs))
			r.Post("/servers/{name}/oauth/start", s.handle(s.startOAuth))
			r.Delete("/servers/{name}/oauth", s.handle(s.forgetOAuth))
			r.Put("/servers/{name}/oauth/config", s.handle(s.putOAuthConfig))
			r.Delete("/servers/{name}/oauth/config", s.handle(s.deleteOAuthConfig))

			r.Get("/tools", s.handle(s.searchTools))
			r.Get("/config", s.handle(s.getConfig))
			r.Patch("/config", s.handle(s.updateConfig))
			r.Get("/activity", s.handle(s.listActivity))
			r.Get("/doctor", s.handle(s.getDoctor))
		})
	})
	return r
}

func (s *Server) mcpHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.gw == nil {
			s.writeProblem(w, r, newProblem(http.StatusServiceUnavailable, "the MCP endpoint is not running on this replica"))
			return
		}
		s.gw.Handler().ServeHTTP(&bearerChallenge{ResponseWriter: w}, r)
	})
}

// bearerChallenge makes every 401 carry a Bearer challenge (RFC 6750), as
// REST's do, whoever wrote it.
type bearerChallenge struct{ http.ResponseWriter }

func (b *bearerChallenge) WriteHeader(code int) {
	if code == http.StatusUnauthorized && b.Header().Get("WWW-Authenticate") == "" {
		b.Header().Set("WWW-Authenticate", `Bearer realm="mcpgate"`)
	}
	b.ResponseWriter.WriteHeader(code)
}

func (b *bearerChallenge) Flush() {
	if f, ok := b.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (b *bearerChallenge) Unwrap() http.ResponseWriter { return b.ResponseWriter }

// MetricsHandler serves the Prometheus exposition, unauthenticated: mount
// it only on a listener meant for it (MCPGATE_METRICS_LISTEN).
func (s *Server) MetricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		s.metrics.Write(w)
	})
}

// Routes lists every route as "METHOD /path", for the authorization
// matrix test's inventory; a path served for every method is "* /path".
func (s *Server) Routes() []string {
	methods := map[string][]string{}
	var paths []string
	chi.Walk(s.Handler().(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if methods[route] == nil {
			paths = append(paths, route)
		}
		methods[route] = append(methods[route], method)
		return nil
	})
	var out []string
	for _, p := range paths {
		if len(methods[p]) >= 9 { // chi's full method list: a Handle, not a route per method
			out = append(out, "* "+p)
			continue
		}
		for _, m := range methods[p] {
			out = append(out, m+" "+p)
		}
	}
	return out
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		return &Problem{Title: "Service Unavailable", Status: http.StatusServiceUnavailable, Detail: "database unreachable", cause: err}
	}
	pending, err := migrations.Pending(ctx, s.store.Pool())
	if err != nil || len(pending) > 0 {
		return &Problem{Title: "Service Unavailable", Status: http.StatusServiceUnavailable, Detail: "migrations not applied", cause: err}
	}
	return writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

type requestIDKey struct{}

func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// requestID echoes a sane X-Request-Id or makes one, so a client's id can be
// followed through our logs and the activity log.
func (s *Server) requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !saneID(id) {
			b := make([]byte, 12)
			rand.Read(b)
			id = hex.EncodeToString(b)
		}
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id)))
	})
}

func saneID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		route := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			route = rc.RoutePattern()
		}
		s.httpRequests.Inc(r.Method, route, strconv.Itoa(ww.Status()))
		s.httpDuration.Observe(time.Since(start).Seconds(), route)
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "http request",
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", ww.Status()), slog.Duration("duration", time.Since(start)),
			slog.String("request_id", requestID(r.Context())))
	})
}

func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.ErrorContext(r.Context(), "panic", "value", v, "stack", string(debug.Stack()), "request_id", requestID(r.Context()))
				s.writeProblem(w, r, errors.New("panic"))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// limitBody reads the whole body up front, so an oversized one is a 413
// before anything else looks at it.
func (s *Server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
			if err != nil {
				s.writeProblem(w, r, err)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
			r.ContentLength = int64(len(b))
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) validate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if _, _, err := s.api.ValidateRequest(r); err != nil {
			s.writeProblem(w, r, err)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}
