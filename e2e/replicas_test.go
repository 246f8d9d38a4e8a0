package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/keyring"
	"github.com/mcpgate/mcpgate/store/storetest"
)

// roundRobin spreads requests over live backends and drops one that fails
// to answer, as a load balancer's health checks would.
type roundRobin struct {
	mu       sync.Mutex
	backends []*url.URL
	dead     map[string]bool
	next     int
}

func (p *roundRobin) pick() *url.URL {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range p.backends {
		u := p.backends[p.next%len(p.backends)]
		p.next++
		if !p.dead[u.Host] {
			return u
		}
	}
	return p.backends[0]
}

func (p *roundRobin) handler() http.Handler {
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(p.pick())
			r.Out.Host = r.In.Host
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.mu.Lock()
			p.dead[r.URL.Host] = true
			p.mu.Unlock()
			http.Error(w, "backend down", http.StatusBadGateway)
		},
	}
	return rp
}

// Three replicas behind a proxy, one database: REST and MCP traffic spread
// over them works; killing one mid-load loses no acknowledged write and the
// others keep serving.
func TestReplicasBehindAProxy(t *testing.T) {
	ctx := context.Background()
	db, err := storetest.NewDB(ctx, "e2e_replicas")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	keyDir := dataDir(t)
	keyFile := filepath.Join(filepath.Dir(keyDir), "secret.key")
	if _, err := keyring.Generate(keyFile); err != nil {
		t.Fatal(err)
	}
	var gws []*gateway
	proxy := &roundRobin{dead: map[string]bool{}}
	for i := range 3 {
		g := startGateway(t, "MCPGATE_DATA_DIR="+dataDir(t), "MCPGATE_DATABASE_URL="+db.URL,
			"MCPGATE_SECRET_KEY_FILE="+keyFile, fmt.Sprintf("MCPGATE_REPLICA_ID=replica-%d", i))
		gws = append(gws, g)
		u, _ := url.Parse("http://" + g.addr)
		proxy.backends = append(proxy.backends, u)
	}
	front := httptest.NewServer(proxy.handler())
	defer front.Close()
	lb := &gateway{addr: strings.TrimPrefix(front.URL, "http://")}

	token := addEcho(t, lb, "shared-echo", "none", `["read"]`)
	// Every replica serves the server and its tools.
	for i := range 6 {
		cs := mcpClient(t, front.URL, token)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "call_tool_read",
			Arguments: map[string]any{"name": "shared-echo:echo", "args": map[string]any{"text": fmt.Sprint(i)}}})
		if err != nil || res.IsError || callText(t, res) != fmt.Sprint(i) {
			t.Fatalf("call %d through the proxy: %v %+v", i, err, res)
		}
	}

	var (
		acked   sync.Map // e-mail → true, for every 201 the clients saw
		calls   atomic.Int64
		wg      sync.WaitGroup
		killed  = make(chan struct{})
		killOne sync.Once
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs := mcpClient(t, front.URL, token)
			for i := range 40 {
				if w == 0 && i == 10 {
					killOne.Do(func() {
						gws[1].cmd.Process.Kill()
						close(killed)
					})
				}
				email := fmt.Sprintf("load-%d-%d@example.test", w, i)
				if c, _ := lb.request(t, "POST", "/api/v1/users", `{"email":"`+email+`"}`); c == 201 {
					acked.Store(email, true)
				}
				if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "call_tool_read",
					Arguments: map[string]any{"name": "shared-echo:echo", "args": map[string]any{"text": "x"}}}); err == nil && !res.IsError {
					calls.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	<-killed

	code, body := lb.request(t, "GET", "/api/v1/users", "")
	if code != 200 {
		t.Fatalf("listing users after the kill: %d", code)
	}
	var users struct{ Users []struct{ Email string } }
	json.Unmarshal(body, &users)
	have := map[string]bool{}
	for _, u := range users.Users {
		have[u.Email] = true
	}
	lost, n := 0, 0
	acked.Range(func(k, _ any) bool {
		n++
		if !have[k.(string)] {
			lost++
			t.Errorf("acknowledged user %s is gone", k)
		}
		return true
	})
	if n < 100 {
		t.Errorf("only %d of 160 user writes were acknowledged", n)
	}
	// After the kill the survivors answer everything.
	cs := mcpClient(t, front.URL, token)
	for i := range 10 {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "call_tool_read",
			Arguments: map[string]any{"name": "shared-echo:echo", "args": map[string]any{"text": "after"}}})
		if err != nil || res.IsError {
			t.Fatalf("call %d after the kill: %v %+v", i, err, res)
		}
		if c, b := lb.request(t, "GET", "/api/v1/servers/shared-echo", ""); c != 200 {
			t.Fatalf("REST after the kill: %d %s", c, b)
		}
	}
	t.Logf("%d acknowledged writes, %d lost; %d of 160 MCP calls succeeded during the load", n, lost, calls.Load())
}
