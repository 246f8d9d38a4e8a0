// Package gateway is the core that MCP clients reach at /mcp: it keeps the
// upstream servers of the database running on this replica (through an
// upstream.Supervisor, reconciled on Postgres notifications), indexes their
// tools in a catalog, and serves a small fixed tool set (retrieve_tools,
// describe_tool, call_tool_read|write|destructive, upstream_servers) on
// /mcp and every permitted tool directly on /mcp/all. Calls are gated by
// quarantine, tool pins, annotations and token scopes, and recorded in the
// activity log in batches, off the call's path. Remote servers that sign in
// with OAuth run one instance per user or one for the service account, and
// only for callers with a token (see oauth.go).
//
// The gateway holds no state another replica needs: server rows, pins and
// settings live in Postgres, and session ids are signed with a key every
// replica shares, so any replica serves any request.
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/catalog"
	"github.com/mcpgate/mcpgate/isolation"
	"github.com/mcpgate/mcpgate/metrics"
	"github.com/mcpgate/mcpgate/oauth"
	"github.com/mcpgate/mcpgate/settings"
	"github.com/mcpgate/mcpgate/store"
	"github.com/mcpgate/mcpgate/upstream"
)

// ErrNotFound is returned for a server this replica does not know. It is
// store.ErrNotFound, so one mapping to 404 covers both.
var ErrNotFound = store.ErrNotFound

// Caller is who an MCP request acts for, as the HTTP layer resolved its
// bearer token.
type Caller struct {
	UserID  int64
	Email   string
	Admin   bool     // the user's role is admin
	TokenID int64    // 0: not through a stored token (admin token, JWT)
	Agent   bool     // a narrow agent token: Scopes and Servers apply
	Scopes  []string // agent tokens only
	Servers []string // agent tokens only; "*" admits every server
}

// AllowsServer reports whether the token's server list admits name.
func (c *Caller) AllowsServer(name string) bool {
	if !c.Agent {
		return true
	}
	return slices.Contains(c.Servers, "*") || slices.Contains(c.Servers, name)
}

var allScopes = []string{string(catalog.VariantRead), string(catalog.VariantWrite), string(catalog.VariantDestructive)}

// EffectiveScopes returns the scopes calls are gated on: an agent token's
// own, every scope for anything else.
func (c *Caller) EffectiveScopes() []string {
	if !c.Agent {
		return allScopes
	}
	return c.Scopes
}

// ServerAdmin changes server definitions with the REST API's rules and
// validation, for the upstream_servers tool. The HTTP layer implements it
// from its handlers. Bodies are the REST request and response bodies;
// errors' messages are shown to the MCP client as they are.
type ServerAdmin interface {
	CreateServer(ctx context.Context, c Caller, body []byte) ([]byte, error)
	PatchServer(ctx context.Context, c Caller, name string, patch []byte) ([]byte, error)
	DeleteServer(ctx context.Context, c Caller, name string) error
}

