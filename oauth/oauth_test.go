package oauth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/keyring"
	"github.com/mcpgate/mcpgate/store"
	"github.com/mcpgate/mcpgate/store/storetest"
)

var (
	testDB    *storetest.DB
	testDBErr error
)

func TestMain(m *testing.M) {
	ctx := context.Background()
	testDB, testDBErr = storetest.NewDB(ctx, "oauth")
	code := m.Run()
	if testDB != nil {
		testDB.Close()
	}
	storetest.StopPrivate()
	os.Exit(code)
}

func needDB(t testing.TB) {
	t.Helper()
	if testDBErr == nil {
		return
	}
	if os.Getenv("MCPGATE_TEST_STRICT") == "1" {
		t.Fatalf("no test PostgreSQL: %v", testDBErr)
	}
	t.Skipf("no test PostgreSQL (set MCPGATE_TEST_DATABASE_URL or install the server binaries): %v", testDBErr)
}

// logBuf collects every log line of every Manager, for the secret grep.
type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var allLogs logBuf

// clock is a settable NowFunc, shared by the Managers of one test.
type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

var uniq atomic.Int64

func unique(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid()%100000, uniq.Add(1))
}

// env is one test's world: an authorization server, a protected MCP server,
// the gateway's callback endpoint, a Manager, users and a server row.
type env struct {
	t     testing.TB
	ctx   context.Context
	st    *store.Store
	kr    *keyring.Keyring
	as    *testAS
	rs    *testRS
	cb    *httptest.Server
	clock *clock
	m     *Manager
	srv   store.Server
	// users maps a gateway user id to the AS subject who logs in for them.
	users map[int64]string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	needDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	kr, err := keyring.Generate(filepath.Join(t.TempDir(), "keys"))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: ctx, kr: kr, st: store.New(testDB.Pool, kr), clock: &clock{}, users: map[int64]string{}}
	e.as = newTestAS(t)
	e.rs = newTestRS(t, e.as)
	// The gateway's own listener, reduced to the callback route. The
	// X-Gateway-User header stands for the gateway's session of the browser.
	e.cb = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != CallbackPath {
			http.NotFound(w, r)
			return
		}
		uid, _ := strconv.ParseInt(r.Header.Get("X-Gateway-User"), 10, 64)
		res, err := e.m.Callback(r.Context(), ParamsFromRequest(r, uid))
		if errors.Is(err, ErrBadState) {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		io.WriteString(w, res.ServerName)
	}))
	t.Cleanup(e.cb.Close)
	e.m = e.manager(testDB.Pool)
	owner := e.user("owner")
	e.srv, err = e.st.CreateServer(ctx, store.Actor{}, store.Server{Name: unique("remote"), Protocol: "streamable-http",
		URL: e.rs.endpoint, Enabled: true, Shared: true, OwnerID: owner, Args: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// manager returns a Manager on its own Store, as another replica would have.
func (e *env) manager(pool *pgxpool.Pool) *Manager {
	m, err := New(store.New(pool, e.kr), &Options{PublicURL: e.cb.URL, NowFunc: e.clock.Now,
		Logger: slog.New(slog.NewTextHandler(&allLogs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *env) user(subject string) int64 {
	u, err := e.st.CreateUser(e.ctx, store.Actor{}, unique(subject)+"@example.com", subject, "member")
	if err != nil {
		e.t.Fatal(err)
	}
	e.users[u.ID] = subject
	return u.ID
}

// browse plays a browser: it opens the authorization URL, logs in at the
// AS as subject, and follows the redirect to the gateway's callback. With
// cookie it holds the binding cookie the start response set (the UI
// started the flow); gatewayUser, when not 0, is the gateway session it has.
func (e *env) browse(a Authorization, cookie bool, gatewayUser int64, subject string) (int, string) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.ctx, http.MethodGet, a.URL, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("X-Test-User", subject)
	if gatewayUser != 0 {
		req.Header.Set("X-Gateway-User", strconv.FormatInt(gatewayUser, 10))
	}
	jar, _ := cookiejar.New(nil)
	if cookie {
		u, _ := url.Parse(e.cb.URL + a.Cookie.Path)
		jar.SetCookies(u, []*http.Cookie{a.Cookie})
	}
	resp, err := (&http.Client{Jar: jar}).Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// authorize runs the whole flow for a user and fails the test if it fails.
func (e *env) authorize(userID int64) {
	e.t.Helper()
	a, err := e.m.Start(e.ctx, e.srv, userID)
	if err != nil {
		e.t.Fatalf("Start: %v", err)
	}
	if code, body := e.browse(a, true, 0, e.users[userID]); code != http.StatusOK || body != e.srv.Name {
		e.t.Fatalf("callback: %d %q", code, body)
	}
}

// connect opens an MCP session to the protected server as a gateway user,
// the way the gateway core does: StreamableClientTransport with our handler.
func (e *env) connect(m *Manager, userID int64) (*mcp.ClientSession, error) {
	hc := &http.Client{Transport: callerHeader{caller: strconv.FormatInt(userID, 10), base: http.DefaultTransport}}
	c := mcp.NewClient(&mcp.Implementation{Name: "gateway", Version: "test"}, nil)
	return c.Connect(e.ctx, &mcp.StreamableClientTransport{Endpoint: e.rs.endpoint, HTTPClient: hc,
		OAuthHandler: m.Handler(e.srv.ID, userID, e.srv.URL), MaxRetries: -1}, nil)
}

func whoami(ctx context.Context, cs *mcp.ClientSession) (string, error) {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
	if err != nil {
		return "", err
	}
	if res.IsError || len(res.Content) != 1 {
		return "", fmt.Errorf("tool error: %+v", res.Content)
	}
	return res.Content[0].(*mcp.TextContent).Text, nil
}

func (e *env) mustWhoami(userID int64) string {
	e.t.Helper()
	cs, err := e.connect(e.m, userID)
	if err != nil {
		e.t.Fatalf("connect as user %d: %v", userID, err)
	}
	defer cs.Close()
	who, err := whoami(e.ctx, cs)
	if err != nil {
		e.t.Fatalf("whoami as user %d: %v", userID, err)
	}
	return who
}

func (e *env) storedToken(owner int64) store.OAuthToken {
	e.t.Helper()
	tok, err := e.st.GetOAuthToken(e.ctx, e.srv.ID, owner)
	if err != nil {
		e.t.Fatalf("stored token of %d: %v", owner, err)
	}
	return tok
}

func TestPerUserFlow(t *testing.T) {
	e := newEnv(t)
	alice, bob := e.user("alice"), e.user("bob")

	if st, err := e.m.Status(e.ctx, e.srv, alice); err != nil || st.Status != StatusNone {
		t.Fatalf("status before: %+v, %v", st, err)
	}
	e.authorize(alice)
	if got := e.mustWhoami(alice); got != "alice" {
		t.Fatalf("alice's call ran as %q", got)
	}
	st, err := e.m.Status(e.ctx, e.srv, alice)
	if err != nil || st.Status != StatusAuthorized || st.ExpiresAt == nil {
		t.Fatalf("alice's status: %+v, %v", st, err)
	}

	// Bob has no token: his call fails, and never borrows Alice's.
	if cs, err := e.connect(e.m, bob); err == nil {
		cs.Close()
		t.Fatal("bob connected without a token of his own")
	} else if !errors.Is(err, ErrNoToken) && !strings.Contains(err.Error(), ErrNoToken.Error()) {
		t.Fatalf("bob's connect failed with %v, want ErrNoToken", err)
	}
	if st, _ := e.m.Status(e.ctx, e.srv, bob); st.Status != StatusNone {
		t.Fatalf("bob's status %+v, want none", st)
	}

	e.authorize(bob)
	if got := e.mustWhoami(bob); got != "bob" {
		t.Fatalf("bob's call ran as %q", got)
	}
	if a, b := e.storedToken(alice), e.storedToken(bob); a.AccessToken == b.AccessToken {
		t.Fatal("alice and bob share an access token")
	}
	regs, exchanges, _ := e.as.counts()
	if regs != 1 || exchanges != 2 {
		t.Fatalf("registrations=%d exchanges=%d, want 1 (reused) and 2", regs, exchanges)
	}

	// Forced expiry: the next call refreshes, once, and keeps working.
	before := e.storedToken(alice)
	e.clock.Advance(2 * time.Hour)
	if got := e.mustWhoami(alice); got != "alice" {
		t.Fatalf("after expiry alice's call ran as %q", got)
	}
	if _, _, refreshes := e.as.counts(); refreshes != 1 {
		t.Fatalf("the AS saw %d refreshes, want 1", refreshes)
	}
	after := e.storedToken(alice)
	if after.AccessToken == before.AccessToken || after.RefreshToken == before.RefreshToken {
		t.Fatal("the refreshed (rotated) token was not stored")
	}
	if !after.Expiry.After(e.clock.Now()) {
		t.Fatalf("stored expiry %v is not after now %v", after.Expiry, e.clock.Now())
	}

	// The resource server saw each caller with their own subject only.
	reqs := e.rs.requests()
	for _, who := range []int64{alice, bob} {
		subs := subjects(reqs, strconv.FormatInt(who, 10))
		if len(subs) != 1 || subs[0] != e.users[who] {
			t.Errorf("requests for user %d carried tokens of %q, want only %q", who, subs, e.users[who])
		}
	}

	// Forget removes only Alice's token, here and at the AS.
	forgotten := e.storedToken(alice)
	if err := e.m.Forget(e.ctx, store.Actor{UserID: alice}, e.srv.ID, alice); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.as.lookup(forgotten.AccessToken); ok {
		t.Fatalf("the forgotten access token is still valid at the AS; logs: %s", allLogs.String())
	}
	e.as.mu.Lock()
	_, refreshLives := e.as.refresh[forgotten.RefreshToken]
	e.as.mu.Unlock()
	if refreshLives {
		t.Fatal("the forgotten refresh token was not revoked")
	}
	if st, _ := e.m.Status(e.ctx, e.srv, alice); st.Status != StatusNone {
		t.Fatalf("alice's status after Forget: %+v", st)
	}
	var logged int
	if err := testDB.Pool.QueryRow(e.ctx, `SELECT count(*) FROM activity WHERE action = 'server.oauth.forget'
		AND target = $1 AND user_id = $2`, "server/"+e.srv.Name, alice).Scan(&logged); err != nil || logged != 1 {
		t.Fatalf("Forget logged %d activity rows (%v), want 1", logged, err)
	}
	if _, err := e.m.Token(e.ctx, e.srv.ID, alice, e.srv.URL); !errors.Is(err, ErrNoToken) {
		t.Fatalf("Token after Forget: %v, want ErrNoToken", err)
	}
	if got := e.mustWhoami(bob); got != "bob" {
		t.Fatalf("bob after alice forgot: %q", got)
	}
	sts, err := e.m.Statuses(e.ctx, bob, []store.Server{e.srv})
	if err != nil || sts[e.srv.ID].Status != StatusAuthorized {
		t.Fatalf("Statuses(bob) = %+v, %v", sts, err)
	}
}

func TestSharedModePreregisteredClient(t *testing.T) {
	e := newEnv(t)
	admin, member := e.user("svc-admin"), e.user("member")
	secret := "prereg-secret-" + randText("")
	e.as.addClient("prereg-client", secret, e.m.RedirectURI())
	if err := e.st.PutServerOAuth(e.ctx, store.Actor{UserID: admin}, store.ServerOAuth{ServerID: e.srv.ID,
		Mode: store.OAuthShared, ClientID: "prereg-client", ClientSecret: secret}); err != nil {
		t.Fatal(err)
	}
	e.authorize(admin)
	if regs, _, _ := e.as.counts(); regs != 0 {
		t.Fatalf("a configured client id still registered %d clients", regs)
	}
	// Every caller uses the service account's token.
	if got := e.mustWhoami(member); got != "svc-admin" {
		t.Fatalf("member's call ran as %q, want the shared account", got)
	}
	if st, _ := e.m.Status(e.ctx, e.srv, member); st.Status != StatusAuthorized {
		t.Fatalf("member sees status %+v", st)
	}
	if _, err := e.st.GetOAuthToken(e.ctx, e.srv.ID, admin); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a shared flow stored a per-user token: %v", err)
	}
	// Forget by anyone the REST layer allows removes the shared token.
	if err := e.m.Forget(e.ctx, store.Actor{UserID: admin}, e.srv.ID, admin); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.m.Status(e.ctx, e.srv, member); st.Status != StatusNone {
		t.Fatalf("after Forget member sees %+v", st)
	}
}

func TestStateRefused(t *testing.T) {
	e := newEnv(t)
	alice, mallory := e.user("alice"), e.user("mallory")
	noToken := func(label string) {
		t.Helper()
		for _, u := range []int64{alice, mallory, 0} {
			if _, err := e.st.GetOAuthToken(e.ctx, e.srv.ID, u); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("%s: a token was stored for %d (%v)", label, u, err)
			}
		}
	}
	// start returns the state of a fresh flow and the flow.
	start := func() (string, Authorization) {
		t.Helper()
		a, err := e.m.Start(e.ctx, e.srv, alice)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(a.URL)
		return u.Query().Get("state"), a
	}

	t.Run("unknown", func(t *testing.T) {
		_, err := e.m.Callback(e.ctx, CallbackParams{UserID: alice, State: randomState(), Code: "x"})
		if !errors.Is(err, ErrBadState) {
			t.Fatalf("got %v", err)
		}
		if _, err := e.m.Callback(e.ctx, CallbackParams{UserID: alice, Code: "x"}); !errors.Is(err, ErrBadState) {
			t.Fatalf("empty state: got %v", err)
		}
		noToken("unknown")
	})
	t.Run("another user", func(t *testing.T) {
		_, a := start()
		// Mallory's browser finishes Alice's flow: refused, and burnt.
		if code, _ := e.browse(a, false, mallory, "mallory"); code != http.StatusBadRequest {
			t.Fatalf("callback as another user: %d, want 400", code)
		}
		if code, _ := e.browse(a, true, 0, "alice"); code != http.StatusBadRequest {
			t.Fatalf("the flow survived a foreign callback: %d, want 400", code)
		}
		noToken("another user")
	})
	t.Run("another browser", func(t *testing.T) {
		_, a := start()
		// A link to Alice's flow, opened by someone the gateway cannot
		// identify and without the binding cookie: refused.
		if code, _ := e.browse(a, false, 0, "victim"); code != http.StatusBadRequest {
			t.Fatalf("unbound callback: %d, want 400", code)
		}
		noToken("another browser")
	})
	t.Run("wrong binding", func(t *testing.T) {
		_, a := start()
		forged := *a.Cookie
		forged.Value = randomState()
		a.Cookie = &forged
		if code, _ := e.browse(a, true, 0, "alice"); code != http.StatusBadRequest {
			t.Fatalf("forged binding: %d, want 400", code)
		}
		noToken("wrong binding")
	})
	t.Run("reused", func(t *testing.T) {
		// Alice's own gateway session, no cookie (a flow started from a CLI).
		state, a := start()
		if code, _ := e.browse(a, false, alice, "alice"); code != http.StatusOK {
			t.Fatalf("first use: %d", code)
		}
		first := e.storedToken(alice)
		_, err := e.m.Callback(e.ctx, CallbackParams{UserID: alice, State: state, Code: "whatever"})
		if !errors.Is(err, ErrBadState) {
			t.Fatalf("second use: %v", err)
		}
		if e.storedToken(alice).AccessToken != first.AccessToken {
			t.Fatal("a reused state changed the stored token")
		}
		if err := e.m.Forget(e.ctx, store.Actor{}, e.srv.ID, alice); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("expired", func(t *testing.T) {
		_, a := start()
		e.clock.Advance(11 * time.Minute)
		if code, _ := e.browse(a, true, 0, "alice"); code != http.StatusBadRequest {
			t.Fatalf("expired state: %d, want 400", code)
		}
		noToken("expired")
	})
	t.Run("denied", func(t *testing.T) {
		state, _ := start()
		_, err := e.m.Callback(e.ctx, CallbackParams{UserID: alice, State: state, Error: "access_denied"})
		if !errors.Is(err, ErrDenied) {
			t.Fatalf("got %v", err)
		}
		if _, err := e.m.Callback(e.ctx, CallbackParams{UserID: alice, State: state, Code: "x"}); !errors.Is(err, ErrBadState) {
			t.Fatalf("state reused after a denial: %v", err)
		}
		noToken("denied")
	})
	t.Run("wrong issuer", func(t *testing.T) {
		state, _ := start()
		_, err := e.m.Callback(e.ctx, CallbackParams{UserID: alice, State: state, Code: "x", Iss: "https://evil.example"})
		if !errors.Is(err, ErrDenied) {
			t.Fatalf("got %v", err)
		}
		noToken("wrong issuer")
	})
}

// TestParallelRefresh is K3: two replicas (two Managers, two pools on one
// database), two goroutines each, all needing a refresh at once. The AS
// holds the first refresh until another replica is seen waiting on the row
// lock; it must see exactly one refresh, and everybody the same new token.
func TestParallelRefresh(t *testing.T) {
	e := newEnv(t)
	alice := e.user("alice")
	e.authorize(alice)
	pool2, err := pgxpool.New(e.ctx, testDB.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool2.Close()
	managers := []*Manager{e.m, e.manager(pool2)}

	hold, seen := make(chan struct{}), make(chan struct{}, 8)
	release := sync.OnceFunc(func() { close(hold) })
	defer release() // a failing test must not leave the AS's handlers blocked
	e.as.mu.Lock()
	e.as.holdRefresh, e.as.refreshSeen = hold, seen
	e.as.mu.Unlock()
	e.clock.Advance(2 * time.Hour)

	var wg sync.WaitGroup
	tokens := make([]string, 4)
	errs := make([]error, 4)
	for i := range tokens {
		wg.Go(func() {
			tok, err := managers[i%2].Token(e.ctx, e.srv.ID, alice, e.srv.URL)
			if err == nil {
				tokens[i] = tok.AccessToken
			}
			errs[i] = err
		})
	}
	select {
	case <-seen:
	case <-e.ctx.Done():
		t.Fatal("no refresh reached the AS")
	}
	// Wait until the other replica is blocked on the row lock.
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for waiting := 0; waiting == 0; {
		if err := testDB.Pool.QueryRow(e.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatal("the second replica never waited on the row lock")
		}
	}
	release()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("goroutine %d: %v", i, err)
		}
	}
	e.as.mu.Lock()
	refreshes, tried := e.as.refreshes, e.as.refreshTried
	e.as.mu.Unlock()
	if refreshes != 1 || tried != 1 {
		t.Fatalf("the AS saw %d refresh requests (%d granted), want exactly 1", tried, refreshes)
	}
	for i, tok := range tokens {
		if tok != tokens[0] {
			t.Fatalf("goroutine %d got another token than goroutine 0", i)
		}
	}
	if _, ok := e.as.lookup(tokens[0]); !ok {
		t.Fatal("the token everybody got is not valid at the AS")
	}
	if e.storedToken(alice).AccessToken != tokens[0] {
		t.Fatal("the stored token is not the one handed out")
	}
	if got := e.mustWhoami(alice); got != "alice" {
		t.Fatalf("call after the race ran as %q", got)
	}
}

func TestRejectedTokenRefreshesOnce(t *testing.T) {
	e := newEnv(t)
	alice := e.user("alice")
	e.authorize(alice)
	cs, err := e.connect(e.m, alice)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	// The AS drops the access token early: the upstream answers 401, the
	// handler refreshes and the SDK retries, within the same session.
	e.as.revokeAccess(e.storedToken(alice).AccessToken)
	if who, err := whoami(e.ctx, cs); err != nil || who != "alice" {
		t.Fatalf("call after revocation: %q, %v", who, err)
	}
	if _, _, r := e.as.counts(); r != 1 {
		t.Fatalf("refreshes = %d, want 1", r)
	}

	// Now the refresh token dies too: the call fails asking for authorization,
	// the status says expired, and further calls do not hammer the AS.
	e.as.revokeRefresh("alice")
	e.as.revokeAccess(e.storedToken(alice).AccessToken)
	if _, err := whoami(e.ctx, cs); err == nil || !strings.Contains(err.Error(), "authoriz") {
		t.Fatalf("call with dead tokens: %v", err)
	}
	if st, _ := e.m.Status(e.ctx, e.srv, alice); st.Status != StatusExpired {
		t.Fatalf("status %+v, want expired", st)
	}
	e.as.mu.Lock()
	tried := e.as.refreshTried
	e.as.mu.Unlock()
	for range 3 {
		if _, err := e.m.Token(e.ctx, e.srv.ID, alice, e.srv.URL); !errors.Is(err, ErrExpired) {
			t.Fatalf("Token: %v, want ErrExpired", err)
		}
	}
	e.as.mu.Lock()
	defer e.as.mu.Unlock()
	if e.as.refreshTried != tried {
		t.Fatalf("an expired token was refreshed again (%d → %d attempts)", tried, e.as.refreshTried)
	}
}

func TestSecretsAtRest(t *testing.T) {
	e := newEnv(t)
	alice, bob := e.user("alice"), e.user("bob")
	e.authorize(alice)
	e.authorize(bob)
	// A pending flow too, so its verifier is in the table.
	if _, err := e.m.Start(e.ctx, e.srv, alice); err != nil {
		t.Fatal(err)
	}
	secrets := e.as.Secrets()
	if len(secrets) < 8 {
		t.Fatalf("the AS recorded only %d secrets", len(secrets))
	}
	for _, table := range []string{"server_oauth", "oauth_flows", "oauth_tokens", "activity"} {
		rows, err := testDB.Pool.Query(e.ctx, `SELECT t::text FROM `+table+` t`)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			n++
			if v := containsAny(s, secrets); v != "" {
				t.Errorf("table %s holds a secret in clear", table)
			}
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		if n == 0 && table != "activity" {
			t.Errorf("table %s is empty: the check proves nothing", table)
		}
	}
	// Every secret column holds the keyring's format.
	var bad int
	if err := testDB.Pool.QueryRow(e.ctx, `SELECT count(*) FROM oauth_tokens
		WHERE server_id = $1 AND (access_token NOT LIKE 'v1:%' OR refresh_token NOT LIKE 'v1:%')`, e.srv.ID).Scan(&bad); err != nil || bad != 0 {
		t.Fatalf("%d token rows not sealed (%v)", bad, err)
	}

	// Alice's sealed access token copied into Bob's row does not open.
	aliceAccess := e.storedToken(alice).AccessToken
	var sealed string
	if err := testDB.Pool.QueryRow(e.ctx, `SELECT access_token FROM oauth_tokens WHERE server_id = $1 AND user_id = $2`,
		e.srv.ID, alice).Scan(&sealed); err != nil {
		t.Fatal(err)
	}
	if _, err := testDB.Pool.Exec(e.ctx, `UPDATE oauth_tokens SET access_token = $1 WHERE server_id = $2 AND user_id = $3`,
		sealed, e.srv.ID, bob); err != nil {
		t.Fatal(err)
	}
	_, err := e.st.GetOAuthToken(e.ctx, e.srv.ID, bob)
	if !errors.Is(err, store.ErrSecret) {
		t.Fatalf("a moved ciphertext opened: %v", err)
	}
	_, tokErr := e.m.Token(e.ctx, e.srv.ID, bob, e.srv.URL)
	if tokErr == nil {
		t.Fatal("Token succeeded with a moved ciphertext")
	}
	for _, msg := range []string{err.Error(), tokErr.Error()} {
		if v := containsAny(msg, append(secrets, sealed, aliceAccess)); v != "" {
			t.Fatalf("the error leaks a secret or ciphertext: %q", msg)
		}
	}
	if st, _ := e.m.Status(e.ctx, e.srv, bob); st.Status != StatusError {
		t.Fatalf("bob's status with a bad row: %+v, want error", st)
	}
	logs := allLogs.String()
	if !strings.Contains(logs, "oauth authorized") {
		t.Fatal("the log capture saw nothing: the check proves nothing")
	}
	if containsAny(logs, secrets) != "" {
		t.Fatal("a secret appears in the logs")
	}
	// The moved value opens nowhere else either: into a column of its own row.
	if _, err := testDB.Pool.Exec(e.ctx, `UPDATE oauth_tokens SET refresh_token = access_token WHERE server_id = $1 AND user_id = $2`,
		e.srv.ID, alice); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.GetOAuthToken(e.ctx, e.srv.ID, alice); !errors.Is(err, store.ErrSecret) {
		t.Fatalf("a ciphertext moved to another column opened: %v", err)
	}
}

func TestSSETransport(t *testing.T) {
	e := newEnv(t)
	alice := e.user("alice")
	e.authorize(alice)
	want := e.storedToken(alice).AccessToken

	var mu sync.Mutex
	var otherAuth []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		otherAuth = append(otherAuth, r.Header.Get("Authorization"))
		mu.Unlock()
	}))
	defer other.Close()
	rt, err := e.m.Transport(callerHeader{caller: "sse", base: http.DefaultTransport}, e.srv.URL, e.srv.ID, alice)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: rt}
	// The SSE server's own origin (any path), then an origin it might name
	// as its message endpoint.
	for _, u := range []string{e.srv.URL + "?session=1", other.URL + "/steal"} {
		req, _ := http.NewRequestWithContext(e.ctx, http.MethodPost, u, strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer the-mcp-clients-own-token")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	var sent []string
	for _, r := range e.rs.requests() {
		if r.caller == "sse" {
			sent = append(sent, r.token)
		}
	}
	if len(sent) != 1 || sent[0] != want {
		t.Errorf("the server's origin got tokens %q, want only the user's upstream token", sent)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(otherAuth) != 1 || otherAuth[0] != "" {
		t.Errorf("another origin got Authorization %q", otherAuth)
	}
}

func TestStartRefusesNonRemote(t *testing.T) {
	e := newEnv(t)
	srv := e.srv
	srv.Protocol, srv.URL, srv.Command = "stdio", "", "true"
	if _, err := e.m.Start(e.ctx, srv, e.user("x")); !errors.Is(err, ErrNotOAuth) {
		t.Fatalf("Start on stdio: %v", err)
	}
	if _, err := New(e.st, &Options{PublicURL: "ftp://x"}); err == nil {
		t.Fatal("New accepted a non-http public URL")
	}
}

// TestKeyRotation: after a new primary key and RotateOAuthSecrets, no OAuth
// value references the old key, which can then be retired while every
// token, client and flow still works.
func TestKeyRotation(t *testing.T) {
	e := newEnv(t)
	alice := e.user("alice")
	secret := "rot-secret-" + randText("")
	e.as.addClient("rot-client", secret, e.m.RedirectURI())
	if err := e.st.PutServerOAuth(e.ctx, store.Actor{}, store.ServerOAuth{ServerID: e.srv.ID, Mode: store.OAuthPerUser,
		ClientID: "rot-client", ClientSecret: secret}); err != nil {
		t.Fatal(err)
	}
	e.authorize(alice)
	pending, err := e.m.Start(e.ctx, e.srv, alice)
	if err != nil {
		t.Fatal(err)
	}
	// Other tests' rows are sealed under keyrings of their own, which this
	// one cannot open; rotation (rightly) stops at a value it cannot open.
	for _, q := range []string{`DELETE FROM oauth_tokens WHERE server_id <> $1`,
		`DELETE FROM oauth_flows WHERE server_id <> $1`, `DELETE FROM server_oauth WHERE server_id <> $1`} {
		if _, err := testDB.Pool.Exec(e.ctx, q, e.srv.ID); err != nil {
			t.Fatal(err)
		}
	}
	old := e.kr.Primary()
	k2, err := e.kr.AddKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.kr.SetPrimary(k2); err != nil {
		t.Fatal(err)
	}
	n, err := e.st.RotateOAuthSecrets(e.ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if n < 5 { // client secret, discovery, access, refresh, verifier (this test's rows at least)
		t.Fatalf("re-sealed %d values", n)
	}
	counts := map[string]int{}
	if err := e.st.AddOAuthSealedKeyCounts(e.ctx, counts); err != nil {
		t.Fatal(err)
	}
	if counts[old] != 0 || counts[k2] == 0 {
		t.Fatalf("key counts after rotation: %v (old %s)", counts, old)
	}
	if err := e.kr.Retire(old); err != nil {
		t.Fatal(err)
	}
	if got := e.mustWhoami(alice); got != "alice" {
		t.Fatalf("after rotation: %q", got)
	}
	if code, body := e.browse(pending, true, 0, "alice"); code != http.StatusOK {
		t.Fatalf("a flow started before the rotation: %d %s", code, body)
	}
	e.clock.Advance(2 * time.Hour) // refresh with the re-sealed client secret and refresh token
	if got := e.mustWhoami(alice); got != "alice" {
		t.Fatalf("refresh after rotation: %q", got)
	}
}

// TestDiscoveryWithoutChallengeParam: a server whose 401 names no
// resource_metadata is found through the well-known URL at its path; one
// whose 401 names metadata for another resource is refused (RFC 9728 §3.3).
func TestDiscoveryWithoutChallengeParam(t *testing.T) {
	e := newEnv(t)
	var bare *httptest.Server
	bare = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/mcp":
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "no", http.StatusUnauthorized)
		case "/liar":
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+e.rs.srv.URL+`/.well-known/oauth-protected-resource/mcp"`)
			http.Error(w, "no", http.StatusUnauthorized)
		case "/.well-known/oauth-protected-resource/mcp":
			writeJSON(w, http.StatusOK, map[string]any{"resource": bare.URL + "/mcp",
				"authorization_servers": []string{e.as.srv.URL}})
		default:
			http.NotFound(w, r)
		}
	}))
	defer bare.Close()
	d, err := e.m.discover(e.ctx, bare.URL+"/mcp")
	if err != nil || d.Issuer != e.as.srv.URL || d.Resource != bare.URL+"/mcp" || d.RegistrationURL == "" {
		t.Fatalf("discover through the well-known path: %+v, %v", d, err)
	}
	if _, err := e.m.discover(e.ctx, bare.URL+"/liar"); !errors.Is(err, ErrDiscovery) {
		t.Fatalf("metadata for another resource: %v, want ErrDiscovery", err)
	}
}

