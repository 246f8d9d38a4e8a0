package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/apikey"
	"github.com/mcpgate/mcpgate/internal/testbin"
)

// benchTransport keeps enough idle connections for every concurrent caller,
// so no mode pays for new connections.
func benchTransport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 2048, 2048
	return tr
}

type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

func httpSession(b testing.TB, url, token string, tr http.RoundTripper) *mcp.ClientSession {
	b.Helper()
	if token != "" {
		tr = bearer{token, tr}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: tr}, MaxRetries: -1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	return cs
}

func stdioSession(b testing.TB) *mcp.ClientSession {
	b.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: exec.Command(testbin.Build(b, "internal/cmd/mcpecho"))},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close() })
	return cs
}

// minimalProxy is the yardstick: a go-sdk Streamable HTTP server whose echo
// tool forwards to one stdio child, with nothing else on the path.
func minimalProxy(b testing.TB) string {
	up := stdioSession(b)
	s := mcp.NewServer(&mcp.Implementation{Name: "proxy", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return up.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: req.Params.Arguments})
		})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true}))
	b.Cleanup(ts.Close)
	return ts.URL
}

// runCalls makes b.N calls from c goroutines and reports latency
// percentiles and throughput.
func runCalls(b *testing.B, c int, call func() error) {
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range c {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				t0 := time.Now()
				if err := call(); err != nil {
					failed.Add(1)
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d calls failed", n, b.N)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
}

// BenchmarkCall compares tools/call to mcpecho's echo directly over stdio,
// through a minimal pass-through proxy, and through the gateway (token
// checked against the database, gating, activity recorded).
//
//	go test -run '^$' -bench BenchmarkCall -benchtime 3000x ./gateway/
func BenchmarkCall(b *testing.B) {
	e := newEnv(b)
	e.addEcho(e.admin, "bench", true, nil)
	g := e.gateway(func(o *Options) { o.Logger = nil })
	e.approve(g, "bench")
	gwURL := e.serve(g).URL
	token := e.token(e.alice, apikey.Agent, []string{"read"}, []string{"bench"})
	cachedURL := e.serve(e.gateway(func(o *Options) { o.Logger, o.AuthCacheTTL = nil, 2*time.Second })).URL
	proxyURL := minimalProxy(b)
	direct := stdioSession(b)
	tr := benchTransport()
	proxy := httpSession(b, proxyURL, "", tr)
	gw := httpSession(b, gwURL+"/mcp", token, tr)
	gwAll := httpSession(b, gwURL+"/mcp/all", token, tr)
	gwCached := httpSession(b, cachedURL+"/mcp", token, tr)
	b.Cleanup(func() { proxy.Close(); gw.Close(); gwAll.Close(); gwCached.Close() })

	echoArgs := map[string]any{"text": "hello"}
	check := func(res *mcp.CallToolResult, err error) error {
		if err != nil {
			return err
		}
		if res.IsError || len(res.Content) != 1 {
			return fmt.Errorf("bad result %+v", res)
		}
		return nil
	}
	modes := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"direct", func(ctx context.Context) error {
			return check(direct.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: echoArgs}))
		}},
		{"proxy", func(ctx context.Context) error {
			return check(proxy.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: echoArgs}))
		}},
		{"gateway", func(ctx context.Context) error {
			return check(gw.CallTool(ctx, &mcp.CallToolParams{Name: "call_tool_read",
				Arguments: map[string]any{"name": "bench:echo", "args": echoArgs}}))
		}},
		{"gateway-authcache", func(ctx context.Context) error {
			return check(gwCached.CallTool(ctx, &mcp.CallToolParams{Name: "call_tool_read",
				Arguments: map[string]any{"name": "bench:echo", "args": echoArgs}}))
		}},
		{"gateway-all", func(ctx context.Context) error {
			return check(gwAll.CallTool(ctx, &mcp.CallToolParams{Name: "bench__echo", Arguments: echoArgs}))
		}},
	}
	for _, c := range []int{1, 8} {
		for _, m := range modes {
			b.Run(fmt.Sprintf("%s/c=%d", m.name, c), func(b *testing.B) {
				runCalls(b, c, func() error { return m.call(context.Background()) })
			})
		}
	}
	b.Logf("activity: %d written, %d dropped", g.rec.written.Load(), g.rec.dropped.Load())
}

