package upstream

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/docker"
	"github.com/mcpgate/mcpgate/internal/testbin"
	"github.com/mcpgate/mcpgate/internal/testimage"
	"github.com/mcpgate/mcpgate/sandbox"
)

// isolatingLauncher builds the launcher the gateway uses, for every mode the
// host offers, with a data dir a sandbox uid can pass through.
func isolatingLauncher(t testing.TB, withDocker bool) (*IsolatingLauncher, string) {
	t.Helper()
	base, err := os.MkdirTemp("", "mcpgate-iso-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o711)
	data := filepath.Join(base, "data")
	if err := os.MkdirAll(filepath.Join(data, "gateway"), 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(data, 0o711)
	l := &IsolatingLauncher{
		None:    &ProcessLauncher{},
		Self:    testbin.Build(t, "cmd/mcpgate-sandbox"),
		DataDir: data,
	}
	if os.Geteuid() == 0 {
		l.SandboxUID, l.SandboxGID = 65534, 65534
	}
	ref := ""
	if withDocker {
		cli := testimage.Client(t)
		ref = fmt.Sprintf("mcpgate-test/mcpecho:%d", os.Getpid())
		testimage.Scratch(t, cli, ref, map[string]string{"mcpecho": mcpecho(t)}, "USER 65534:65534")
		r, err := docker.New(fmt.Sprintf("upstream-test-%d", os.Getpid()), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		l.Docker = r
	}
	return l, ref
}

func initializeThrough(t testing.TB, l Launcher, spec Spec) (*mcp.ClientSession, Child) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	child, err := l.Launch(ctx, spec)
	if err != nil {
		t.Fatalf("launching %s: %v", spec.Isolation.Mode, err)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
	cs, err := c.Connect(ctx, &mcp.IOTransport{Reader: readCloser{child.Stdout()}, Writer: child.Stdin()},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		child.Stop(context.Background())
		t.Fatalf("initialize under %s: %v", spec.Isolation.Mode, err)
	}
	return cs, child
}

type readCloser struct {
	r interface{ Read([]byte) (int, error) }
}

func (r readCloser) Read(p []byte) (int, error) { return r.r.Read(p) }
func (r readCloser) Close() error               { return nil }

// The resolved mode drives the launcher: the same mcpecho answers
// initialize, tools/list and tools/call under none, sandbox and docker (the
// escape matrices of the sandbox and docker packages prove the confinement).
func TestIsolatingLauncherModes(t *testing.T) {
	abi, ok := sandbox.Available(sandbox.RecommendedMinABI)
	require(t, ok, fmt.Sprintf("Landlock ABI %d below %d", abi, sandbox.RecommendedMinABI))
	l, ref := isolatingLauncher(t, true)
	for _, mode := range []string{"none", "sandbox", "docker"} {
		t.Run(mode, func(t *testing.T) {
			spec := Spec{Server: "echo-" + mode, Command: mcpecho(t), Env: map[string]string{"GREETING": "hi"},
				Isolation: Isolation{Mode: mode, NetworkMode: "none"}}
			if mode == "docker" {
				spec.Command, spec.Isolation.Image = "/mcpecho", ref
			}
			cs, child := initializeThrough(t, l, spec)
			defer child.Stop(context.Background())
			defer cs.Close()
			var names []string
			for tool, err := range cs.Tools(context.Background(), nil) {
				if err != nil {
					t.Fatal(err)
				}
				names = append(names, tool.Name)
			}
			sort.Strings(names)
			if strings.Join(names, ",") != "add_note,delete_notes,echo,sleep" {
				t.Fatalf("tools under %s: %v", mode, names)
			}
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "through " + mode}})
			if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "through "+mode {
				t.Fatalf("echo under %s: %v %+v", mode, err, res)
			}
		})
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"512m": 512 << 20, "1g": 1 << 30, "64K": 64 << 10, "1000": 1000} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "m", "-1m", "1t", "lots"} {
		if _, err := ParseBytes(bad); err == nil {
			t.Errorf("ParseBytes(%q) accepted", bad)
		}
	}
}

// BenchmarkSpawnToInitialize measures spawn-to-initialize of mcpecho under
// each mode through the launcher the gateway uses; it reports the median.
func BenchmarkSpawnToInitialize(b *testing.B) {
	l, ref := isolatingLauncher(b, true)
	for _, mode := range []string{"none", "sandbox", "docker"} {
		b.Run(mode, func(b *testing.B) {
			spec := Spec{Server: "bench-" + mode, Command: mcpecho(b), Isolation: Isolation{Mode: mode, NetworkMode: "none"}}
			if mode == "docker" {
				spec.Command, spec.Isolation.Image = "/mcpecho", ref
			}
			var samples []time.Duration
			for b.Loop() {
				start := time.Now()
				cs, child := initializeThrough(b, l, spec)
				samples = append(samples, time.Since(start))
				cs.Close()
				child.Stop(context.Background())
			}
			sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
			b.ReportMetric(float64(samples[len(samples)/2].Microseconds())/1000, "median-ms")
		})
	}
}