// TestSSRFDefaults: the default client refuses private addresses, while
// loopback (the other tests) works.
func TestSSRFDefaults(t *testing.T) {
	e := newEnv(t)
	srv := e.srv
	srv.URL = "http://10.11.12.13:9/mcp"
	if _, err := e.m.Start(e.ctx, srv, e.user("x")); !errors.Is(err, ErrDiscovery) {
		t.Fatalf("Start on a private address: %v, want ErrDiscovery", err)
	}
	for ip, want := range map[string]bool{"10.0.0.1": true, "192.168.1.1": true, "169.254.169.254": true,
		"100.64.0.1": true, "fd00::1": true, "0.0.0.0": true, "127.0.0.1": false, "::1": false, "8.8.8.8": false} {
		if got := forbiddenIP(netip.MustParseAddr(ip)); got != want {
			t.Errorf("forbiddenIP(%s) = %v, want %v", ip, got, want)
		}
	}
}

// BenchmarkToken is the per-request cost of an upstream call's token: one
// query and two unseals, no refresh.
func BenchmarkToken(b *testing.B) {
	e := newEnv(b)
	alice := e.user("alice")
	e.authorize(alice)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := e.m.Token(e.ctx, e.srv.ID, alice, e.srv.URL); err != nil {
			b.Fatal(err)
		}
	}
}

