package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/testbin"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func textOf(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if res == nil || len(res.Content) != 1 {
		t.Fatalf("result %+v: want one content block", res)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content %T, want text", res.Content[0])
	}
	return tc.Text
}

func toolNames(tools []*mcp.Tool) []string {
	var names []string
	for _, tl := range tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	return names
}

func startEcho(t *testing.T, cfg Config, l Launcher) *Instance {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "echo"
	}
	if cfg.Command == "" {
		cfg.Command = mcpecho(t)
	}
	inst := NewInstance(cfg, &Options{Launcher: l})
	inst.Start()
	t.Cleanup(func() { closeInstance(t, inst) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := inst.WaitReady(ctx); err != nil {
		t.Fatalf("WaitReady: %v (stderr: %q)", err, inst.Logs(20))
	}
	return inst
}

func TestStdioEcho(t *testing.T) {
	l := newRecordingLauncher()
	inst := startEcho(t, Config{}, l)
	pgid := pidOf(t, l.next(t))

	if v := inst.sess.cs.InitializeResult().ProtocolVersion; v != StdioProtocolVersion {
		t.Errorf("negotiated %q over stdio, want the pinned %q", v, StdioProtocolVersion)
	}
	st := inst.Status()
	if st.State != StateReady || st.ToolCount != 4 || st.ConnectedSince.IsZero() || st.Starts != 1 {
		t.Errorf("status = %+v, want ready with 4 tools, connected, 1 start", st)
	}
	if got, want := toolNames(inst.Tools()), []string{"add_note", "delete_notes", "echo", "sleep"}; !slices.Equal(got, want) {
		t.Errorf("tools = %v, want %v", got, want)
	}
	ctx := context.Background()
	res, err := inst.Call(ctx, "echo", json.RawMessage(`{"text":"hello through stdio"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := textOf(t, res); got != "hello through stdio" || res.IsError {
		t.Errorf("echo = %q (isError %v)", got, res.IsError)
	}
	// Empty arguments go out as {}, which a tool without inputs accepts.
	if res, err := inst.Call(ctx, "delete_notes", nil); err != nil || textOf(t, res) != "deleted" {
		t.Errorf("delete_notes with no args: %v, %v", res, err)
	}

	_, err = inst.Call(ctx, "no_such_tool", json.RawMessage(`{}`))
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams || !strings.Contains(rpcErr.Message, "no_such_tool") {
		t.Fatalf("unknown tool: %v, want the upstream's JSON-RPC error %d", err, jsonrpc.CodeInvalidParams)
	}

	closeInstance(t, inst)
	if st := inst.Status(); st.State != StateStopped {
		t.Errorf("state after Close = %s", st.State)
	}
	groupGone(t, pgid)
	if _, err := inst.Call(ctx, "echo", nil); !errors.Is(err, ErrStopped) {
		t.Errorf("call after Close: %v, want ErrStopped", err)
	}
	if got := len(inst.Tools()); got != 4 {
		t.Errorf("tools after Close: %d, want the last listing kept", got)
	}
}

// TestG1ChildKilledMidCall: SIGKILL to the child's group during a long call.
func TestG1ChildKilledMidCall(t *testing.T) {
	sh := shell(t)
	tests := []struct {
		name string
		args func(echo string) []string
		kill func(pid int) error
	}{
		{"group killed", func(echo string) []string { return []string{"-c", "exec " + echo} },
			func(pid int) error { return syscall.Kill(-pid, syscall.SIGKILL) }},
		// A grandchild keeps stdout open, so no EOF comes: the child's exit
		// alone must end the call.
		{"leader killed, grandchild holds stdout", func(echo string) []string { return []string{"-c", "sleep 1000 & exec " + echo} },
			func(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newRecordingLauncher()
			inst := startEcho(t, Config{
				Command: sh, Args: tt.args(mcpecho(t)),
				Backoff: Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
			}, l)
			pgid := pidOf(t, l.next(t))

			errc := make(chan error, 1)
			go func() {
				_, err := inst.Call(context.Background(), "sleep", json.RawMessage(`{"millis":30000}`))
				errc <- err
			}()
			eventually(t, 10*time.Second, "call in flight", func() bool { return len(inst.sem) == 1 })
			if err := tt.kill(pgid); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			select {
			case err := <-errc:
				if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "killed") {
					t.Errorf("call error = %v, want ErrUnavailable naming the kill", err)
				}
				t.Logf("call failed %v after the kill: %v", time.Since(killed), err)
			case <-time.After(time.Second):
				t.Fatal("the call did not fail within 1s of the kill")
			}

			waitStatus(t, inst, 20*time.Second, func(s Status) bool { return s.State == StateReady && s.Starts == 2 })
			res, err := inst.Call(context.Background(), "echo", json.RawMessage(`{"text":"back"}`))
			if err != nil || textOf(t, res) != "back" {
				t.Fatalf("call after the restart: %v, %v", res, err)
			}
			groupGone(t, pgid) // the old grandchild went with its group
		})
	}
}

func TestG3CallTimeout(t *testing.T) {
	inst := startEcho(t, Config{CallTimeout: 200 * time.Millisecond}, newRecordingLauncher())
	start := time.Now()
	_, err := inst.Call(context.Background(), "sleep", json.RawMessage(`{"millis":10000}`))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call past the timeout: %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the timed-out call took %v", d)
	}
	if res, err := inst.Call(context.Background(), "echo", json.RawMessage(`{"text":"still here"}`)); err != nil || textOf(t, res) != "still here" {
		t.Errorf("call after a timeout: %v, %v", res, err)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	inst := startEcho(t, Config{MaxConcurrency: 2}, newRecordingLauncher())
	var wg sync.WaitGroup
	var mu sync.Mutex
	maxSeen := 0
	for n := range 6 {
		wg.Go(func() {
			if _, err := inst.Call(context.Background(), "sleep", json.RawMessage(`{"millis":50}`)); err != nil {
				t.Errorf("call %d: %v", n, err)
			}
			mu.Lock()
			maxSeen = max(maxSeen, len(inst.sem))
			mu.Unlock()
		})
	}
	wg.Wait()
	if cap(inst.sem) != 2 || maxSeen > 2 {
		t.Errorf("semaphore cap %d, max in flight %d; want ≤ 2", cap(inst.sem), maxSeen)
	}
}

func TestRestart(t *testing.T) {
	l := newRecordingLauncher()
	inst := startEcho(t, Config{}, l)
	first := pidOf(t, l.next(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := inst.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	second := pidOf(t, l.next(t))
	if st := inst.Status(); st.State != StateReady || st.Starts != 2 || first == second {
		t.Errorf("after Restart: %+v, pids %d → %d", st, first, second)
	}
	groupGone(t, first)
	if _, err := inst.Call(ctx, "echo", json.RawMessage(`{"text":"x"}`)); err != nil {
		t.Error(err)
	}
}

// TestG4CloseLeavesNothing: the child has grandchildren that ignore SIGTERM.
func TestG4CloseLeavesNothing(t *testing.T) {
	sh := shell(t)
	l := newRecordingLauncher()
	inst := startEcho(t, Config{Command: sh, Args: []string{"-c", `trap "" TERM; sleep 1000 & sleep 1000 & ` + mcpecho(t)}}, l)
	pgid := pidOf(t, l.next(t))
	if procs, _ := GroupProcesses(pgid); len(procs) < 4 {
		t.Fatalf("group before Close: %+v, want sh, two sleeps and mcpecho", procs)
	}
	closeInstance(t, inst)
	groupGone(t, pgid)
}

func TestStartFailureIsReported(t *testing.T) {
	inst := NewInstance(Config{Name: "missing", Command: "no-such-mcp-server-binary"}, &Options{Launcher: &ProcessLauncher{}})
	inst.Start()
	defer closeInstance(t, inst)
	err := inst.WaitReady(context.Background())
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("WaitReady = %v, want ErrUnavailable saying not found", err)
	}
	if st := inst.Status(); st.State != StateError || !strings.Contains(st.LastError, "no-such-mcp-server-binary") {
		t.Errorf("status = %+v", st)
	}
}

// TestG7StderrFlood: a child writes 100 MB to stderr while calls keep
// round-tripping over stdout; the ring and the heap stay bounded.
func TestG7StderrFlood(t *testing.T) {
	bin := testbin.Build(t, "upstream/internal/cmd/floodecho")
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	inst := startEcho(t, Config{Command: bin, Args: []string{"-mb", "100"}, LogSize: 64 << 10}, newRecordingLauncher())
	const total = 100 << 20
	calls := 0
	deadline := time.Now().Add(2 * time.Minute)
	var peak uint64
	for {
		res, err := inst.Call(context.Background(), "flooded", nil)
		if err != nil {
			t.Fatalf("call %d during the flood: %v", calls, err)
		}
		calls++
		n, _ := strconv.Atoi(textOf(t, res))
		if calls%20 == 0 {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
		}
		if n >= total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("flood not done after 2 min: %d bytes", n)
		}
	}
	eventually(t, 30*time.Second, "flood done in the log tail", func() bool {
		tail := inst.Logs(1)
		return len(tail) == 1 && tail[0] == "flood done"
	})
	if w := inst.ring.Written(); w < total {
		t.Errorf("ring saw %d bytes, want ≥ %d", w, total)
	}
	if inst.ring.Len() > 64<<10 {
		t.Errorf("ring holds %d bytes, over its 64 KiB", inst.ring.Len())
	}
	if lines := inst.Logs(5); len(lines) != 5 || !strings.HasPrefix(lines[0], "flood ") {
		t.Errorf("Logs(5) = %q", lines)
	}
	if growth := int64(peak) - int64(before.HeapInuse); growth > 32<<20 {
		t.Errorf("heap grew by %d MiB during a 100 MiB stderr flood", growth>>20)
	}
	t.Logf("%d calls round-tripped during the flood; heap peak %d MiB (before %d MiB)", calls, peak>>20, before.HeapInuse>>20)
}

// upstreamServer serves an MCP server over Streamable HTTP or SSE in-process
// and records the header the gateway is configured to send.
type upstreamServer struct {
	srv  *mcp.Server
	http *httptest.Server
	mu   sync.Mutex
	seen []string        // X-Api-Key of each request
	caps json.RawMessage // client capabilities as sent in initialize
}

func newUpstreamServer(t *testing.T, sse bool) *upstreamServer {
	t.Helper()
	u := &upstreamServer{srv: mcp.NewServer(&mcp.Implementation{Name: "inproc", Version: "1"}, nil)}
	mcp.AddTool(u.srv, &mcp.Tool{Name: "echo", Description: "echo"},
		func(_ context.Context, _ *mcp.CallToolRequest, in struct {
			Text string `json:"text"`
		}) (*mcp.CallToolResult, struct{}, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, struct{}{}, nil
		})
	get := func(*http.Request) *mcp.Server { return u.srv }
	var h http.Handler = mcp.NewStreamableHTTPHandler(get, nil)
	if sse {
		h = mcp.NewSSEHandler(get, nil)
	}
	u.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if r.Body != nil {
			body, _ = io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		var msg struct {
			Method string
			Params struct{ Capabilities json.RawMessage }
		}
		u.mu.Lock()
		u.seen = append(u.seen, r.Method+" "+r.Header.Get("X-Api-Key"))
		if json.Unmarshal(body, &msg) == nil && msg.Method == "initialize" {
			u.caps = msg.Params.Capabilities
		}
		u.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(u.http.Close)
	return u
}

func (u *upstreamServer) requests() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.seen)
}

func TestRemoteUpstreams(t *testing.T) {
	for _, tt := range []struct {
		protocol string
		sse      bool
	}{{ProtocolStreamableHTTP, false}, {ProtocolSSE, true}} {
		t.Run(tt.protocol, func(t *testing.T) {
			u := newUpstreamServer(t, tt.sse)
			inst := NewInstance(Config{
				Name: "remote", Protocol: tt.protocol, URL: u.http.URL,
				Headers: map[string]string{"X-Api-Key": "k-123"},
			}, nil)
			inst.Start()
			defer closeInstance(t, inst)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := inst.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			res, err := inst.Call(ctx, "echo", json.RawMessage(`{"text":"over `+tt.protocol+`"}`))
			if err != nil || textOf(t, res) != "over "+tt.protocol {
				t.Fatalf("echo: %v, %v", res, err)
			}
			reqs := u.requests()
			methods := map[string]bool{}
			for _, r := range reqs {
				method, key, _ := strings.Cut(r, " ")
				methods[method] = true
				if key != "k-123" {
					t.Errorf("request %q reached the upstream without the configured header", r)
				}
			}
			if !methods["POST"] || (tt.sse && !methods["GET"]) {
				t.Errorf("requests seen: %q", reqs)
			}
			u.mu.Lock()
			caps := string(u.caps)
			u.mu.Unlock()
			if caps != "{}" {
				t.Errorf("client capabilities on the wire %q, want {} (nothing we could relay)", caps)
			}
		})
	}
}

// TestSSEEndpointOnAnotherOriginRefused: an SSE server that names a POST
// endpoint elsewhere gets neither the headers nor a request.
func TestSSEEndpointOnAnotherOriginRefused(t *testing.T) {
	var elsewhere sync.WaitGroup
	hits := make(chan string, 10)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits <- r.Header.Get("X-Api-Key")
		http.Error(w, "no", http.StatusTeapot)
	}))
	defer other.Close()
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: endpoint\ndata: %s/messages\n\n", other.URL)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer evil.Close()
	defer elsewhere.Wait()

	inst := NewInstance(Config{Name: "evil", Protocol: ProtocolSSE, URL: evil.URL, Headers: map[string]string{"X-Api-Key": "secret"}}, nil)
	inst.Start()
	defer closeInstance(t, inst)
	err := inst.WaitReady(context.Background())
	if err == nil || !strings.Contains(err.Error(), "outside its configured origin") {
		t.Fatalf("WaitReady = %v, want a refusal of the other origin", err)
	}
	select {
	case key := <-hits:
		t.Fatalf("the other origin got a request (X-Api-Key %q)", key)
	default:
	}
}

func TestToolsListChanged(t *testing.T) {
	u := newUpstreamServer(t, false)
	changes := make(chan []string, 10)
	inst := NewInstance(Config{Name: "dyn", URL: u.http.URL}, &Options{
		OnToolsChanged: func(tools []*mcp.Tool) { changes <- toolNames(tools) },
	})
	inst.Start()
	defer closeInstance(t, inst)
	next := func() []string {
		t.Helper()
		select {
		case names := <-changes:
			return names
		case <-time.After(10 * time.Second):
			t.Fatal("OnToolsChanged not called within 10s")
			return nil
		}
	}
	if got := next(); !slices.Equal(got, []string{"echo"}) {
		t.Fatalf("first listing %v", got)
	}
	if err := inst.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	u.srv.AddTool(&mcp.Tool{Name: "added_later", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	if got := next(); !slices.Equal(got, []string{"added_later", "echo"}) {
		t.Fatalf("listing after the change %v", got)
	}
	if got := toolNames(inst.Tools()); !slices.Equal(got, []string{"added_later", "echo"}) || inst.Status().ToolCount != 2 {
		t.Errorf("Tools() = %v, ToolCount %d", got, inst.Status().ToolCount)
	}
}

func TestHeaderTransportOrigins(t *testing.T) {
	tests := []struct {
		endpoint, request string
		ok                bool
	}{
		{"https://a.example/mcp", "https://a.example/mcp?x=1", true},
		{"https://a.example/mcp", "https://A.EXAMPLE:443/other", true},
		{"http://a.example:8080/mcp", "http://a.example:8080/messages", true},
		{"https://a.example/mcp", "http://a.example/mcp", false},
		{"https://a.example/mcp", "https://b.example/mcp", false},
		{"https://a.example/mcp", "https://a.example:8443/mcp", false},
		{"https://a.example/mcp", "https://a.example.evil.test/mcp", false},
	}
	for _, tt := range tests {
		rt := roundTripFunc(func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
		})
		ht, err := newHeaderTransport(rt, tt.endpoint, map[string]string{"Authorization": "Bearer x"})
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest("GET", tt.request, nil)
		req.RequestURI = ""
		_, err = ht.RoundTrip(req)
		if (err == nil) != tt.ok {
			t.Errorf("%s → %s: err %v, want ok=%v", tt.endpoint, tt.request, err, tt.ok)
		}
		if req.Header.Get("Authorization") != "" {
			t.Errorf("%s: the caller's request was modified", tt.request)
		}
	}
	if _, err := newHeaderTransport(nil, "file:///etc/passwd", nil); err == nil {
		t.Error("a file: URL was accepted")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestG3UnresponsiveChildRestarted: a child that stops answering pings (here
// SIGSTOPped) loses its session and is replaced.
func TestG3UnresponsiveChildRestarted(t *testing.T) {
	l := newRecordingLauncher()
	inst := startEcho(t, Config{
		KeepAlive: 200 * time.Millisecond,
		Backoff:   Backoff{Initial: 20 * time.Millisecond},
	}, l)
	pgid := pidOf(t, l.next(t))
	if err := syscall.Kill(-pgid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, inst, 20*time.Second, func(s Status) bool { return s.State == StateReady && s.Starts == 2 })
	groupGone(t, pgid)
	if res, err := inst.Call(context.Background(), "echo", json.RawMessage(`{"text":"awake"}`)); err != nil || textOf(t, res) != "awake" {
		t.Fatalf("call after the replacement: %v, %v", res, err)
	}
	t.Logf("replaced; status %+v", st)
}

// TestG8NoLeaks: start/stop cycles leave goroutines and file descriptors
// where they were.
func TestG8NoLeaks(t *testing.T) {
	countFDs := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
	cycle := func() {
		inst := startEcho(t, Config{}, &ProcessLauncher{})
		if _, err := inst.Call(context.Background(), "echo", json.RawMessage(`{"text":"x"}`)); err != nil {
			t.Fatal(err)
		}
		closeInstance(t, inst)
	}
	cycle() // warm up: the test binary's one-time goroutines and files
	baseG, baseFD := runtime.NumGoroutine(), countFDs()
	const cycles = 50
	for range cycles {
		cycle()
	}
	eventually(t, 10*time.Second, "goroutines and fds back to baseline", func() bool {
		return runtime.NumGoroutine() <= baseG+5 && countFDs() <= baseFD+5
	})
	t.Logf("after %d cycles: goroutines %d (baseline %d), fds %d (baseline %d)",
		cycles, runtime.NumGoroutine(), baseG, countFDs(), baseFD)
}

// TestRemoteSessionLostReconnects: the upstream forgets the session (a
// restarted server answers 404); the instance notices and reconnects.
func TestRemoteSessionLostReconnects(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "flaky", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, in struct {
		Text string `json:"text"`
	}) (*mcp.CallToolResult, struct{}, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, struct{}{}, nil
	})
	newHandler := func() http.Handler {
		return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	}
	var mu sync.Mutex
	h := newHandler()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		cur := h
		mu.Unlock()
		cur.ServeHTTP(w, r)
	}))
	defer hs.Close()

	inst := NewInstance(Config{Name: "flaky", URL: hs.URL, Backoff: Backoff{Initial: 20 * time.Millisecond}}, nil)
	inst.Start()
	defer closeInstance(t, inst)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := inst.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	h = newHandler() // the old session is unknown to it
	mu.Unlock()
	hs.CloseClientConnections() // ends the standalone GET stream
	// The next call may fail, but the instance must come back by itself.
	_, _ = inst.Call(ctx, "echo", json.RawMessage(`{"text":"x"}`))
	waitStatus(t, inst, 20*time.Second, func(s Status) bool { return s.State == StateReady && s.Starts == 2 })
	if res, err := inst.Call(ctx, "echo", json.RawMessage(`{"text":"reconnected"}`)); err != nil || textOf(t, res) != "reconnected" {
		t.Fatalf("call after reconnect: %v, %v", res, err)
	}
}

func BenchmarkCallStdio(b *testing.B) {
	inst := NewInstance(Config{Name: "bench", Command: testbin.Build(b, "internal/cmd/mcpecho")}, &Options{Launcher: &ProcessLauncher{}})
	inst.Start()
	defer inst.Close(context.Background())
	ctx := context.Background()
	if err := inst.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	args := json.RawMessage(`{"text":"bench"}`)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := inst.Call(ctx, "echo", args); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkStartStopStdio(b *testing.B) {
	bin := testbin.Build(b, "internal/cmd/mcpecho")
	ctx := context.Background()
	for b.Loop() {
		inst := NewInstance(Config{Name: "bench", Command: bin}, &Options{Launcher: &ProcessLauncher{}})
		inst.Start()
		if err := inst.WaitReady(ctx); err != nil {
			b.Fatal(err)
		}
		if err := inst.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func TestInitTimeout(t *testing.T) {
	sh := shell(t)
	// Reads its stdin and never answers.
	inst := NewInstance(Config{Name: "mute", Command: sh, Args: []string{"-c", "cat >/dev/null"}, InitTimeout: 300 * time.Millisecond},
		&Options{Launcher: newRecordingLauncher()})
	inst.Start()
	defer closeInstance(t, inst)
	start := time.Now()
	err := inst.WaitReady(context.Background())
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no answer within 300ms") {
		t.Fatalf("WaitReady = %v, want a timeout naming 300ms", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the init timeout took %v", d)
	}
}