// benchCatalog fills g with servers × per synthetic tools, as if that many
// shared, approved upstreams had listed them.
func benchCatalog(g *Gateway, servers, per int) {
	rng := rand.New(rand.NewPCG(7, 11))
	verbs := strings.Fields("list get create update delete search read write send fetch run query upload download move copy rename archive sync export import close assign merge approve cancel restart scale describe watch")
	nouns := strings.Fields("file directory issue pull_request branch commit repository message channel thread user team project task comment label page document database table row record ticket event calendar email contact invoice payment customer order product image spreadsheet deployment container pod log metric alert dashboard incident secret bucket webhook report note folder query index cluster node service function release workflow")
	services := strings.Fields("github gitlab jira linear slack discord notion confluence drive dropbox postgres mysql redis kubernetes docker terraform aws gcp sentry grafana stripe shopify hubspot zendesk twilio figma airtable calendar gmail")
	g.mu.Lock()
	defer g.mu.Unlock()
	for s := range servers {
		svc := services[s%len(services)]
		name := svc + "-" + strconv.Itoa(s)
		seen := map[string]bool{}
		tools := make([]*mcp.Tool, 0, per)
		for len(tools) < per {
			v, n := verbs[rng.IntN(len(verbs))], nouns[rng.IntN(len(nouns))]
			tn := v + "_" + n
			if seen[tn] {
				continue
			}
			seen[tn] = true
			t := &mcp.Tool{Name: tn,
				Description: fmt.Sprintf("%s %ss in %s. Returns matching %s objects as JSON, paginated.", v, strings.ReplaceAll(n, "_", " "), svc, n),
				InputSchema: map[string]any{"type": "object", "properties": map[string]any{
					"id": map[string]any{"type": "string", "description": "identifier of the " + n}}},
				Annotations: &mcp.ToolAnnotations{ReadOnlyHint: v == "list" || v == "get" || v == "search"}}
			tools = append(tools, t)
		}
		if err := g.cat.Replace(name, tools); err != nil {
			panic(err)
		}
		g.servers[name] = &serverInfo{Name: name, Shared: true, Enabled: true}
		pins := map[string]string{}
		for _, e := range g.cat.List(func(s string) bool { return s == name }) {
			pins[e.Tool.Name] = e.Pin
		}
		g.pins[name] = pins
	}
}

// BenchmarkRetrieveTools runs the retrieve_tools handler (search,
// visibility, approval state, the JSON reply) over 10,000 tools of 200
// servers.
//
//	go test -run '^$' -bench BenchmarkRetrieveTools ./gateway/
func BenchmarkRetrieveTools(b *testing.B) {
	e := newEnv(b)
	g := e.gateway(func(o *Options) { o.Logger = nil })
	// The listener's first re-read would drop servers the database lacks.
	eventually(b, 10*time.Second, func() bool { return g.syncs.Load() >= 2 }, "the listener's first re-read")
	benchCatalog(g, 200, 50)
	if n := g.cat.Len(); n != 10000 {
		b.Fatalf("catalog holds %d tools", n)
	}
	queries := []string{"show me what files are in a folder", "open a new ticket for this bug", "post a message to the team channel",
		"which pods are failing", "delete old branches", "download the invoice", "find customers who have not paid",
		"restart the deployment", "search logs for errors", "list recent commits", "send an email to the customer",
		"upload a file to a bucket", "archive closed projects", "run a sql query", "export the spreadsheet"}
	c := &Caller{UserID: e.alice.ID, Agent: true, Scopes: []string{"read"}, Servers: []string{"*"}}
	extra := &mcp.RequestExtra{TokenInfo: &auth.TokenInfo{Extra: map[string]any{callerKey: c}}}
	reqs := make([]*mcp.CallToolRequest, len(queries))
	for i, q := range queries {
		args, _ := json.Marshal(map[string]any{"query": q, "limit": 10})
		reqs[i] = &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "retrieve_tools", Arguments: args}, Extra: extra}
	}
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		res, err := g.retrieveTools(context.Background(), reqs[i%len(reqs)])
		lat[i] = time.Since(t0)
		if err != nil || res.IsError {
			b.Fatalf("retrieve_tools: %v %v", err, res)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// BenchmarkIdleSessions opens 1,000 MCP sessions to the gateway, each on
// its own connection, and measures the process's heap and RSS while they
// sit idle. Clients live in the same process, so the figures are an upper
// bound for the gateway side.
//
//	go test -run '^$' -bench BenchmarkIdleSessions -benchtime 1x ./gateway/
func BenchmarkIdleSessions(b *testing.B) {
	const n = 1000
	e := newEnv(b)
	e.addEcho(e.admin, "idle", true, nil)
	g := e.gateway(func(o *Options) { o.Logger = nil })
	e.approve(g, "idle")
	url := e.serve(g).URL + "/mcp"
	token := e.token(e.alice, apikey.Agent, []string{"read"}, []string{"*"})
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap0, rss0 := ms.HeapInuse, rssBytes()
	for range b.N {
		sessions := make([]*mcp.ClientSession, n)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 32)
		for i := range n {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				// One transport each: 1,000 distinct keep-alive connections.
				cs := httpSession(b, url, token, benchTransport())
				if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "call_tool_read",
					Arguments: map[string]any{"name": "idle:echo", "args": map[string]any{"text": "x"}}}); err != nil {
					b.Error(err)
				}
				sessions[i] = cs
			})
		}
		wg.Wait()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MB")
		b.ReportMetric(float64(int64(ms.HeapInuse)-int64(heap0))/(1<<20), "heap-delta-MB")
		b.ReportMetric(float64(rssBytes())/(1<<20), "rss-MB")
		b.ReportMetric(float64(rssBytes()-rss0)/(1<<20), "rss-delta-MB")
		b.ReportMetric(float64(runtime.NumGoroutine()), "goroutines")
		for _, cs := range sessions {
			if cs != nil {
				cs.Close()
			}
		}
	}
}
