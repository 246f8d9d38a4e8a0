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
