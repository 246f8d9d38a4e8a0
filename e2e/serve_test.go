// Package e2e runs the built mcpgate binary as an operator would, against
// real PostgreSQL, and talks to it over real HTTP.
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/testbin"
	"github.com/mcpgate/mcpgate/sandbox"
)

const adminToken = "e2e-admin-token-0123456789abcdef0123456789ab"

// gateway is one running `mcpgate serve`.
type gateway struct {
	cmd  *exec.Cmd
	addr string
	logs *lockedLines
	done chan error
}

type lockedLines struct {
	ch chan string
}

// startGateway runs the binary with env and waits for its "serving" line.
func startGateway(t *testing.T, env ...string) *gateway {
	t.Helper()
	bin := testbin.Build(t, "cmd/mcpgate")
	cmd := exec.Command(bin, "serve")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "MCPGATE_LISTEN=127.0.0.1:0", "MCPGATE_ADMIN_TOKEN=" + adminToken}, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &gateway{cmd: cmd, logs: &lockedLines{ch: make(chan string, 4096)}, done: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "serving" {
				addr <- rec["addr"].(string)
			}
			select {
			case g.logs.ch <- line:
			default:
			}
		}
	}()
	go func() { g.done <- cmd.Wait() }()
	t.Cleanup(func() { g.stop(t) })
	select {
	case g.addr = <-addr:
	case err := <-g.done:
		t.Fatalf("gateway exited before serving: %v\n%s", err, g.drain())
	case <-time.After(90 * time.Second):
		t.Fatalf("gateway did not start serving within 90s\n%s", g.drain())
	}
	return g
}

func (g *gateway) drain() string {
	var b strings.Builder
	for {
		select {
		case l := <-g.logs.ch:
			b.WriteString(l + "\n")
		default:
			return b.String()
		}
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (g *gateway) stop(t *testing.T) {
	if g.cmd == nil {
		return // not a process of ours (the proxy in front of replicas)
	}
	select {
	case err := <-g.done:
		g.done <- err // exited already (stopped before, or killed by the test)
		return
	default:
	}
	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-g.done:
		g.done <- err
		if err != nil {
			t.Errorf("gateway exit after SIGTERM: %v\n%s", err, g.drain())
		}
	case <-time.After(60 * time.Second):
		g.cmd.Process.Kill()
		t.Errorf("gateway did not exit within 60s of SIGTERM")
	}
}

func (g *gateway) request(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+g.addr+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// dataDir makes a fresh data dir that the private PostgreSQL's user can
// reach (when the tests run as root, it runs as "postgres").
func dataDir(t *testing.T) string {
	t.Helper()
	base, err := os.MkdirTemp("", "mcpgate-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(base, "data")
}

// With no database URL, `serve` starts its own PostgreSQL in a fresh data
// dir, answers /readyz, and a restart onto the same data loses nothing.
func TestServeWithPrivatePostgres(t *testing.T) {
	if _, err := exec.LookPath("initdb"); err != nil {
		if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(m) == 0 {
			if os.Getenv("MCPGATE_TEST_STRICT") != "" {
				t.Fatal("no PostgreSQL server binaries")
			}
			t.Skip("no PostgreSQL server binaries")
		}
	}
	data := dataDir(t)
	g := startGateway(t, "MCPGATE_DATA_DIR="+data)
	if code, body := g.request(t, "GET", "/readyz", ""); code != 200 {
		t.Fatalf("/readyz = %d %s", code, body)
	}
	// /status reports the host's real isolation capabilities.
	code, body := g.request(t, "GET", "/api/v1/status", "")
	var st struct {
		Edition   string `json:"edition"`
		Isolation struct {
			GlobalMode  string `json:"global_mode"`
			LandlockABI int    `json:"landlock_abi"`
		} `json:"isolation"`
	}
	if err := json.Unmarshal(body, &st); code != 200 || err != nil || st.Edition != "server" {
		t.Fatalf("/status = %d %s", code, body)
	}
	if abi, err := sandbox.ABI(); err == nil && st.Isolation.LandlockABI != abi {
		t.Errorf("/status landlock_abi = %d, the kernel says %d", st.Isolation.LandlockABI, abi)
	}
	if st.Isolation.GlobalMode == "" {
		t.Error("/status has no global mode")
	}
	email := fmt.Sprintf("kept-%d@example.test", time.Now().UnixNano())
	if code, body := g.request(t, "POST", "/api/v1/users", `{"email":"`+email+`","role":"member"}`); code != 201 {
		t.Fatalf("create user = %d %s", code, body)
	}
	for _, f := range []string{"gateway/secret.key", "gateway/session.key", "gateway/pg.password"} {
		st, err := os.Stat(filepath.Join(data, f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want 0600", f, err, st.Mode().Perm())
		}
	}
	g.stop(t)
	if pids := processesWith(t, filepath.Join(data, "pg")); len(pids) > 0 {
		t.Errorf("private PostgreSQL still running after the gateway stopped: pids %v", pids)
	}

	g2 := startGateway(t, "MCPGATE_DATA_DIR="+data)
	if code, body := g2.request(t, "GET", "/readyz", ""); code != 200 {
		t.Fatalf("/readyz after restart = %d %s", code, body)
	}
	code, body = g2.request(t, "GET", "/api/v1/users", "")
	if code != 200 || !strings.Contains(string(body), email) {
		t.Fatalf("after restart, users = %d %s; want %s kept", code, body, email)
	}
	if strings.Contains(g2.drain(), adminToken) {
		t.Error("the admin token appears in the logs")
	}
}

// A bad configuration stops the start with a message naming the variable.
func TestBadConfigurationNamesTheVariable(t *testing.T) {
	bin := testbin.Build(t, "cmd/mcpgate")
	for _, tt := range []struct{ env, name string }{
		{"MCPGATE_ENABLE_SOCKET=perhaps", "MCPGATE_ENABLE_SOCKET"},
		{"MCPGATE_ADMIN_TOKEN=short", "MCPGATE_ADMIN_TOKEN"},
		{"MCPGATE_LOG_LEVEL=loud", "MCPGATE_LOG_LEVEL"},
		{"MCPGATE_SHUTDOWN_TIMEOUT=soon", "MCPGATE_SHUTDOWN_TIMEOUT"},
		{"MCPGATE_DATABASE_URL=mysql://x", "MCPGATE_DATABASE_URL"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, bin, "serve")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "MCPGATE_DATA_DIR=" + t.TempDir(), tt.env}
		out, err := cmd.CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), tt.name) {
			t.Errorf("%s: err=%v output %q; want a failure naming %s", tt.env, err, out, tt.name)
		}
	}
}

// processesWith lists the pids whose command line contains s.
func processesWith(t *testing.T, s string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmd), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}
