package upstream

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"
)

// staticOAuth is an OAuthHandler that always offers one token.
type staticOAuth struct{ token string }

func (s staticOAuth) TokenSource(context.Context) (oauth2.TokenSource, error) {
	return oauth2.StaticTokenSource(&oauth2.Token{AccessToken: s.token, TokenType: "Bearer"}), nil
}

func (s staticOAuth) Authorize(_ context.Context, _ *http.Request, resp *http.Response) error {
	resp.Body.Close()
	return nil
}

// bearerWrapper sets a token on every request, as oauth.Manager.Transport
// does for SSE sessions.
type bearerWrapper struct {
	token string
	base  http.RoundTripper
}

func (b bearerWrapper) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// TestAuthHooks: with Config.Auth, Streamable HTTP sessions authorize
// through the OAuth handler and SSE sessions through the transport wrapper;
// the configured Authorization header is never sent, the other headers are.
func TestAuthHooks(t *testing.T) {
	for _, tt := range []struct {
		protocol string
		sse      bool
	}{{ProtocolStreamableHTTP, false}, {ProtocolSSE, true}} {
		t.Run(tt.protocol, func(t *testing.T) {
			s := mcp.NewServer(&mcp.Implementation{Name: "authed", Version: "1"}, nil)
			mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, struct{}, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, struct{}{}, nil
			})
			get := func(*http.Request) *mcp.Server { return s }
			var h http.Handler = mcp.NewStreamableHTTPHandler(get, nil)
			if tt.sse {
				h = mcp.NewSSEHandler(get, nil)
			}
			var (
				mu   sync.Mutex
				seen []string
			)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				seen = append(seen, r.Header.Get("Authorization")+"|"+r.Header.Get("X-Api-Key"))
				mu.Unlock()
				if r.Header.Get("Authorization") != "Bearer oauth-token" {
					w.WriteHeader(http.StatusUnauthorized)
					return
				}
				h.ServeHTTP(w, r)
			}))
			t.Cleanup(srv.Close)
			wrapped := 0
			inst := NewInstance(Config{Name: "authed", Protocol: tt.protocol, URL: srv.URL,
				Headers: map[string]string{"authorization": "Bearer configured", "X-Api-Key": "k"},
				Auth: &Auth{ID: "test", Handler: staticOAuth{"oauth-token"},
					WrapTransport: func(base http.RoundTripper) (http.RoundTripper, error) {
						wrapped++
						if base == nil {
							base = http.DefaultTransport
						}
						return bearerWrapper{"oauth-token", base}, nil
					}},
			}, nil)
			inst.Start()
			defer closeInstance(t, inst)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := inst.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			if res, err := inst.Call(ctx, "echo", json.RawMessage(`{}`)); err != nil || textOf(t, res) != "ok" {
				t.Fatalf("echo: %v, %v", res, err)
			}
			mu.Lock()
			got := slices.Clone(seen)
			mu.Unlock()
			for _, r := range got {
				if r != "Bearer oauth-token|k" {
					t.Errorf("request carried %q, want the OAuth token and the configured X-Api-Key", r)
				}
			}
			if want := map[bool]int{false: 0, true: 1}[tt.sse]; wrapped != want {
				t.Errorf("transport wrapped %d times, want %d", wrapped, want)
			}
		})
	}
}
