package upstream

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/testbin"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "parent" {
		runParentHelper()
		return
	}
	// Adopt orphaned grandchildren so that Stop can reap them and the /proc
	// scans below see no zombie of a stopped group.
	if err := BecomeSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, "upstream tests:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// require skips the test when a resource is missing, or fails it under
// MCPGATE_TEST_STRICT=1 (CI), where everything must be present.
func require(t *testing.T, ok bool, reason string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("MCPGATE_TEST_STRICT") == "1" {
		t.Fatalf("missing test resource: %s", reason)
	}
	t.Skipf("missing test resource: %s", reason)
}

func shell(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("sh")
	require(t, err == nil, "no sh on PATH")
	_, err = exec.LookPath("sleep")
	require(t, err == nil, "no sleep on PATH")
	return p
}

func mcpecho(t testing.TB) string { return testbin.Build(t, "internal/cmd/mcpecho") }

// recordingLauncher is a ProcessLauncher that hands each child to the test.
type recordingLauncher struct {
	ProcessLauncher
	launched chan Child
}

func newRecordingLauncher() *recordingLauncher {
	return &recordingLauncher{ProcessLauncher: ProcessLauncher{Grace: 300 * time.Millisecond}, launched: make(chan Child, 100)}
}

func (l *recordingLauncher) Launch(ctx context.Context, spec Spec) (Child, error) {
	c, err := l.ProcessLauncher.Launch(ctx, spec)
	if err == nil {
		l.launched <- c
	}
	return c, err
}

func (l *recordingLauncher) next(t *testing.T) Child {
	t.Helper()
	select {
	case c := <-l.launched:
		return c
	case <-time.After(20 * time.Second):
		t.Fatal("no child launched within 20s")
		return nil
	}
}

func pidOf(t *testing.T, c Child) int {
	t.Helper()
	p, ok := c.(interface{ Pid() int })
	if !ok {
		t.Fatalf("child %T has no Pid", c)
	}
	return p.Pid()
}

// waitStatus waits for inst's status to satisfy ok, on the instance's change
// signal, and fails the test at the deadline.
func waitStatus(t *testing.T, inst *Instance, d time.Duration, ok func(Status) bool) Status {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		inst.mu.Lock()
		st, changed := inst.status, inst.changed
		inst.mu.Unlock()
		if ok(st) {
			return st
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("instance %q: status %+v did not reach the wanted condition within %v", inst.Name(), st, d)
		}
	}
}

// eventually polls cond until it holds, for conditions with no change signal
// (the kernel's process table).
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		<-tick.C
	}
}

func groupGone(t *testing.T, pgid int) {
	t.Helper()
	procs, err := GroupProcesses(pgid)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) > 0 {
		t.Fatalf("process group %d still has processes: %+v", pgid, procs)
	}
}

func closeInstance(t *testing.T, inst *Instance) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := inst.Close(ctx); err != nil {
		t.Errorf("closing: %v", err)
	}
}

// fakeClock is a Clock that moves only when told to.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	created chan time.Duration // one value per NewTimer, for tests to sync on
}

type fakeTimer struct {
	clock *fakeClock
	when  time.Time
	c     chan time.Time
	done  bool
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), created: make(chan time.Duration, 1000)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	t := &fakeTimer{clock: c, when: c.now.Add(d), c: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	c.created <- d
	return t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		if !t.done && !t.when.After(c.now) {
			t.done = true
			t.c <- c.now
		}
	}
}

func (c *fakeClock) nextTimer(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-c.created:
		return d
	case <-time.After(20 * time.Second):
		t.Fatal("no timer created within 20s")
		return 0
	}
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}