// TestURLChangeDropsToken: a token issued for the server's URL is never sent
// once the URL points elsewhere (an owner's edit must not hand every user's
// token to another host).
func TestURLChangeDropsToken(t *testing.T) {
	e := newEnv(t)
	alice := e.user("alice")
	e.authorize(alice)
	var hits atomic.Int64
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			hits.Add(1)
		}
		http.Error(w, "no", http.StatusUnauthorized)
	}))
	defer elsewhere.Close()
	moved, err := e.st.UpdateServer(e.ctx, store.Actor{}, store.Scope{All: true}, e.srv.Name, "server.update",
		func(s *store.Server) error { s.URL = elsewhere.URL + "/mcp"; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Token(e.ctx, moved.ID, alice, moved.URL); !errors.Is(err, ErrURLChanged) {
		t.Fatalf("Token for the new URL: %v, want ErrURLChanged", err)
	}
	if st, _ := e.m.Status(e.ctx, moved, alice); st.Status != StatusExpired {
		t.Fatalf("status after the URL changed: %+v", st)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "gateway", Version: "test"}, nil)
	if cs, err := c.Connect(e.ctx, &mcp.StreamableClientTransport{Endpoint: moved.URL,
		OAuthHandler: e.m.Handler(moved.ID, alice, moved.URL), MaxRetries: -1}, nil); err == nil {
		cs.Close()
		t.Fatal("connected to the new URL")
	}
	if hits.Load() != 0 {
		t.Fatal("a token was sent to the server's new URL")
	}
}

