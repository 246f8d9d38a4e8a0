package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Protocols an upstream speaks.
const (
	ProtocolStdio          = "stdio"
	ProtocolStreamableHTTP = "streamable-http"
	ProtocolSSE            = "sse"
)

// StdioProtocolVersion is pinned for stdio children: it skips the
// server/discover probe and keeps keepalive pings working.
const StdioProtocolVersion = "2025-11-25"

// State is where an instance is in its life.
type State string

// The states of an Instance.
const (
	StateStopped    State = "stopped"
	StateConnecting State = "connecting"
	StateReady      State = "ready"
	StateError      State = "error" // the last start failed or the session died; a restart is pending
)

var (
	// ErrUnavailable is wrapped by errors for calls that did not reach a live
	// session: not ready, or the session died during the call.
	ErrUnavailable = errors.New("upstream unavailable")
	// ErrStopped is wrapped by errors for calls to a stopped instance.
	ErrStopped = errors.New("upstream stopped")
)

// Limits on a tools listing, so that an upstream cannot page forever.
const (
	maxToolPages = 1000
	maxTools     = 10000
)

// Config is one upstream as the core resolved it from its stored row. It is
// plain data: the Supervisor compares Configs to decide whether to restart.
type Config struct {
	Name     string
	Protocol string // ProtocolStdio, ProtocolStreamableHTTP or ProtocolSSE; empty: stdio when Command is set, else streamable HTTP

	// stdio
	Command   string
	Args      []string
	Env       map[string]string
	Dir       string
	Isolation Isolation

	// remote
	URL     string
	Headers map[string]string // sent only to URL's origin
	// Auth, when set, authorizes the remote session's requests (OAuth); a
	// configured Authorization header is then never sent.
	Auth *Auth

	InitTimeout    time.Duration // launch, initialize and first tools/list; default 60 s
	CallTimeout    time.Duration // per tools/call; default 5 min
	MaxConcurrency int           // calls in flight at once; default 16
	KeepAlive      time.Duration // ping interval; a missed ping ends the session (and so restarts the child); 0: no pings
	KeepAliveMiss  int           // consecutive missed pings tolerated before that; default 1
	MaxFrameBytes  int           // largest stdio JSON-RPC frame; default 32 MiB
	StopTimeout    time.Duration // bound on tearing a dead or replaced session down; default 15 s
	LogSize        int           // stderr bytes kept; default DefaultLogRingSize
	Backoff        Backoff
}