// Options configure a Gateway. Store and AuthenticateFunc are required.
type Options struct {
	Store  *store.Store
	Logger *slog.Logger
	// ReplicaID names this replica in logs.
	ReplicaID string
	// Version is sent as serverInfo.version and clientInfo.version.
	Version string
	// Launcher starts stdio children; Spec.Isolation carries the resolved
	// mode and knobs, so an upstream.IsolatingLauncher confines each child
	// as resolved. Default: a plain upstream.ProcessLauncher, which runs
	// every child unconfined whatever its mode (logged once per server).
	Launcher upstream.Launcher
	// Host is what this machine offers, for isolation resolution.
	Host isolation.Host
	// HTTPTransport is the base transport to remote upstreams.
	HTTPTransport http.RoundTripper
	// AuthenticateFunc resolves a bearer token; an error means 401. It runs
	// on every MCP HTTP request.
	AuthenticateFunc func(ctx context.Context, bearer string) (Caller, error)
	// AuthCacheTTL keeps a successful AuthenticateFunc result for this long,
	// keyed by the token's SHA-256, so a busy client does not cost a
	// database round trip per request. A revoked or expired token then keeps
	// working on /mcp for up to the TTL. 0 (default): no cache.
	AuthCacheTTL time.Duration
	// Admin backs upstream_servers add/patch/remove; nil: those actions are
	// refused.
	Admin ServerAdmin
	// SessionKey signs Mcp-Session-Id values; every replica needs the same.
	// Empty: a random key kept in the settings table, shared that way.
	SessionKey []byte
	// RequestIDFunc names a request for the activity log; default: the
	// X-Request-Id header, else a random id.
	RequestIDFunc func(ctx context.Context, h http.Header) string
	// ResourceMetadataURL goes into WWW-Authenticate on 401s.
	ResourceMetadataURL string
	// ActivityBuffer bounds the tool calls waiting to be written; default
	// 8192. When full, records are dropped and counted, never blocking.
	ActivityBuffer int
	// ActivityFlushInterval is the longest a record waits; default 250 ms.
	ActivityFlushInterval time.Duration
	// Metrics, when set, receives tool calls by server and outcome, upstream
	// states and starts.
	Metrics *metrics.Registry
	// Backoff is the restart policy of crashed upstreams; zero: upstream's
	// default (10 s doubling to 5 min, reset after 10 min healthy).
	Backoff upstream.Backoff
	// OAuth signs in to remote servers that have an OAuth configuration:
	// their instances carry the service account's or each caller's token
	// (see the mode), never the MCP client's own credentials. nil: OAuth
	// configurations are ignored and such servers run without a token.
	OAuth *oauth.Manager
	// DisableLocalhostProtection turns off the SDK's DNS-rebinding guard,
	// for a gateway behind a reverse proxy on the same host.
	DisableLocalhostProtection bool
}

// Gateway is one replica's MCP core.
type Gateway struct {
	toolCalls *metrics.Counter // nil without Options.Metrics
	syncMu    sync.Mutex       // serializes sync
	opts      Options
	log       *slog.Logger
	sdkLog    *slog.Logger // warnings and errors only: the SDK logs every stateless request at info
	store     *store.Store
	sup       *upstream.Supervisor
	cat       *catalog.Catalog
	rec       *recorder
	key       []byte
	handler   http.Handler
	mcpSrv    *mcp.Server
	allSrv    *mcp.Server
	launcher  upstream.Launcher

	mu      sync.RWMutex
	servers map[string]*serverInfo // every server row, by name
	pins    map[string]map[string]string
	cfg     settings.Config
	// restarted notes local restarts, so the notification the restart
	// route sends does not restart the same instance twice.
	restarted map[string]time.Time
	// catSource maps a per-user server to the instance key its catalog
	// listing comes from.
	catSource map[string]string

	// recMu serializes reconciling the supervisor, which sync and the first
	// call of a user to a per-user OAuth server both do. The fields below
	// are the last sync's desired set; recMu guards them.
	recMu       sync.Mutex
	baseDesired []upstream.Desired          // everything but per-user instances
	perUser     map[string]upstream.Desired // per-user OAuth servers, by name: the template of their instances
	perUserID   map[string]int64            // their server ids
	// users with an instance, by per-user server name; changed holding
	// recMu and mu both, so either suffices to read it.
	users map[string]map[int64]bool

	inflight  atomic.Int64 // upstream calls in progress
	syncs     atomic.Int64 // completed re-reads, for tests
	auth      authCache
	kick      chan struct{}
	cancel    context.CancelFunc
	done      sync.WaitGroup
	closeOnce sync.Once
}

// serverInfo is what the call path needs of a server row.
type serverInfo struct {
	ID          int64
	Name        string
	Protocol    string
	Shared      bool
	OwnerID     int64
	Enabled     bool
	Quarantined bool
	Blocked     string // why the server cannot run here ("docker-unavailable"); "" runs
	URL         string
	OAuth       string // "" (none), store.OAuthShared or store.OAuthPerUser
}

