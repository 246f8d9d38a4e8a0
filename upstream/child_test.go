package upstream

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestProcessLauncherEnvironment(t *testing.T) {
	envBin, err := exec.LookPath("env")
	require(t, err == nil, "no env on PATH")
	t.Setenv("MCPGATE_ADMIN_TOKEN", "gateway-secret")
	l := &ProcessLauncher{Home: "/home/srv", TempDir: "/tmp/srv", Lang: "C.UTF-8", Path: "/usr/bin:/bin"}
	ctx := context.Background()
	c, err := l.Launch(ctx, Spec{Server: "env", Command: "env", Env: map[string]string{"API_KEY": "k1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	out, err := io.ReadAll(c.Stdout())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatalf("%s: %v", envBin, err)
	}
	got := strings.Fields(string(out))
	slices.Sort(got)
	want := []string{"API_KEY=k1", "HOME=/home/srv", "LANG=C.UTF-8", "PATH=/usr/bin:/bin", "TMPDIR=/tmp/srv"}
	if !slices.Equal(got, want) {
		t.Errorf("child environment = %q, want exactly %q", got, want)
	}
}

func TestProcessLauncherMissingCommand(t *testing.T) {
	l := &ProcessLauncher{Path: t.TempDir()}
	_, err := l.Launch(context.Background(), Spec{Command: "no-such-mcp-server"})
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("Launch of a missing command: %v, want a not-found error", err)
	}
}

// TestStopGracefulOnEOF: a child that exits on stdin EOF is not signalled.
func TestStopGracefulOnEOF(t *testing.T) {
	cat, err := exec.LookPath("cat")
	require(t, err == nil, "no cat on PATH")
	c, err := StartCmd(exec.Command(cat), nil, &ProcessOptions{Grace: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c.Stdin(), "ping\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c.Stdout()).ReadString('\n')
	if err != nil || line != "ping\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	start := time.Now()
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Stop took %v for a child that exits on EOF; it waited for the grace", d)
	}
	if err := c.Wait(); err != nil {
		t.Errorf("Wait = %v, want a clean exit (no signal)", err)
	}
	groupGone(t, pidOf(t, c))
}

// TestG4StopKillsTheGroup: grandchildren that ignore SIGTERM and outlive the
// leader are killed and reaped; nothing of the group stays in /proc.
func TestG4StopKillsTheGroup(t *testing.T) {
	sh := shell(t)
	cmd := exec.Command(sh, "-c", `trap "" TERM; sleep 1000 & sleep 1000 & echo started; wait`)
	c, err := StartCmd(cmd, nil, &ProcessOptions{Grace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(c.Stdout()).ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	pgid := pidOf(t, c)
	procs, err := GroupProcesses(pgid)
	if err != nil || len(procs) != 3 {
		t.Fatalf("group %d before Stop: %+v, %v; want sh and two sleeps", pgid, procs, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	groupGone(t, pgid)
	var ws syscall.WaitStatus
	if err := c.Wait(); err == nil {
		t.Error("Wait = nil for a child killed by SIGKILL")
	} else if ee, ok := err.(*exec.ExitError); ok {
		ws = ee.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("leader ended with %v, want SIGKILL (it ignored SIGTERM)", err)
		}
	}
	// Idempotent.
	if err := c.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// TestG4StopLeaderGoneGrandchildrenLeft: the leader exits on EOF but leaves
// a grandchild behind in its group; Stop still ends it.
func TestG4StopLeaderGoneGrandchildrenLeft(t *testing.T) {
	sh := shell(t)
	cmd := exec.Command(sh, "-c", `sleep 1000 >/dev/null 2>&1 & echo started; read x || exit 0`)
	c, err := StartCmd(cmd, nil, &ProcessOptions{Grace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(c.Stdout()).ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	pgid := pidOf(t, c)
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Errorf("leader: %v, want a clean exit on EOF", err)
	}
	groupGone(t, pgid)
}

func TestStopWithExpiredContextStillKills(t *testing.T) {
	sh := shell(t)
	c, err := StartCmd(exec.Command(sh, "-c", `trap "" TERM; echo started; sleep 1000`), nil, &ProcessOptions{Grace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(c.Stdout()).ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() { done <- c.Stop(ctx) }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("Stop with a cancelled ctx reported no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stop with a cancelled ctx waited for the hour-long grace")
	}
	groupGone(t, pidOf(t, c))
}