func (c Config) withDefaults() Config {
	if c.Protocol == "" {
		c.Protocol = ProtocolStreamableHTTP
		if c.Command != "" {
			c.Protocol = ProtocolStdio
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.InitTimeout, 60*time.Second)
	def(&c.CallTimeout, 5*time.Minute)
	def(&c.StopTimeout, 15*time.Second)
	if c.MaxConcurrency <= 0 {
		c.MaxConcurrency = 16
	}
	if c.MaxFrameBytes <= 0 {
		c.MaxFrameBytes = 32 << 20
	}
	c.Backoff = c.Backoff.withDefaults()
	return c
}

// Options are an instance's collaborators, as opposed to its Config.
type Options struct {
	Launcher      Launcher          // starts stdio children; required for stdio
	Clock         Clock             // default SystemClock
	Logger        *slog.Logger      // default: discard
	HTTPTransport http.RoundTripper // base transport for remote upstreams; default http.DefaultTransport
	Stderr        io.Writer         // also receives the child's stderr, besides the ring; must not block
	// OnToolsChanged is called with the new listing whenever it differs from
	// the previous one, the first listing included. Calls are serialized per
	// instance; it must not block for long.
	OnToolsChanged func(tools []*mcp.Tool)
	// RandFunc returns numbers in [0, 1) for backoff jitter; default math/rand.
	RandFunc func() float64
	// ClientVersion is sent in clientInfo; default "dev".
	ClientVersion string
}

// Status is an instance's live state, for the API.
type Status struct {
	State          State
	LastError      string    // why the last start failed or the last session ended
	ToolCount      int       // size of the latest listing
	ConnectedSince time.Time // zero unless ready
	Starts         int       // sessions established since the instance was created
}

// Instance is one live MCP client session to one upstream, kept alive: it
// reconnects with backoff when the session dies and follows the upstream's
// tool list.
type Instance struct {
	cfg     Config
	opts    Options
	ring    *LogRing
	stderr  io.Writer
	sem     chan struct{}
	backoff *backoffState // owned by the run goroutine
	restart chan chan error

	lifeMu sync.Mutex // serializes Start and Close

	mu        sync.Mutex
	status    Status
	lastStart time.Time
	tools     []*mcp.Tool
	sess      *session
	changed   chan struct{} // closed and replaced on every status change
	running   bool
	cancelRun context.CancelFunc
	runDone   chan struct{}

	pubMu     sync.Mutex // serializes tool publication and OnToolsChanged
	toolsJSON []byte
}

// NewInstance returns a stopped instance; Start starts it.
func NewInstance(cfg Config, opts *Options) *Instance {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Clock == nil {
		o.Clock = SystemClock
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ClientVersion == "" {
		o.ClientVersion = "dev"
	}
	cfg = cfg.withDefaults()
	i := &Instance{
		cfg:     cfg,
		opts:    o,
		ring:    NewLogRing(cfg.LogSize),
		sem:     make(chan struct{}, cfg.MaxConcurrency),
		backoff: newBackoffState(cfg.Backoff, o.RandFunc),
		restart: make(chan chan error),
		status:  Status{State: StateStopped},
		changed: make(chan struct{}),
	}
	i.stderr = i.ring
	if o.Stderr != nil {
		i.stderr = io.MultiWriter(i.ring, o.Stderr)
	}
	return i
}

// Name returns the configured server name.
func (i *Instance) Name() string { return i.cfg.Name }

// Config returns the configuration the instance runs with, defaults filled in.
func (i *Instance) Config() Config { return i.cfg }

// Start begins connecting in the background. Starting a running instance does
// nothing; a closed instance may be started again.
func (i *Instance) Start() {
	i.lifeMu.Lock()
	defer i.lifeMu.Unlock()
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.running {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	i.running, i.cancelRun, i.runDone = true, cancel, make(chan struct{})
	i.setLocked(func(s *Status) { s.State = StateConnecting })
	go i.run(ctx, i.runDone)
}

// Close cancels in-flight calls, closes the session and stops the child;
// when it returns, nothing of the child remains (unless ctx ran out first).
// Closing a stopped instance does nothing.
func (i *Instance) Close(ctx context.Context) error {
	i.lifeMu.Lock()
	defer i.lifeMu.Unlock()
	i.mu.Lock()
	if !i.running {
		i.mu.Unlock()
		return nil
	}
	cancel, done := i.cancelRun, i.runDone
	i.mu.Unlock()
	cancel()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("closing upstream %q: %w", i.cfg.Name, ctx.Err())
	}
	i.mu.Lock()
	s := i.sess
	i.sess, i.running = nil, false
	i.setLocked(func(st *Status) { st.State, st.ConnectedSince = StateStopped, time.Time{} })
	i.mu.Unlock()
	if s == nil {
		return nil
	}
	if err := s.teardown(ctx, errors.New("instance closed")); err != nil {
		return fmt.Errorf("closing upstream %q: %w", i.cfg.Name, err)
	}
	return nil
}

// Restart replaces the session now, without backoff, and returns once the new
// one is ready or its start failed. A stopped instance is started.
func (i *Instance) Restart(ctx context.Context) error {
	i.mu.Lock()
	running, done := i.running, i.runDone
	i.mu.Unlock()
	if !running {
		i.Start()
		return i.WaitReady(ctx)
	}
	reply := make(chan error, 1)
	select {
	case i.restart <- reply:
	case <-done:
		return fmt.Errorf("restarting upstream %q: %w", i.cfg.Name, ErrStopped)
	case <-ctx.Done():
		return fmt.Errorf("restarting upstream %q: %w", i.cfg.Name, ctx.Err())
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return fmt.Errorf("restarting upstream %q: %w", i.cfg.Name, ctx.Err())
	}
}

// Status returns the instance's live state.
func (i *Instance) Status() Status {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.status
}

// State returns the instance's state.
func (i *Instance) State() State { return i.Status().State }

// Tools returns the latest tools listing, which outlives a stop. The tools are
// shared: do not modify them.
func (i *Instance) Tools() []*mcp.Tool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return slices.Clone(i.tools)
}

// Logs returns up to n of the child's last stderr lines.
func (i *Instance) Logs(n int) []string { return i.ring.Tail(n) }

// WaitReady waits until the instance is ready. It returns at once with an
// error wrapping ErrUnavailable when the latest start failed, or ErrStopped
// when the instance is stopped.
func (i *Instance) WaitReady(ctx context.Context) error {
	_, err := i.readySession(ctx)
	return err
}

func (i *Instance) readySession(ctx context.Context) (*session, error) {
	for {
		i.mu.Lock()
		st, s, changed := i.status, i.sess, i.changed
		i.mu.Unlock()
		switch st.State {
		case StateReady:
			if s != nil {
				return s, nil
			}
		case StateError:
			return nil, fmt.Errorf("upstream %q: %w: %s", i.cfg.Name, ErrUnavailable, st.LastError)
		case StateStopped:
			return nil, fmt.Errorf("upstream %q: %w", i.cfg.Name, ErrStopped)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("upstream %q: waiting for a session: %w", i.cfg.Name, ctx.Err())
		}
	}
}

var errSessionEnded = errors.New("session ended")

// Call calls tool with args (a JSON object; empty means {}) and returns the
// upstream's result unchanged. A JSON-RPC error from the upstream is returned
// as the *jsonrpc.Error itself, code, message and data intact. A call whose
// session dies returns at once with an error wrapping ErrUnavailable.
func (i *Instance) Call(ctx context.Context, tool string, args json.RawMessage) (*mcp.CallToolResult, error) {
	ctx, cancelTimeout := context.WithTimeout(ctx, i.cfg.CallTimeout)
	defer cancelTimeout()
	s, err := i.readySession(ctx)
	if err != nil {
		return nil, err
	}
	select {
	case i.sem <- struct{}{}:
	case <-s.dead:
		return nil, i.lostError(s, tool)
	case <-ctx.Done():
		return nil, fmt.Errorf("upstream %q: waiting for a call slot: %w", i.cfg.Name, ctx.Err())
	}
	defer func() { <-i.sem }()

	// Calls hang on a session whose child died while a grandchild holds its
	// stdout; the session's death cancels them instead.
	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-s.dead:
			cancel(errSessionEnded)
		case <-callCtx.Done():
		}
	}()
	var a any = args
	if t := bytes.TrimSpace(args); len(t) == 0 || string(t) == "null" {
		a = map[string]any{}
	}
	res, err := s.cs.CallTool(callCtx, &mcp.CallToolParams{Name: tool, Arguments: a})
	if err == nil {
		return res, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("upstream %q: calling %s: %w", i.cfg.Name, tool, ctx.Err())
	}
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) && rpcErr.Code != -32003 && rpcErr.Code != -32004 { // not "closing"
		return nil, rpcErr
	}
	// The connection may report EOF a moment before the child's exit is
	// known; the exit is the better explanation.
	if errors.Is(context.Cause(callCtx), errSessionEnded) || deadWithin(s, 500*time.Millisecond) {
		return nil, i.lostError(s, tool)
	}
	return nil, fmt.Errorf("upstream %q: calling %s: %w", i.cfg.Name, tool, err)
}

