package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/apikey"
	"github.com/mcpgate/mcpgate/internal/testbin"
	"github.com/mcpgate/mcpgate/keyring"
	"github.com/mcpgate/mcpgate/store"
	"github.com/mcpgate/mcpgate/store/storetest"
	"github.com/mcpgate/mcpgate/upstream"
)

func TestMain(m *testing.M) {
	// Adopt orphaned grandchildren of killed children, as the gateway
	// process does in production.
	if err := upstream.BecomeSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, "gateway tests:", err)
		os.Exit(1)
	}
	code := m.Run()
	storetest.StopPrivate()
	os.Exit(code)
}

// require skips the test when a resource is missing, or fails it under
// MCPGATE_TEST_STRICT=1 (CI), where everything must be present.
func require(t testing.TB, ok bool, reason string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("MCPGATE_TEST_STRICT") == "1" {
		t.Fatalf("missing test resource: %s", reason)
	}
	t.Skipf("missing test resource: %s", reason)
}

var dbSeq atomic.Int64

// env is one test's database (a clone of the migrated template, so tests
// never see each other's servers) with three users.
type env struct {
	t                 testing.TB
	db                *storetest.DB
	st                *store.Store
	admin, alice, bob store.User
	echo              string // the mcpecho binary
	launcher          *recordingLauncher
	logs              *syncBuffer
}

func newEnv(t testing.TB) *env {
	t.Helper()
	ctx := context.Background()
	db, err := storetest.NewDB(ctx, fmt.Sprintf("gateway%d", dbSeq.Add(1)))
	require(t, err == nil, fmt.Sprintf("test database: %v", err))
	t.Cleanup(db.Close)
	kr, err := keyring.Generate(filepath.Join(t.TempDir(), "key"))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, db: db, st: store.New(db.Pool, kr), echo: testbin.Build(t, "internal/cmd/mcpecho"),
		launcher: &recordingLauncher{ProcessLauncher: upstream.ProcessLauncher{Grace: 300 * time.Millisecond}, children: make(chan upstream.Child, 64)}, logs: &syncBuffer{}}
	e.admin = e.user("admin@example.test", "admin")
	e.alice = e.user("alice@example.test", "member")
	e.bob = e.user("bob@example.test", "member")
	return e
}

func (e *env) user(email, role string) store.User {
	e.t.Helper()
	u, err := e.st.CreateUser(context.Background(), store.Actor{}, email, email, role)
	if err != nil {
		e.t.Fatal(err)
	}
	return u
}

// token stores a new token for u and returns its plaintext.
func (e *env) token(u store.User, kind string, scopes, servers []string) string {
	e.t.Helper()
	k, err := apikey.New(kind)
	if err != nil {
		e.t.Fatal(err)
	}
	if scopes == nil {
		scopes = []string{"destructive"}
	}
	if servers == nil {
		servers = []string{"*"}
	}
	_, err = e.st.CreateToken(context.Background(), store.Actor{UserID: u.ID}, store.NewToken{
		UserID: u.ID, Name: "t", Kind: kind, Prefix: k.Display, Last4: k.Last4, Hash: k.Hash[:],
		Scopes: scopes, Servers: servers, ExpiresAt: time.Now().Add(time.Hour)})
	if err != nil {
		e.t.Fatal(err)
	}
	return k.Plain
}

// authenticate is what the HTTP layer hands the gateway: the stored-token
// rules of the REST API.
func (e *env) authenticate(ctx context.Context, bearer string) (Caller, error) {
	_, hash, ok := apikey.Parse(bearer)
	if !ok {
		return Caller{}, errors.New("malformed token")
	}
	t, err := e.st.LookupToken(ctx, hash[:])
	if err != nil {
		return Caller{}, err
	}
	if t.RevokedAt != nil || !time.Now().Before(t.ExpiresAt) || t.User.Disabled {
		return Caller{}, errors.New("token not valid")
	}
	return Caller{UserID: t.User.ID, Email: t.User.Email, Admin: t.User.Role == "admin", TokenID: t.ID,
		Agent: t.Kind == apikey.Agent, Scopes: t.Scopes, Servers: t.Servers}, nil
}