// New loads the servers, pins and settings, starts the shared servers and
// begins listening for changes.
func New(ctx context.Context, opts *Options) (*Gateway, error) {
	if opts == nil || opts.Store == nil || opts.AuthenticateFunc == nil {
		return nil, errors.New("gateway: Store and AuthenticateFunc are required")
	}
	o := *opts
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.ActivityBuffer <= 0 {
		o.ActivityBuffer = 8192
	}
	if o.ActivityFlushInterval <= 0 {
		o.ActivityFlushInterval = 250 * time.Millisecond
	}
	log := o.Logger.With("component", "gateway")
	if o.ReplicaID != "" {
		log = log.With("replica_id", o.ReplicaID)
	}
	g := &Gateway{
		opts:      o,
		log:       log,
		sdkLog:    slog.New(minLevel{log.Handler(), slog.LevelWarn}),
		store:     o.Store,
		cat:       catalog.New(),
		servers:   map[string]*serverInfo{},
		pins:      map[string]map[string]string{},
		restarted: map[string]time.Time{},
		perUser:   map[string]upstream.Desired{},
		perUserID: map[string]int64{},
		users:     map[string]map[int64]bool{},
		catSource: map[string]string{},
		kick:      make(chan struct{}, 1),
	}
	g.auth.ttl = o.AuthCacheTTL
	g.launcher = o.Launcher
	if g.launcher == nil {
		g.launcher = &plainLauncher{log: log, warned: map[string]bool{}}
	}

	cfg, err := g.loadSettings(ctx)
	if err != nil {
		return nil, err
	}
	g.cfg = cfg
	key, err := g.sessionKey(ctx)
	if err != nil {
		return nil, err
	}
	g.key = key

	g.sup = upstream.NewSupervisor(&upstream.SupervisorOptions{
		Launcher:        g.launcher,
		Logger:          log,
		HTTPTransport:   o.HTTPTransport,
		ClientVersion:   o.Version,
		IdleTimeout:     time.Duration(cfg.Upstreams.IdleTimeoutSeconds) * time.Second,
		MaxLivePerOwner: cfg.Upstreams.MaxPersonalInstances,
		OnToolsChanged:  g.toolsChanged,
	})
	g.rec = newRecorder(o.Store, log, o.ActivityBuffer, o.ActivityFlushInterval)
	if o.Metrics != nil {
		g.registerMetrics(o.Metrics)
	}
	g.mcpSrv = g.newMCPServer()
	g.allSrv = g.newAllServer()
	g.handler = g.newHandler()

	if err := g.sync(ctx); err != nil {
		g.rec.close()
		_ = g.sup.Close(ctx)
		return nil, fmt.Errorf("loading servers: %w", err)
	}

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	g.cancel = cancel
	g.done.Go(func() {
		_ = g.store.Listen(runCtx, []string{"mcpgate_servers", "mcpgate_settings", store.RestartChannel}, store.ListenOptions{
			// Notifications may have been missed while not listening.
			ReadyFunc: g.trigger,
			NotifyFunc: func(n store.Notification) {
				if n.Channel == store.RestartChannel {
					g.restartIfLive(n.Payload)
					return
				}
				g.trigger()
			},
			ErrorFunc: func(err error) { log.Warn("listening for changes", "err", err) },
		})
	})
	g.done.Go(func() { g.syncLoop(runCtx) })
	return g, nil
}

// Close stops listening, stops every upstream and flushes the activity log.
func (g *Gateway) Close(ctx context.Context) error {
	var err error
	g.closeOnce.Do(func() {
		g.cancel()
		g.done.Wait()
		err = g.sup.Close(ctx)
		g.rec.close()
	})
	return err
}

// Handler serves /mcp and /mcp/all (paths relative to where it is mounted:
// mount it at the root).
func (g *Gateway) Handler() http.Handler { return g.handler }

func (g *Gateway) loadSettings(ctx context.Context) (settings.Config, error) {
	cfg := settings.Defaults(isolation.DefaultGlobal(g.opts.Host))
	err := g.store.GetSetting(ctx, settings.Key, &cfg)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return cfg, fmt.Errorf("loading settings: %w", err)
	}
	return cfg, nil
}

// sessionKeySetting holds the shared session-signing key.
const sessionKeySetting = "mcp_session_key"

