package docker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func connectMCP(t testing.TB, ctx context.Context, c *Container) *mcp.ClientSession {
	t.Helper()
	cl := mcp.NewClient(&mcp.Implementation{Name: "docker-test", Version: "0"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
	cs, err := cl.Connect(ctx, &mcp.IOTransport{Reader: io.NopCloser(c.Stdout()), Writer: c.Stdin()},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("MCP initialize through the container: %v", err)
	}
	return cs
}

// TestMCPThroughContainer: initialize, tools/list and tools/call echo reach
// the server in the container over the attach stream; env travels in the
// API request; closing the session ends the child with status 0 and the
// container is removed (F5).
func TestMCPThroughContainer(t *testing.T) {
	r := engineRunner(t)
	img := testImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stderr syncBuffer
	c := startT(t, r, Spec{
		Server: "echo", Image: img, Stderr: &stderr,
		Env: map[string]string{"MCPECHO_DESCRIPTION_SUFFIX": " [from-env]"},
	})
	cs := connectMCP(t, ctx, c)
	if got := cs.InitializeResult().ServerInfo; got == nil || got.Name == "" {
		t.Fatalf("initialize result has no server info: %+v", cs.InitializeResult())
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		if tl.Name == "echo" && !strings.HasSuffix(tl.Description, " [from-env]") {
			t.Errorf("echo description %q lacks the suffix passed through Env", tl.Description)
		}
	}
	if !slices.Contains(names, "echo") {
		t.Fatalf("tools/list = %v, want echo", names)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "through the container"}})
	if err != nil {
		t.Fatalf("tools/call echo: %v", err)
	}
	if res.IsError || len(res.Content) == 0 {
		t.Fatalf("tools/call echo result: %+v", res)
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); !ok || !strings.Contains(tc.Text, "through the container") {
		t.Fatalf("echo answered %#v", res.Content[0])
	}

	// The secret-looking env value is in the container's config, not its
	// command line.
	info, err := r.cli.ContainerInspect(ctx, c.ID())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(info.Config.Env, "MCPECHO_DESCRIPTION_SUFFIX= [from-env]") {
		t.Errorf("env not in the container config: %v", info.Config.Env)
	}
	for _, a := range append(info.Config.Cmd, info.Path) {
		if strings.Contains(a, "from-env") {
			t.Errorf("env value on the command line: %q", a)
		}
	}

	// Closing the session closes stdin: the child sees EOF and exits 0.
	if err := cs.Close(); err != nil {
		t.Logf("session close: %v", err)
	}
	if err := waitExit(t, c, 30*time.Second); err != nil {
		t.Fatalf("Wait after stdin EOF = %v, want exit 0", err)
	}
	if _, err := r.cli.ContainerInspect(ctx, c.ID()); !cerrdefs.IsNotFound(err) {
		t.Fatalf("container still exists after exit: %v", err)
	}
	if l := labelled(t, r, LabelReplica, r.ReplicaID()); len(l) != 0 {
		t.Fatalf("containers left with this replica's label: %d", len(l))
	}
}

// facts starts the probe with args and decodes what it reports; the
// container stays up (the probe waits for stdin EOF) until the test stops it.
func facts(t *testing.T, r *Runner, spec Spec, args ...string) (*Container, map[string]any) {
	t.Helper()
	spec.Entrypoint = []string{"/probe"}
	spec.Argv = append([]string{"facts"}, args...)
	c := startT(t, r, spec)
	line, err := bufio.NewReader(c.Stdout()).ReadBytes('\n')
	if err != nil {
		t.Fatalf("reading probe output: %v", err)
	}
	var f map[string]any
	if err := json.Unmarshal(line, &f); err != nil {
		t.Fatalf("probe output %q: %v", line, err)
	}
	return c, f
}

// hostAddr is an address of this host that is not loopback, or loopback
// when the host has nothing else: from a container without a network both
// must be out of reach.
func hostAddr(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			return ipn.IP.String()
		}
	}
	return "127.0.0.1"
}