func deadWithin(s *session, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.dead:
		return true
	case <-t.C:
		return false
	}
}

// lostError explains a call cut short by the session's end.
func (i *Instance) lostError(s *session, tool string) error {
	reason := "connection closed"
	if deadWithin(s, 500*time.Millisecond) {
		reason = s.err.Error()
	}
	return fmt.Errorf("upstream %q: %w: session ended during %s: %s", i.cfg.Name, ErrUnavailable, tool, reason)
}

func (i *Instance) setLocked(f func(*Status)) {
	f(&i.status)
	close(i.changed)
	i.changed = make(chan struct{})
}

func (i *Instance) set(f func(*Status)) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.setLocked(f)
}

// run keeps a session alive until ctx is cancelled. It leaves a live session
// in i.sess for Close to tear down with Close's own deadline.
func (i *Instance) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	clock := i.opts.Clock
	var waiters []chan error
	reply := func(err error) {
		for _, w := range waiters {
			w <- err
		}
		waiters = nil
	}
	defer func() { reply(fmt.Errorf("upstream %q: %w", i.cfg.Name, ErrStopped)) }()

	for {
		i.set(func(st *Status) { st.State = StateConnecting })
		s, err := i.connect(ctx)
		if ctx.Err() != nil {
			if s != nil {
				i.mu.Lock()
				i.sess = s
				i.mu.Unlock()
			}
			return
		}
		var healthy time.Duration
		if err == nil {
			now := clock.Now()
			i.mu.Lock()
			i.sess = s
			i.setLocked(func(st *Status) {
				st.State, st.LastError, st.ConnectedSince = StateReady, "", now
				st.Starts++
			})
			i.mu.Unlock()
			reply(nil)
			select {
			case <-s.dead:
				healthy = clock.Now().Sub(now)
				err = fmt.Errorf("session ended: %w", s.err)
				i.opts.Logger.Warn("upstream session ended", "server", i.cfg.Name, "err", s.err)
			case <-ctx.Done():
				return
			case w := <-i.restart:
				waiters = append(waiters, w)
				i.detach(s)
				s.teardownBounded(i.cfg.StopTimeout, errors.New("restarting"))
				i.backoff.reset()
				continue
			}
			i.detach(s)
			i.setError(err)
			s.teardownBounded(i.cfg.StopTimeout, err)
		} else {
			reply(fmt.Errorf("upstream %q: %w: %v", i.cfg.Name, ErrUnavailable, err))
			i.setError(err)
			i.opts.Logger.Warn("upstream start failed", "server", i.cfg.Name, "err", err)
		}

		t := clock.NewTimer(i.backoff.next(healthy))
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return
		case w := <-i.restart:
			t.Stop()
			waiters = append(waiters, w)
			i.backoff.reset()
		}
	}
}

