package sandbox_test

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestProcessGroupKill is RELIABILITY-TESTS G4: the wrapper execs in place,
// so the server leads its own process group and kill(-pgid) reaches the
// grandchildren it spawned; afterwards nothing of the group is left in
// /proc. The test process becomes a child subreaper so that it, like the
// gateway's init would, reaps the orphaned grandchildren.
func TestProcessGroupKill(t *testing.T) {
	w := newWorld(t)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })

	cmd := sandboxed(t, w.policy(w.alpha, nobody), "/bin/sh", "-c", "sleep 1000 & sleep 1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmd.ExtraFiles[0].Close()
	pid := cmd.Process.Pid

	var members []int
	waitFor(t, 10*time.Second, "two sleeps in the child's process group", func() bool {
		members = group(pid)
		sleeps := 0
		for _, m := range members {
			if comm(m) == "sleep" {
				sleeps++
			}
		}
		return sleeps == 2
	})
	t.Logf("group %d before the kill: %v", pid, members)

	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	for _, m := range members {
		if m != pid {
			// Orphans were reparented to us; reap them so /proc forgets them.
			var ws syscall.WaitStatus
			syscall.Wait4(m, &ws, 0, nil)
		}
	}
	waitFor(t, 10*time.Second, "an empty process group", func() bool { return len(group(pid)) == 0 })
}

// group lists the processes in /proc whose process group is pgid.
func group(pgid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err == nil && g == pgid {
			out = append(out, pid)
		}
	}
	return out
}

func comm(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b))
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		<-tick.C
	}
}
