package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func echoDesired(t *testing.T, key, owner string, lazy bool) Desired {
	return Desired{Key: key, Owner: owner, Lazy: lazy, Config: Config{Name: key, Command: mcpecho(t)}}
}

func closeSupervisor(t *testing.T, s *Supervisor) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Errorf("closing supervisor: %v", err)
	}
}

func TestSupervisorReconcile(t *testing.T) {
	l := newRecordingLauncher()
	var mu sync.Mutex
	toolsByKey := map[string]int{}
	s := NewSupervisor(&SupervisorOptions{Launcher: l, OnToolsChanged: func(key string, tools []*mcp.Tool) {
		mu.Lock()
		toolsByKey[key] = len(tools)
		mu.Unlock()
	}})
	defer closeSupervisor(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	a, b := echoDesired(t, "a", "", false), echoDesired(t, "b", "", false)
	if err := s.Reconcile(ctx, []Desired{a, b}); err != nil {
		t.Fatal(err)
	}
	pids := map[int]bool{pidOf(t, l.next(t)): true, pidOf(t, l.next(t)): true}
	instA, _ := s.Instance("a")
	instB, _ := s.Instance("b")
	for _, inst := range []*Instance{instA, instB} {
		if err := inst.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Keys(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Keys = %v", got)
	}
	mu.Lock()
	if toolsByKey["a"] != 4 || toolsByKey["b"] != 4 {
		t.Errorf("OnToolsChanged by key: %v", toolsByKey)
	}
	mu.Unlock()

	// The same set again, with nil and empty maps swapped: nothing restarts.
	a2 := a
	a2.Config.Env = map[string]string{}
	if err := s.Reconcile(ctx, []Desired{a2, b}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Instance("a"); got != instA || instA.Status().Starts != 1 {
		t.Error("an unchanged server was replaced")
	}

	// b changes, a goes away.
	b.Config.Env = map[string]string{"MCPECHO_DESCRIPTION_SUFFIX": " (v2)"}
	if err := s.Reconcile(ctx, []Desired{b}); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Instance("a"); ok {
		t.Error("a is still there after removal")
	}
	if instA.State() != StateStopped || instB.State() != StateStopped {
		t.Errorf("old instances: a %s, b %s; want both stopped", instA.State(), instB.State())
	}
	for pid := range pids {
		groupGone(t, pid)
	}
	newB, _ := s.Instance("b")
	if newB == instB {
		t.Fatal("a changed server kept its old instance")
	}
	l.next(t)
	if err := newB.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	var desc string
	for _, tl := range newB.Tools() {
		if tl.Name == "echo" {
			desc = tl.Description
		}
	}
	if desc != "Echo the given text back to the caller unchanged (v2)" {
		t.Errorf("the replaced instance runs the old config: echo description %q", desc)
	}
	if _, err := s.Call(ctx, "a", "echo", nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("call to a removed key: %v, want ErrNotFound", err)
	}
	if err := s.Reconcile(ctx, []Desired{b, b}); err == nil {
		t.Error("duplicate keys accepted")
	}
}

func TestSupervisorIdleStop(t *testing.T) {
	clock := newFakeClock()
	l := newRecordingLauncher()
	s := NewSupervisor(&SupervisorOptions{Launcher: l, Clock: clock, IdleTimeout: 5 * time.Minute})
	defer closeSupervisor(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.Reconcile(ctx, []Desired{echoDesired(t, "p", "alice", true)}); err != nil {
		t.Fatal(err)
	}
	inst, _ := s.Instance("p")
	if st := inst.State(); st != StateStopped {
		t.Fatalf("a lazy instance is %s before any call", st)
	}
	if len(l.launched) != 0 {
		t.Fatal("a lazy instance was launched by Reconcile")
	}

	res, err := s.Call(ctx, "p", "echo", json.RawMessage(`{"text":"wake up"}`))
	if err != nil || textOf(t, res) != "wake up" {
		t.Fatalf("first call: %v, %v", res, err)
	}
	pgid := pidOf(t, l.next(t))
	if d := clock.nextTimer(t); d != 5*time.Minute {
		t.Fatalf("idle timer %v, want 5m", d)
	}
	clock.Advance(4 * time.Minute)
	if inst.State() != StateReady {
		t.Fatal("stopped before the idle timeout")
	}
	// A call inside the window restarts the idle count.
	if _, err := s.Call(ctx, "p", "echo", json.RawMessage(`{"text":"again"}`)); err != nil {
		t.Fatal(err)
	}
	clock.nextTimer(t)
	clock.Advance(4 * time.Minute)
	if inst.State() != StateReady {
		t.Fatal("stopped 4 minutes after the last call")
	}
	clock.Advance(time.Minute)
	waitStatus(t, inst, 20*time.Second, func(st Status) bool { return st.State == StateStopped })
	eventually(t, 10*time.Second, "idle child's group gone", func() bool {
		procs, _ := GroupProcesses(pgid)
		return len(procs) == 0
	})

	if _, err := s.Call(ctx, "p", "echo", json.RawMessage(`{"text":"and again"}`)); err != nil {
		t.Fatalf("call after the idle stop: %v", err)
	}
	if st := inst.Status(); st.Starts != 2 {
		t.Errorf("Starts = %d after a lazy restart, want 2", st.Starts)
	}
}

func TestSupervisorOwnerCap(t *testing.T) {
	l := newRecordingLauncher()
	s := NewSupervisor(&SupervisorOptions{Launcher: l, MaxLivePerOwner: 2})
	defer closeSupervisor(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	desired := []Desired{
		echoDesired(t, "a", "alice", true), echoDesired(t, "b", "alice", true), echoDesired(t, "c", "alice", true),
		echoDesired(t, "bob1", "bob", true), echoDesired(t, "shared", "", false),
	}
	if err := s.Reconcile(ctx, desired); err != nil {
		t.Fatal(err)
	}
	acquire := func(key string) (*Instance, func()) {
		t.Helper()
		inst, release, err := s.Acquire(ctx, key)
		if err != nil {
			t.Fatalf("Acquire(%s): %v", key, err)
		}
		if err := inst.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		return inst, release
	}
	instA, releaseA := acquire("a") // held: busy
	instB, releaseB := acquire("b")
	releaseB() // idle
	instBob, releaseBob := acquire("bob1")
	defer releaseBob()

	// alice is at the cap: c evicts b, her idle one, and never a, which is busy.
	instC, releaseC := acquire("c")
	if instB.State() != StateStopped || instA.State() != StateReady || instC.State() != StateReady {
		t.Errorf("after c: a %s, b %s, c %s; want b evicted", instA.State(), instB.State(), instC.State())
	}
	if instBob.State() != StateReady {
		t.Error("another owner's instance was touched")
	}
	// Both busy now: b cannot start.
	if _, _, err := s.Acquire(ctx, "b"); !errors.Is(err, ErrOwnerLimit) {
		t.Fatalf("Acquire over the cap: %v, want ErrOwnerLimit", err)
	}
	// Shared servers have no owner and no cap.
	if res, err := s.Call(ctx, "shared", "echo", json.RawMessage(`{"text":"s"}`)); err != nil || textOf(t, res) != "s" {
		t.Errorf("shared call: %v, %v", res, err)
	}
	releaseA()
	releaseC()
	if _, err := s.Call(ctx, "b", "echo", json.RawMessage(`{"text":"b is back"}`)); err != nil {
		t.Errorf("b after a release: %v", err)
	}
	live := 0
	for _, k := range []string{"a", "b", "c"} {
		if st, _ := s.Status(k); st.State != StateStopped {
			live++
		}
	}
	if live != 2 {
		t.Errorf("%d of alice's instances live, cap 2", live)
	}
}

// TestSupervisorChurn races calls, reconciles and idle stops; afterwards no
// child of any of them survives Close.
func TestSupervisorChurn(t *testing.T) {
	l := newRecordingLauncher()
	l.launched = make(chan Child, 1000)
	s := NewSupervisor(&SupervisorOptions{Launcher: l, MaxLivePerOwner: 2, IdleTimeout: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	set := func(version string) []Desired {
		ds := []Desired{echoDesired(t, "a", "alice", true), echoDesired(t, "b", "alice", true), echoDesired(t, "c", "alice", true)}
		ds[2].Config.Env = map[string]string{"MCPECHO_DESCRIPTION_SUFFIX": version}
		return ds
	}
	if err := s.Reconcile(ctx, set("v0")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for n := range 15 {
				key := []string{"a", "b", "c"}[(g+n)%3]
				_, err := s.Call(ctx, key, "echo", json.RawMessage(`{"text":"churn"}`))
				if err != nil && !errors.Is(err, ErrOwnerLimit) && !errors.Is(err, ErrStopped) && !errors.Is(err, ErrUnavailable) {
					t.Errorf("call %s: %v", key, err)
				}
			}
		})
	}
	wg.Go(func() {
		for v := range 5 {
			if err := s.Reconcile(ctx, set(fmt.Sprint("v", v+1))); err != nil {
				t.Errorf("reconcile: %v", err)
			}
		}
	})
	wg.Wait()
	closeSupervisor(t, s)
	close(l.launched)
	n := 0
	for c := range l.launched {
		n++
		groupGone(t, pidOf(t, c))
	}
	t.Logf("%d children started and gone", n)
}