// TestHardening is F1 and F8, seen from inside the container and from the
// engine's view of its host config.
func TestHardening(t *testing.T) {
	r := engineRunner(t)
	img := testImage(t)

	// A stand-in for the gateway's data dir: a secret at its top, this
	// server's sandbox, and another server's sandbox.
	data := t.TempDir()
	secret := filepath.Join(data, "gateway", "secret.key")
	own := filepath.Join(data, "sandboxes", "self")
	other := filepath.Join(data, "sandboxes", "other")
	for _, d := range []string{filepath.Dir(secret), own, other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(secret, []byte("k"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "notes"), []byte("n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(own, 0o777); err != nil { // the child runs as nobody
		t.Fatal(err)
	}

	ln, err := net.Listen("tcp", hostAddr(t)+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
			accepted <- struct{}{}
		}
	}()
	udp, err := net.ListenPacket("udp", hostAddr(t)+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()

	c, f := facts(t, r, Spec{Server: "hardening", Image: img, ServerDir: own, PidsLimit: 64, MemoryBytes: 128 << 20},
		"-read", secret, "-read", filepath.Dir(secret), "-read", other, "-read", data,
		"-read", "/var/run/docker.sock", "-read", strings.TrimPrefix(os.Getenv("DOCKER_HOST"), "unix://"),
		"-write", DefaultServerDirPath,
		"-tcp", ln.Addr().String(), "-udp", udp.LocalAddr().String())

	status, _ := f["status"].(map[string]any)
	for k, want := range map[string]string{"CapEff": "0000000000000000", "CapPrm": "0000000000000000",
		"CapBnd": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"} {
		if status[k] != want {
			t.Errorf("%s = %v, want %s", k, status[k], want)
		}
	}
	if uid := f["uid"].(float64); uid == 0 {
		t.Errorf("child runs as root")
	}
	if ifs := f["interfaces"].([]any); len(ifs) != 1 || ifs[0] != "lo" {
		t.Errorf("interfaces = %v, want [lo]", ifs)
	}
	if e := f["root_write"].(string); !strings.Contains(e, "read-only file system") {
		t.Errorf("writing / gave %q, want EROFS", e)
	}
	if e := f["tmp_write"].(string); e != "" {
		t.Errorf("writing /tmp failed: %s", e)
	}
	for p, e := range f["reads"].(map[string]any) {
		if p == "" {
			continue
		}
		if e == "" {
			t.Errorf("host path %s readable from the container", p)
		}
	}
	if e := f["writes"].(map[string]any)[DefaultServerDirPath]; e != "" {
		t.Errorf("own server dir not writable: %v", e)
	}
	if _, err := os.Stat(filepath.Join(own, "probe-write")); err != nil {
		t.Errorf("write to the server dir did not land in the host dir: %v", err)
	}
	if e, _ := f["tcp"].(string); e == "" {
		t.Errorf("TCP connect to %s succeeded with network none", ln.Addr())
	}
	if e, _ := f["udp"].(string); e == "" {
		t.Errorf("UDP send to %s succeeded with network none", udp.LocalAddr())
	}
	select {
	case <-accepted:
		t.Errorf("the host listener accepted a connection from the container")
	default:
	}
	if cwd := f["cwd"]; cwd != DefaultServerDirPath {
		t.Errorf("cwd = %v, want %s", cwd, DefaultServerDirPath)
	}

	info, err := r.cli.ContainerInspect(context.Background(), c.ID())
	if err != nil {
		t.Fatal(err)
	}
	hc := info.HostConfig
	if hc.Privileged || len(hc.Binds) != 0 || len(hc.CapAdd) != 0 || hc.NetworkMode != "none" ||
		!hc.ReadonlyRootfs || !hc.AutoRemove || hc.PidMode != "" || hc.IpcMode == "host" || hc.UsernsMode == "host" {
		t.Errorf("host config: privileged=%v binds=%v capadd=%v net=%s ro=%v autoremove=%v pid=%q ipc=%q",
			hc.Privileged, hc.Binds, hc.CapAdd, hc.NetworkMode, hc.ReadonlyRootfs, hc.AutoRemove, hc.PidMode, hc.IpcMode)
	}
	if len(info.Mounts) != 1 || info.Mounts[0].Source != own || info.Mounts[0].Destination != DefaultServerDirPath {
		t.Errorf("mounts = %+v, want only the server dir", info.Mounts)
	}
	for _, m := range info.Mounts {
		if strings.Contains(m.Source, "docker.sock") || m.Source == data || m.Source == filepath.Dir(secret) {
			t.Errorf("forbidden mount %s", m.Source)
		}
	}
	if info.Config.Labels[LabelServer] != "hardening" || info.Config.Labels[LabelReplica] != r.ReplicaID() {
		t.Errorf("labels = %v", info.Config.Labels)
	}
	if hc.PidsLimit == nil || *hc.PidsLimit != 64 || hc.Memory != 128<<20 {
		t.Errorf("limits not applied: pids %v memory %d", hc.PidsLimit, hc.Memory)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestHardeningNoServerDir: without a ServerDir nothing is mounted at all.
func TestHardeningNoServerDir(t *testing.T) {
	r := engineRunner(t)
	c, f := facts(t, r, Spec{Server: "nomount", Image: testImage(t)}, "-read", DefaultServerDirPath)
	if e := f["reads"].(map[string]any)[DefaultServerDirPath]; e == "" {
		t.Errorf("%s exists without a server dir", DefaultServerDirPath)
	}
	info, err := r.cli.ContainerInspect(context.Background(), c.ID())
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Mounts) != 0 || len(info.HostConfig.Binds) != 0 || len(info.HostConfig.Mounts) != 0 {
		t.Errorf("mounts without a server dir: %+v", info.Mounts)
	}
}

// TestStop is F5: Stop closes stdin, the child exits, and the container is
// gone once Stop returns. A child that ignores EOF is killed after the grace
// period. Stop is idempotent.
func TestStop(t *testing.T) {
	r := engineRunner(t)
	img := testImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("exits on EOF", func(t *testing.T) {
		c := startT(t, r, Spec{Server: "stop-eof", Image: img})
		cs := connectMCP(t, ctx, c) // proves it is up before we stop it
		_ = cs
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := r.cli.ContainerInspect(ctx, c.ID()); !cerrdefs.IsNotFound(err) {
			t.Fatalf("container exists after Stop: %v", err)
		}
		if err := c.Wait(); err != nil {
			t.Errorf("Wait after a graceful stop = %v, want nil", err)
		}
		if err := c.Stop(ctx); err != nil {
			t.Errorf("second Stop = %v", err)
		}
	})

	t.Run("killed after grace", func(t *testing.T) {
		c := startT(t, r, Spec{Server: "stop-hang", Image: img, Entrypoint: []string{"/probe"}, Argv: []string{"hang"},
			ExtraArgs: map[string]any{"stop_grace": "300ms"}})
		if line, err := bufio.NewReader(c.Stdout()).ReadString('\n'); err != nil || line != "hanging\n" {
			t.Fatalf("probe hang said %q, %v", line, err)
		}
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := r.cli.ContainerInspect(ctx, c.ID()); !cerrdefs.IsNotFound(err) {
			t.Fatalf("container exists after Stop: %v", err)
		}
		var ee *ExitError
		if err := c.Wait(); !errors.As(err, &ee) || ee.Status != 137 {
			t.Errorf("Wait after a kill = %v, want status 137", err)
		}
		if l := labelled(t, r, LabelServer, "stop-hang"); len(l) != 0 {
			t.Errorf("label query still finds %d containers", len(l))
		}
	})
}

// TestExitStatus: Wait reports the child's status and returns only after
// the container is gone.
func TestExitStatus(t *testing.T) {
	r := engineRunner(t)
	c := startT(t, r, Spec{Server: "exit7", Image: testImage(t), Entrypoint: []string{"/probe"}, Argv: []string{"exit", "7"}})
	err := waitExit(t, c, 30*time.Second)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Status != 7 {
		t.Fatalf("Wait = %v, want exit status 7", err)
	}
	if _, err := r.cli.ContainerInspect(context.Background(), c.ID()); !cerrdefs.IsNotFound(err) {
		t.Fatalf("container exists after Wait: %v", err)
	}
	if _, err := io.ReadAll(c.Stdout()); err != nil {
		t.Errorf("stdout of an exited child did not end cleanly: %v", err)
	}
}

// TestDroppedAttach is F6: a gateway that dies drops the attach connection
// without a half-close; the engine closes the child's stdin (StdinOnce),
// the child exits and AutoRemove deletes it.
func TestDroppedAttach(t *testing.T) {
	r := engineRunner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := startT(t, r, Spec{Server: "dropped", Image: testImage(t)})
	connectMCP(t, ctx, c)
	start := time.Now()
	c.hj.Conn.Close() // what a crashed gateway's kernel does to its socket
	waitExit(t, c, 30*time.Second)
	t.Logf("container gone %v after the attach connection dropped", time.Since(start))
	if _, err := r.cli.ContainerInspect(ctx, c.ID()); !cerrdefs.IsNotFound(err) {
		t.Fatalf("container exists after the attach dropped: %v", err)
	}
}

// TestSweepOrphans is F6's second half: the sweep removes this replica's
// containers, even ones that ignore EOF, and leaves another replica's alone.
func TestSweepOrphans(t *testing.T) {
	mine := engineRunner(t)
	theirs := engineRunner(t)
	img := testImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hang := Spec{Image: img, Entrypoint: []string{"/probe"}, Argv: []string{"hang"}}
	hang.Server = "orphan-a"
	a1 := startT(t, mine, hang)
	hang.Server = "orphan-b"
	a2 := startT(t, mine, hang)
	hang.Server = "survivor"
	b := startT(t, theirs, hang)
	for _, c := range []*Container{a1, a2, b} {
		if line, err := bufio.NewReader(c.Stdout()).ReadString('\n'); err != nil || line != "hanging\n" {
			t.Fatalf("probe hang said %q, %v", line, err)
		}
	}

	n, err := mine.SweepOrphans(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("SweepOrphans removed %d containers, want 2", n)
	}
	for _, c := range []*Container{a1, a2} {
		waitExit(t, c, 30*time.Second)
	}
	if l := labelled(t, mine, LabelReplica, mine.ReplicaID()); len(l) != 0 {
		t.Errorf("%d containers of the swept replica remain", len(l))
	}
	info, err := theirs.cli.ContainerInspect(ctx, b.ID())
	if err != nil || !info.State.Running {
		t.Fatalf("the other replica's container did not survive the sweep: %v", err)
	}
	if n, err := mine.SweepOrphans(ctx); err != nil || n != 0 {
		t.Errorf("second sweep = %d, %v; want 0, nil", n, err)
	}
}

// TestImageMissing is F7's second half: no image and no pull → a clear
// error naming the image, and nothing created.
func TestImageMissing(t *testing.T) {
	r := engineRunner(t)
	ref := "mcpgate-dockertest-absent:" + randomHex(4)
	_, err := r.Start(context.Background(), Spec{Server: "noimage", Image: ref})
	if !errors.Is(err, ErrImageMissing) {
		t.Fatalf("Start = %v, want ErrImageMissing", err)
	}
	if !strings.Contains(err.Error(), ref) {
		t.Errorf("error %q does not name the image %s", err, ref)
	}
	if l := labelled(t, r, LabelServer, "noimage"); len(l) != 0 {
		t.Errorf("a container was created for a missing image")
	}
}

// TestStartFailureCleansUp: a container the engine creates but cannot
// start (a user name the scratch image has no passwd entry for) fails Start
// and leaves nothing behind; a missing executable is reported by Wait, since
// tini starts and then cannot exec it.
func TestStartFailureCleansUp(t *testing.T) {
	r := engineRunner(t)
	img := testImage(t)
	_, err := r.Start(context.Background(), Spec{Server: "baduser", Image: img, User: "no-such-user"})
	if err == nil {
		t.Fatal("Start with an unknown user succeeded")
	}
	t.Logf("Start: %v", err)
	if l := labelled(t, r, LabelReplica, r.ReplicaID()); len(l) != 0 {
		t.Errorf("%d containers left after a failed Start", len(l))
	}

	c, err := r.Start(context.Background(), Spec{Server: "badexec", Image: img, Entrypoint: []string{"/nope"}})
	if err == nil {
		var ee *ExitError
		if err := waitExit(t, c, 30*time.Second); !errors.As(err, &ee) || ee.Status == 0 {
			t.Errorf("Wait for a missing executable = %v, want a non-zero status", err)
		}
	}
	if l := labelled(t, r, LabelReplica, r.ReplicaID()); len(l) != 0 {
		t.Errorf("%d containers left after a missing executable", len(l))
	}
}

// boundedWriter keeps the last n bytes, as the gateway's stderr ring does,
// and counts what it saw.
type boundedWriter struct {
	mu    sync.Mutex
	buf   []byte
	n     int
	total int64
}

func (w *boundedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.total += int64(len(p))
	w.buf = append(w.buf, p...)
	if len(w.buf) > w.n {
		w.buf = append(w.buf[:0], w.buf[len(w.buf)-w.n:]...)
	}
	return len(p), nil
}

// TestStderrFlood is G7: 100 MB on stderr neither blocks stdout nor grows
// the gateway's memory beyond the stderr ring.
func TestStderrFlood(t *testing.T) {
	r := engineRunner(t)
	img := testImage(t)
	const floodBytes, lines = 100 << 20, 20000
	stderr := &boundedWriter{n: 64 << 10}

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-tk.C:
			}
		}
	}()

	c := startT(t, r, Spec{Server: "flood", Image: img, Entrypoint: []string{"/probe"},
		Argv: []string{"flood", "104857600", "20000"}, Stderr: stderr})
	sc := bufio.NewScanner(c.Stdout())
	got := 0
	for sc.Scan() {
		if want := "line " + strconv.Itoa(got); sc.Text() != want {
			t.Fatalf("stdout line %d = %q, want %q", got, sc.Text(), want)
		}
		got++
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading stdout: %v", err)
	}
	if err := waitExit(t, c, 120*time.Second); err != nil {
		t.Fatalf("flood child exited with %v", err)
	}
	close(done)
	<-sampled
	if got != lines {
		t.Errorf("stdout lines = %d, want %d", got, lines)
	}
	stderr.mu.Lock()
	total, kept := stderr.total, len(stderr.buf)
	stderr.mu.Unlock()
	if total != floodBytes {
		t.Errorf("stderr bytes = %d, want %d", total, floodBytes)
	}
	if kept > 64<<10 {
		t.Errorf("stderr ring holds %d bytes", kept)
	}
	growth := int64(peak.Load()) - int64(before.HeapInuse)
	t.Logf("heap in use grew by at most %d KiB while 100 MiB of stderr passed", growth>>10)
	if growth > 32<<20 {
		t.Errorf("heap grew by %d MiB during the flood", growth>>20)
	}
}

// syncBuffer is a goroutine-safe stderr sink for tests.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// BenchmarkSpawnToInitialize measures create → attach → start → MCP
// initialize of the scratch mcpecho image, and reports the median.
// Run with -benchtime=20x (or more) for a median of at least 20 runs.
func BenchmarkSpawnToInitialize(b *testing.B) {
	b.Run("docker", func(b *testing.B) {
		r := engineRunner(b)
		img := testImage(b)
		ctx := context.Background()
		var ds []time.Duration
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			c, err := r.Start(ctx, Spec{Server: "bench", Image: img})
			if err != nil {
				b.Fatal(err)
			}
			cs := connectMCP(b, ctx, c)
			ds = append(ds, time.Since(start))
			b.StopTimer()
			cs.Close()
			if err := c.Stop(ctx); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		b.StopTimer()
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "ms-median")
		b.ReportMetric(float64(ds[len(ds)-1].Microseconds())/1000, "ms-max")
	})
}