func (i *Instance) detach(s *session) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.sess == s {
		i.sess = nil
	}
}

func (i *Instance) setError(err error) {
	i.set(func(st *Status) {
		st.State, st.LastError, st.ConnectedSince = StateError, err.Error(), time.Time{}
	})
}

// session is one connection to the upstream: an MCP client session and, for
// stdio, the child behind it.
type session struct {
	cs          *mcp.ClientSession
	child       Child
	dead        chan struct{} // closed once, when the session is over for any reason
	err         error         // why; readable once dead is closed
	once        sync.Once
	cancel      context.CancelCauseFunc // ends the session's context
	listChanged chan struct{}
}

func (s *session) die(err error) {
	s.once.Do(func() {
		s.err = err
		close(s.dead)
		s.cancel(err)
	})
}

func (s *session) isDead() bool {
	select {
	case <-s.dead:
		return true
	default:
		return false
	}
}

// teardown cancels the session's calls before cs.Close, which would wait for
// them, then stops the child.
func (s *session) teardown(ctx context.Context, reason error) error {
	s.die(reason)
	if s.cs != nil {
		_ = s.cs.Close() // the session is over either way
	}
	if s.child != nil {
		return s.child.Stop(ctx)
	}
	return nil
}

func (s *session) teardownBounded(d time.Duration, reason error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_ = s.teardown(ctx, reason)
}

