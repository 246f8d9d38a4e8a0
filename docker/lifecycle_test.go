package docker

import (
	"bufio"
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMemoryLimit is F3: a child that allocates past its memory limit is
// killed, and Wait reports status 137.
func TestMemoryLimit(t *testing.T) {
	r := engineRunner(t)
	c := startT(t, r, Spec{Server: "oom", Image: testImage(t), Entrypoint: []string{"/probe"}, Argv: []string{"alloc"},
		MemoryBytes: 32 << 20})
	sc := bufio.NewScanner(c.Stdout())
	last := ""
	for sc.Scan() {
		last = sc.Text()
	}
	err := waitExit(t, c, 60*time.Second)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Status != 137 {
		t.Fatalf("Wait = %v, want status 137 (last output %q)", err, last)
	}
	if !strings.Contains(err.Error(), "out of memory") {
		t.Errorf("error %q does not mention the likely cause", err)
	}
	t.Logf("child got to %q before the kill", last)
}

// TestRoundTrips is F4 over a real attach stream: 1000 sequential calls,
// then a 5 MiB frame each way.
func TestRoundTrips(t *testing.T) {
	r := engineRunner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c := startT(t, r, Spec{Server: "roundtrips", Image: testImage(t)})
	cs := connectMCP(t, ctx, c)
	defer cs.Close()
	start := time.Now()
	for i := range 1000 {
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	t.Logf("1000 sequential echo calls in %v", time.Since(start))
	big := strings.Repeat("b", 5<<20)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": big}})
	if err != nil {
		t.Fatalf("5 MiB call: %v", err)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok || !strings.Contains(tc.Text, big) {
		t.Fatalf("5 MiB echo came back altered")
	}
}

// TestNoLeaks is G8 in small: start/stop cycles return goroutines to the
// baseline, whether the child is stopped or exits on its own.
func TestNoLeaks(t *testing.T) {
	r := engineRunner(t)
	img := testImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	// One cycle first, so lazily started client goroutines count as baseline.
	cycle := func(i int) {
		c, err := r.Start(ctx, Spec{Server: "leak", Image: img})
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if err := c.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			return
		}
		c.Stdin().Close() // exits on its own; nobody calls Stop
		if err := waitExit(t, c, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	cycle(0)
	r.cli.HTTPClient().CloseIdleConnections()
	base := runtime.NumGoroutine()
	for i := range 10 {
		cycle(i)
	}
	r.cli.HTTPClient().CloseIdleConnections()
	// Goroutines end shortly after their connections close; wait for that
	// condition, bounded, rather than for a fixed time.
	deadline := time.Now().Add(10 * time.Second)
	tk := time.NewTicker(20 * time.Millisecond)
	defer tk.Stop()
	for runtime.NumGoroutine() > base+5 && time.Now().Before(deadline) {
		<-tk.C
	}
	if n := runtime.NumGoroutine(); n > base+5 {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines: %d after 10 cycles, baseline %d\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}

// TestProbeEngine: against a real engine the probe reports the negotiated
// API version and caches its answer.
func TestProbeEngine(t *testing.T) {
	r := engineRunner(t)
	st, err := r.Probe(context.Background())
	if err != nil || !st.Available {
		t.Fatalf("Probe = %+v, %v", st, err)
	}
	if st.APIVersion == "" || st.EngineAPIVersion == "" || st.ServerVersion == "" {
		t.Errorf("probe lacks versions: %+v", st)
	}
	if st.APIVersion != st.EngineAPIVersion && st.APIVersion != "1.51" {
		t.Errorf("negotiated %s with an engine at %s", st.APIVersion, st.EngineAPIVersion)
	}
	again, _ := r.Probe(context.Background())
	if !again.CheckedAt.Equal(st.CheckedAt) {
		t.Errorf("second probe within the TTL was not cached")
	}
	t.Logf("engine %s, API %s (negotiated %s)", st.ServerVersion, st.EngineAPIVersion, st.APIVersion)
}

// TestPullFailure: with pulling allowed, a registry that cannot be reached
// gives an error naming the image, and nothing is created.
func TestPullFailure(t *testing.T) {
	r := engineRunner(t)
	ref := "127.0.0.1:1/mcpgate/absent:x" // a port nothing listens on
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := r.Start(ctx, Spec{Server: "pullfail", Image: ref, AllowPull: true})
	if err == nil {
		t.Fatal("Start pulled from a registry that does not exist")
	}
	if !strings.Contains(err.Error(), ref) {
		t.Errorf("error %q does not name the image", err)
	}
	if l := labelled(t, r, LabelServer, "pullfail"); len(l) != 0 {
		t.Errorf("a container was created after a failed pull")
	}
	t.Logf("pull error: %v", err)
}