func (g *Gateway) sessionKey(ctx context.Context) ([]byte, error) {
	if len(g.opts.SessionKey) > 0 {
		return g.opts.SessionKey, nil
	}
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, err
	}
	// The first replica to start writes it; the others read the same value.
	if _, err := g.store.InitSetting(ctx, sessionKeySetting, map[string]string{"key": base64.StdEncoding.EncodeToString(fresh)}); err != nil {
		return nil, fmt.Errorf("storing the session key: %w", err)
	}
	var v struct {
		Key string `json:"key"`
	}
	if err := g.store.GetSetting(ctx, sessionKeySetting, &v); err != nil {
		return nil, fmt.Errorf("loading the session key: %w", err)
	}
	key, err := base64.StdEncoding.DecodeString(v.Key)
	if err != nil || len(key) < 16 {
		return nil, errors.New("loading the session key: malformed value")
	}
	return key, nil
}

// trigger asks the sync loop for a re-read.
func (g *Gateway) trigger() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

func (g *Gateway) syncLoop(ctx context.Context) {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.kick:
		case <-retry.C:
		}
		if err := g.sync(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			g.log.Warn("re-reading servers", "err", err)
			retry.Reset(time.Second)
		}
	}
}

// sync re-reads settings, servers and pins and reconciles the supervisor.
func (g *Gateway) sync(ctx context.Context) error {
	// Whole syncs, one at a time: one that read the database earlier must
	// not apply its older picture over a newer one's.
	g.syncMu.Lock()
	defer g.syncMu.Unlock()
	cfg, err := g.loadSettings(ctx)
	if err != nil {
		return err
	}
	rows, err := g.store.ListServers(ctx, store.Scope{All: true})
	if err != nil {
		return err
	}
	pins, err := g.store.ListPins(ctx)
	if err != nil {
		return err
	}
	infos := make(map[string]*serverInfo, len(rows))
	desired := make([]upstream.Desired, 0, len(rows))
	perUser := map[string]upstream.Desired{}
	perUserID := map[string]int64{}
	for _, r := range rows {
		info := &serverInfo{ID: r.ID, Name: r.Name, Protocol: r.Protocol, Shared: r.Shared, OwnerID: r.OwnerID,
			Enabled: r.Enabled, Quarantined: r.Quarantined, URL: r.URL}
		if r.Enabled {
			if info.OAuth, err = g.oauthMode(ctx, r); err != nil {
				return err
			}
		}
		d, blocked := g.desired(r, cfg)
		info.Blocked = blocked
		infos[r.Name] = info
		if !r.Enabled || blocked != "" {
			continue
		}
		switch info.OAuth {
		case store.OAuthPerUser:
			perUser[r.Name], perUserID[r.Name] = d, r.ID
		case store.OAuthShared:
			desired = append(desired, g.withOAuth(d, r.ID, 0))
		default:
			desired = append(desired, d)
		}
	}

	g.recMu.Lock()
	defer g.recMu.Unlock()
	g.mu.Lock()
	for name, old := range g.servers {
		n := infos[name]
		if n == nil || !n.Enabled || n.Blocked != "" {
			g.cat.Remove(name)
		}
		if n == nil || n.OAuth != old.OAuth || n.URL != old.URL {
			// Another mode or URL: the old listing's source no longer runs.
			delete(g.catSource, name)
		}
	}
	g.servers, g.pins, g.cfg = infos, pins, cfg
	g.mu.Unlock()

	g.mu.Lock()
	for name := range g.users {
		if _, ok := perUser[name]; !ok {
			delete(g.users, name)
		}
	}
	g.mu.Unlock()
	g.baseDesired, g.perUser, g.perUserID = desired, perUser, perUserID
	if err := g.reconcileLocked(ctx); err != nil {
		return err
	}
	g.syncs.Add(1)
	return nil
}

// restartIfLive restarts a running instance in the background, unless this
// replica restarted it itself a moment ago (the notification comes back to
// its sender); a stopped lazy one starts fresh on its next use anyway.
func (g *Gateway) restartIfLive(name string) {
	g.mu.RLock()
	recent := time.Since(g.restarted[name]) < 2*time.Second
	g.mu.RUnlock()
	if recent {
		return
	}
	if info := g.lookup(name); info != nil && info.OAuth == store.OAuthPerUser {
		g.restartUsers(name, "")
		return
	}
	inst, ok := g.sup.Instance(name)
	if !ok || inst.State() == upstream.StateStopped {
		return
	}
	g.log.Info("restarting upstream on request", "server", name)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), inst.Config().InitTimeout+inst.Config().StopTimeout)
		defer cancel()
		if err := inst.Restart(ctx); err != nil {
			g.log.Warn("restarting upstream", "server", name, "err", err)
		}
	}()
}