// TestConcurrentStartsRegisterOnce: flows started at once on a server with
// no client register one client, so every one of them can finish.
func TestConcurrentStartsRegisterOnce(t *testing.T) {
	e := newEnv(t)
	var users []int64
	for i := range 8 {
		users = append(users, e.user(fmt.Sprintf("u%d", i)))
	}
	flows := make([]Authorization, len(users))
	errs := make([]error, len(users))
	var wg sync.WaitGroup
	for i, u := range users {
		wg.Go(func() { flows[i], errs[i] = e.m.Start(e.ctx, e.srv, u) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Start %d: %v", i, err)
		}
	}
	if regs, _, _ := e.as.counts(); regs != 1 {
		t.Fatalf("%d registrations, want 1", regs)
	}
	for i, u := range users {
		if code, body := e.browse(flows[i], true, 0, e.users[u]); code != http.StatusOK {
			t.Fatalf("flow %d: %d %s", i, code, body)
		}
		if got := e.mustWhoami(u); got != e.users[u] {
			t.Fatalf("user %d ran as %q", u, got)
		}
	}
	// More refreshes of different tokens at once than the pool has
	// connections: none may wait for a second connection while holding one.
	e.clock.Advance(2 * time.Hour)
	for i, u := range users {
		wg.Go(func() { _, errs[i] = e.m.Token(e.ctx, e.srv.ID, u, e.srv.URL) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("refresh %d: %v", i, err)
		}
	}
	if _, _, r := e.as.counts(); r != len(users) {
		t.Fatalf("%d refreshes, want %d", r, len(users))
	}
	if max := testDB.Pool.Config().MaxConns; int(max) >= len(users) {
		t.Logf("the pool has %d connections: the exhaustion case is not exercised", max)
	}
}