func (e *env) gateway(mod func(*Options)) *Gateway {
	e.t.Helper()
	o := &Options{
		Store:                 e.st,
		Logger:                slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		ReplicaID:             "test",
		Launcher:              e.launcher,
		AuthenticateFunc:      e.authenticate,
		ActivityFlushInterval: 20 * time.Millisecond,
	}
	if mod != nil {
		mod(o)
	}
	g, err := New(context.Background(), o)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := g.Close(ctx); err != nil {
			e.t.Errorf("closing gateway: %v", err)
		}
	})
	return g
}

func (e *env) serve(g *Gateway) *httptest.Server {
	srv := httptest.NewServer(g.Handler())
	e.t.Cleanup(srv.Close)
	return srv
}

// stdioServer stores an mcpecho server; approved ones are approved through
// the gateway's Approve once g is given.
func (e *env) addEcho(owner store.User, name string, shared bool, env map[string]string) store.Server {
	e.t.Helper()
	s, err := e.st.CreateServer(context.Background(), store.Actor{UserID: owner.ID}, store.Server{
		Name: name, Protocol: "stdio", Command: e.echo, Env: env, Enabled: true, Quarantined: true,
		Shared: shared, OwnerID: owner.ID})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) addRemote(owner store.User, name, url string) store.Server {
	e.t.Helper()
	s, err := e.st.CreateServer(context.Background(), store.Actor{UserID: owner.ID}, store.Server{
		Name: name, Protocol: "streamable-http", URL: url, Enabled: true, Quarantined: true, Shared: true, OwnerID: owner.ID})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// approve waits for name to list tools on g, then approves it.
func (e *env) approve(g *Gateway, name string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitKnown(e.t, g, name)
	if _, err := g.Approve(ctx, store.Actor{UserID: e.admin.ID}, name); err != nil {
		e.t.Fatalf("approving %s: %v", name, err)
	}
}

// waitKnown waits until g has read server name from the database.
func waitKnown(t testing.TB, g *Gateway, name string) {
	t.Helper()
	eventually(t, 10*time.Second, func() bool { return g.lookup(name) != nil }, "gateway knows "+name)
}

// eventually waits for cond, checking it on a ticker, until the deadline.
func eventually(t testing.TB, d time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for: %s", d, what)
		case <-tick.C:
		}
	}
}

// sessionRecorder is an HTTP transport that adds the bearer token and
// remembers the last Mcp-Session-Id the gateway issued.
type sessionRecorder struct {
	token string
	mu    sync.Mutex
	sid   string
	sent  int // requests that carried a session id
}

func (s *sessionRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+s.token)
	if r.Header.Get("Mcp-Session-Id") != "" {
		s.mu.Lock()
		s.sent++
		s.mu.Unlock()
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
			s.mu.Lock()
			s.sid = sid
			s.mu.Unlock()
		}
	}
	return resp, err
}

func (s *sessionRecorder) sessionID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sid
}

// connect opens an MCP client session to url with token.
func connect(t testing.TB, url, token string) (*mcp.ClientSession, *sessionRecorder) {
	t.Helper()
	rec := &sessionRecorder{token: token}
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: rec}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, rec
}

// recordingLauncher starts plain processes and hands each child to the test.
type recordingLauncher struct {
	upstream.ProcessLauncher
	children chan upstream.Child
}

func (l *recordingLauncher) Launch(ctx context.Context, spec upstream.Spec) (upstream.Child, error) {
	c, err := l.ProcessLauncher.Launch(ctx, spec)
	if err == nil {
		select {
		case l.children <- c:
		default:
		}
	}
	return c, err
}

type syncBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