// desired maps a stored server to what the supervisor runs, or says why it
// cannot run on this replica.
func (g *Gateway) desired(r store.Server, cfg settings.Config) (upstream.Desired, string) {
	eff := isolation.Resolve(isolation.Server{Protocol: r.Protocol, Command: r.Command,
		EnabledOverride: r.Isolation.EnabledOverride, ModeOverride: r.Isolation.ModeOverride},
		cfg.Isolation.GlobalMode, g.opts.Host)
	if eff.Source == isolation.SourceDockerUnavailable || eff.Source == isolation.SourceUnsupportedMode {
		return upstream.Desired{}, eff.Source
	}
	iso := upstream.Isolation{Mode: eff.Mode, NetworkMode: cfg.Isolation.NetworkMode, ExtraArgs: r.Isolation.ExtraArgs}
	if v := r.Isolation.Image; v != nil {
		iso.Image = *v
	}
	if v := r.Isolation.NetworkMode; v != nil {
		iso.NetworkMode = *v
	}
	if v := r.Isolation.MemoryLimit; v != nil {
		iso.MemoryLimit = *v
	}
	if v := r.Isolation.CPULimit; v != nil {
		iso.CPULimit = strconv.FormatFloat(*v, 'f', -1, 64)
	}
	c := upstream.Config{
		Name: r.Name, Protocol: r.Protocol,
		Command: r.Command, Args: r.Args, Env: r.Env, Dir: r.WorkingDir, Isolation: iso,
		URL: r.URL, Headers: r.Headers,
		InitTimeout: time.Duration(cfg.Upstreams.InitTimeoutSeconds) * time.Second,
		CallTimeout: time.Duration(cfg.Upstreams.CallTimeoutSeconds) * time.Second,
		Backoff:     g.opts.Backoff,
	}
	d := upstream.Desired{Key: r.Name, Config: c}
	if !r.Shared {
		// A personal server serves its owner only, so one instance per
		// server is one per user; it runs while in use.
		d.Lazy = true
		d.Owner = strconv.FormatInt(r.OwnerID, 10)
	}
	return d, ""
}

func (g *Gateway) toolsChanged(key string, tools []*mcp.Tool) {
	name := serverOfKey(key)
	g.mu.Lock()
	info := g.servers[name]
	if info == nil || !info.Enabled {
		g.mu.Unlock()
		return // removed meanwhile: a late listing must not bring it back
	}
	if key != name {
		// A per-user server: the first user instance to list speaks for
		// the server (see oauth.go).
		if src := g.catSource[name]; src != "" && src != key {
			g.mu.Unlock()
			return
		}
		g.catSource[name] = key
	}
	g.mu.Unlock()
	if err := g.cat.Replace(name, tools); err != nil {
		g.log.Warn("indexing tools", "server", name, "err", err)
	}
}

// plainLauncher is the default launcher: plain processes for every mode,
// until the HTTP layer wires an isolating one.
type plainLauncher struct {
	upstream.ProcessLauncher
	log    *slog.Logger
	mu     sync.Mutex
	warned map[string]bool
}

func (p *plainLauncher) Launch(ctx context.Context, spec upstream.Spec) (upstream.Child, error) {
	if spec.Isolation.Mode != isolation.None && spec.Isolation.Mode != "" {
		p.mu.Lock()
		if !p.warned[spec.Server] {
			p.warned[spec.Server] = true
			p.log.Warn("no isolating launcher configured; starting the server unconfined",
				"server", spec.Server, "mode", spec.Isolation.Mode)
		}
		p.mu.Unlock()
	}
	return p.ProcessLauncher.Launch(ctx, spec)
}

// minLevel drops records below min.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.min && m.Handler.Enabled(ctx, l)
}

func (m minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{m.Handler.WithAttrs(as), m.min}
}
func (m minLevel) WithGroup(name string) slog.Handler {
	return minLevel{m.Handler.WithGroup(name), m.min}
}
