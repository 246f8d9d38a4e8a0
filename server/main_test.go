package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/apikey"
	"github.com/mcpgate/mcpgate/config"
	"github.com/mcpgate/mcpgate/docker"
	"github.com/mcpgate/mcpgate/doctor"
	"github.com/mcpgate/mcpgate/gateway"
	"github.com/mcpgate/mcpgate/internal/testbin"
	"github.com/mcpgate/mcpgate/isolation"
	"github.com/mcpgate/mcpgate/oauth"
	"github.com/mcpgate/mcpgate/openapi"
	"github.com/mcpgate/mcpgate/settings"
	"github.com/mcpgate/mcpgate/store"
	"github.com/mcpgate/mcpgate/store/storetest"
)

var testDB *storetest.DB

func TestMain(m *testing.M) {
	ctx := context.Background()
	db, err := storetest.NewDB(ctx, "server")
	if err != nil {
		fmt.Fprintln(os.Stderr, "test database:", err)
		os.Exit(1)
	}
	testDB = db
	// Each test makes personal servers of its own: room for them all.
	def := settings.Defaults("sandbox")
	def.Upstreams.MaxPersonalInstances = 100
	if _, err := store.New(db.Pool, nil).InitSetting(ctx, settings.Key, def); err != nil {
		fmt.Fprintln(os.Stderr, "test settings:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(keyDir)
	db.Close()
	storetest.StopPrivate()
	os.Exit(code)
}

// syncBuffer collects every log line the tests produce, for the secret grep.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Every log line and response body the suite sees, to prove no secret leaks.
var (
	allLogs   syncBuffer
	allBodies syncBuffer
)

const adminToken = "test-admin-token-0123456789abcdef0123456789"

var uniq atomic.Int64

func unique(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid()%10000, uniq.Add(1))
}

type harness struct {
	t     *testing.T
	srv   *Server
	http  *httptest.Server
	store *store.Store
	api   *openapi.Validator
	host  isolation.Host
}

var (
	sealerOnce sync.Once
	sealer     store.Sealer
	sealerErr  error
	keyDir     string
)

// testSealer is the suite's one keyring, as a deployment has one.
func testSealer(t testing.TB) store.Sealer {
	t.Helper()
	sealerOnce.Do(func() {
		keyDir, sealerErr = os.MkdirTemp("", "mcpgate-key-")
		if sealerErr != nil {
			return
		}
		cfg := config.Config{DataDir: keyDir, SecretKeyFile: filepath.Join(keyDir, "gateway", "secret.key")}
		sealer, sealerErr = LoadSecretKey(cfg, slog.New(slog.NewJSONHandler(&allLogs, nil)))
	})
	if sealerErr != nil {
		t.Fatal(sealerErr)
	}
	return sealer
}

func newHarness(t *testing.T, host isolation.Host) *harness {
	t.Helper()
	st := store.New(testDB.Pool, testSealer(t))
	log := slog.New(slog.NewJSONHandler(&allLogs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	om, err := oauth.New(st, &oauth.Options{PublicURL: "http://127.0.0.1:8080", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Store: st, Log: log, AdminToken: adminToken, ReplicaID: "test", Version: "test", OAuth: om,
		HostFunc: func() isolation.Host { return host }, ExtraArgs: docker.ValidateExtraArgs,
		Doctor: func(ctx context.Context) doctor.Report {
			return doctor.Run(ctx, doctor.Inputs{Store: st, Host: host,
				Config: config.Config{SecretKeyFile: filepath.Join(keyDir, "gateway", "secret.key")}})
		}})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(context.Background(), &gateway.Options{Store: st, Logger: log, AuthenticateFunc: s.AuthenticateMCP, Admin: s})
	if err != nil {
		t.Fatal(err)
	}
	s.SetGateway(gw)
	t.Cleanup(func() { gw.Close(context.Background()) })
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return &harness{t: t, srv: s, http: hs, store: st, api: s.api, host: host}
}

type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) JSON(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("response is not a JSON object: %v: %s", err, r.Body)
	}
	return m
}

// do sends a request and checks the response against the OpenAPI document,
// so the document cannot drift from the code.
func (h *harness) do(method, path, token string, body any, ctype ...string) response {
	h.t.Helper()
	var rd io.Reader
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	case []byte:
		raw = b
	default:
		raw, _ = json.Marshal(b)
	}
	if raw != nil {
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, h.http.URL+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if raw != nil {
		ct := "application/json"
		if len(ctype) > 0 {
			ct = ctype[0]
		}
		req.Header.Set("Content-Type", ct)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	// What an MCP client sends; REST ignores it.
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	allBodies.Write(out)
	allBodies.Write([]byte("\n"))
	if strings.HasPrefix(path, "/api/v1/") {
		vreq := httptestRequest(method, path, raw, req.Header)
		if err := h.api.ValidateResponse(context.Background(), vreq, resp.StatusCode, resp.Header, out); err != nil {
			if !strings.Contains(err.Error(), "no matching operation") && resp.StatusCode != 404 && resp.StatusCode != 405 {
				h.t.Errorf("response does not match openapi.yaml: %v\nbody: %s", err, out)
			}
		}
		if resp.StatusCode >= 400 && resp.Header.Get("Content-Type") != "application/problem+json" {
			h.t.Errorf("%s %s → %d with Content-Type %q, want application/problem+json", method, path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	return response{resp.StatusCode, resp.Header, out}
}

func httptestRequest(method, path string, body []byte, header http.Header) *http.Request {
	r := httptest.NewRequest(method, path, bytes.NewReader(body))
	r.Header = header.Clone()
	return r
}

// user makes a user straight in the store, with a personal access token.
func (h *harness) user(role string) (store.User, string) {
	h.t.Helper()
	u, err := h.store.CreateUser(context.Background(), store.Actor{}, unique("u")+"@example.test", "Test", role)
	if err != nil {
		h.t.Fatal(err)
	}
	return u, h.token(u.ID, apikey.Personal, nil, time.Hour)
}

// token makes a token straight in the store.
func (h *harness) token(userID int64, kind string, scopes []string, ttl time.Duration) string {
	h.t.Helper()
	key, err := apikey.New(kind)
	if err != nil {
		h.t.Fatal(err)
	}
	if scopes == nil {
		scopes = []string{"read", "write", "destructive"}
	}
	_, err = h.store.CreateToken(context.Background(), store.Actor{}, store.NewToken{
		UserID: userID, Name: "t", Kind: kind, Prefix: key.Display, Last4: key.Last4, Hash: key.Hash[:],
		Scopes: scopes, Servers: []string{"*"}, ExpiresAt: time.Now().Add(ttl),
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return key.Plain
}

// server makes a stdio mcpecho server for a user straight in the store,
// one the gateway can really start.
func (h *harness) server(ownerID int64, shared bool) string {
	h.t.Helper()
	name := unique("srv")
	_, err := h.store.CreateServer(context.Background(), store.Actor{}, store.Server{
		Name: name, Protocol: "stdio", Command: testbin.Build(h.t, "internal/cmd/mcpecho"), Enabled: true, Quarantined: true,
		Shared: shared, OwnerID: ownerID, Env: map[string]string{"API_TOKEN": "upstream-secret-value-1"}, Headers: map[string]string{},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return name
}

func newRequest(t *testing.T, h *harness, method, path, token, body string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, h.http.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+token)
	return r
}