// connect starts one session: launch or dial, initialize, list tools. It
// returns a ready session or cleans up everything it started.
func (i *Instance) connect(ctx context.Context) (*session, error) {
	sessCtx, cancel := context.WithCancelCause(ctx)
	s := &session{dead: make(chan struct{}), cancel: cancel, listChanged: make(chan struct{}, 1)}
	timeout := i.cfg.InitTimeout
	timer := time.AfterFunc(timeout, func() {
		s.die(fmt.Errorf("no answer within %v", timeout))
	})
	fail := func(err error) (*session, error) {
		timer.Stop()
		if s.child != nil && !s.isDead() {
			// EOF from the child usually comes a moment before its exit
			// status, which is the better explanation.
			t := time.NewTimer(300 * time.Millisecond)
			select {
			case <-s.dead:
			case <-t.C:
			}
			t.Stop()
		}
		if s.isDead() && ctx.Err() == nil {
			if errors.Is(err, context.Canceled) {
				err = fmt.Errorf("initializing: %w", s.err) // the cancel's reason is the news
			} else {
				err = fmt.Errorf("%w (%v)", err, s.err)
			}
		}
		s.teardownBounded(i.cfg.StopTimeout, err)
		return nil, err
	}

	client := mcp.NewClient(&mcp.Implementation{Name: "mcpgate", Version: i.opts.ClientVersion}, &mcp.ClientOptions{
		Logger:       i.opts.Logger,
		Capabilities: &mcp.ClientCapabilities{}, // nothing: roots, sampling and elicitation cannot be relayed
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case s.listChanged <- struct{}{}:
			default: // a re-list is already due
			}
		},
		KeepAlive:                 i.cfg.KeepAlive,
		KeepAliveFailureThreshold: i.cfg.KeepAliveMiss,
	})
	var (
		tr    mcp.Transport
		sopts *mcp.ClientSessionOptions
		ht    *headerTransport
	)
	switch i.cfg.Protocol {
	case ProtocolStdio:
		if i.opts.Launcher == nil {
			return fail(errors.New("no launcher for stdio upstreams"))
		}
		child, err := i.opts.Launcher.Launch(sessCtx, Spec{
			Server: i.cfg.Name, Command: i.cfg.Command, Args: i.cfg.Args, Env: i.cfg.Env,
			Dir: i.cfg.Dir, Stderr: i.stderr, Isolation: i.cfg.Isolation,
		})
		if err != nil {
			return fail(fmt.Errorf("launching: %w", err))
		}
		s.child = child
		go func() {
			err := child.Wait()
			if err == nil {
				err = errors.New("exit status 0")
			}
			msg := "child exited: " + err.Error()
			if tail := i.ring.Tail(1); len(tail) > 0 {
				msg += "; last stderr line: " + truncate(tail[0], 200)
			}
			s.die(errors.New(msg))
		}()
		rc, ok := child.Stdout().(io.ReadCloser)
		if !ok {
			rc = io.NopCloser(child.Stdout())
		}
		tr = &mcp.IOTransport{Reader: rc, Writer: child.Stdin(), MaxLineLength: i.cfg.MaxFrameBytes}
		sopts = &mcp.ClientSessionOptions{ProtocolVersion: StdioProtocolVersion}
	case ProtocolStreamableHTTP, ProtocolSSE:
		base, headers := i.opts.HTTPTransport, i.cfg.Headers
		a := i.cfg.Auth
		if a != nil {
			headers = WithoutAuthorization(headers)
			if i.cfg.Protocol == ProtocolSSE && a.WrapTransport != nil {
				// The SSE transport has no OAuth hook: the wrapper sets the
				// token under the origin check, which runs first.
				w, err := a.WrapTransport(base)
				if err != nil {
					return fail(fmt.Errorf("authorizing: %w", err))
				}
				base = w
			}
		}
		var err error
		ht, err = newHeaderTransport(base, i.cfg.URL, headers)
		if err != nil {
			return fail(err)
		}
		// No http.Client.Timeout: it would also cut long SSE bodies.
		hc := &http.Client{Transport: ht}
		if i.cfg.Protocol == ProtocolSSE {
			// The SSE stream lives as long as Connect's ctx: sessCtx.
			tr = &mcp.SSEClientTransport{Endpoint: i.cfg.URL, HTTPClient: hc}
		} else {
			st := &mcp.StreamableClientTransport{Endpoint: i.cfg.URL, HTTPClient: hc}
			if a != nil {
				st.OAuthHandler = a.Handler
			}
			tr = st
		}
	default:
		return fail(fmt.Errorf("unknown protocol %q", i.cfg.Protocol))
	}

	cs, err := client.Connect(sessCtx, tr, sopts)
	if err != nil {
		if ht != nil && ht.refused() != nil {
			err = ht.refused() // the cause; the SDK reports only the closed connection
		}
		return fail(fmt.Errorf("initializing: %w", err))
	}
	s.cs = cs
	go func() {
		err := cs.Wait()
		if err == nil {
			err = errors.New("closed by the upstream")
		}
		if s.child != nil {
			// stdout's EOF comes just before the exit status, which says more.
			t := time.NewTimer(300 * time.Millisecond)
			defer t.Stop()
			select {
			case <-s.dead:
			case <-t.C:
			}
		}
		s.die(fmt.Errorf("connection lost: %w", err))
	}()
	tools, err := listTools(sessCtx, cs)
	if err != nil {
		return fail(err)
	}
	if !timer.Stop() {
		return fail(fmt.Errorf("initializing: no answer within %v", timeout))
	}
	i.publishTools(s, tools)
	go i.followToolChanges(sessCtx, s)
	return s, nil
}

func (i *Instance) followToolChanges(ctx context.Context, s *session) {
	for {
		select {
		case <-s.dead:
			return
		case <-s.listChanged:
		}
		lctx, cancel := context.WithTimeout(ctx, i.cfg.InitTimeout)
		tools, err := listTools(lctx, s.cs)
		cancel()
		if err != nil {
			if !s.isDead() {
				i.opts.Logger.Warn("re-listing upstream tools", "server", i.cfg.Name, "err", err)
			}
			continue
		}
		i.publishTools(s, tools)
	}
}

// publishTools records a listing of a live session and tells the catalog
// when it changed.
func (i *Instance) publishTools(s *session, tools []*mcp.Tool) {
	i.pubMu.Lock()
	defer i.pubMu.Unlock()
	if s.isDead() {
		return // a late listing of a replaced session
	}
	b, err := json.Marshal(tools)
	changed := err != nil || i.toolsJSON == nil || !bytes.Equal(b, i.toolsJSON)
	i.toolsJSON = b
	i.mu.Lock()
	i.tools = tools
	i.setLocked(func(st *Status) { st.ToolCount = len(tools) })
	i.mu.Unlock()
	if changed && i.opts.OnToolsChanged != nil {
		i.opts.OnToolsChanged(slices.Clone(tools))
	}
}

// listTools follows cursors, within limits that stop an upstream from
// paging forever.
func listTools(ctx context.Context, cs *mcp.ClientSession) ([]*mcp.Tool, error) {
	var (
		tools  []*mcp.Tool
		params = &mcp.ListToolsParams{}
	)
	for range maxToolPages {
		res, err := cs.ListTools(ctx, params)
		if err != nil {
			return nil, fmt.Errorf("listing tools: %w", err)
		}
		tools = append(tools, res.Tools...)
		if len(tools) > maxTools {
			return nil, fmt.Errorf("listing tools: more than %d tools", maxTools)
		}
		if res.NextCursor == "" {
			return tools, nil
		}
		params = &mcp.ListToolsParams{Cursor: res.NextCursor}
	}
	return nil, fmt.Errorf("listing tools: more than %d pages", maxToolPages)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
