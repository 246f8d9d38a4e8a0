package upstream

import (
	"strings"
	"testing"
	"time"
)

func TestBackoffSequence(t *testing.T) {
	s := newBackoffState(Backoff{}, func() float64 { return 0.5 }) // no jitter
	want := []time.Duration{10, 20, 40, 80, 160, 300, 300, 300}
	for n, w := range want {
		if got := s.next(time.Minute); got != w*time.Second {
			t.Errorf("restart %d: delay %v, want %v", n, got, w*time.Second)
		}
	}
	if got := s.next(9*time.Minute + 59*time.Second); got != 5*time.Minute {
		t.Errorf("after a session healthy just under 10 min: %v, want the cap", got)
	}
	if got := s.next(10 * time.Minute); got != 10*time.Second {
		t.Errorf("after a session healthy 10 min: %v, want a reset to 10s", got)
	}
	if got := s.next(0); got != 20*time.Second {
		t.Errorf("after the reset: %v, want 20s", got)
	}
}

func TestBackoffJitterBounds(t *testing.T) {
	b := Backoff{}
	for attempt, base := range []time.Duration{10 * time.Second, 20 * time.Second, 5 * time.Minute} {
		if attempt == 2 {
			attempt = 10
		}
		lo, hi := b.Delay(attempt, 0), b.Delay(attempt, 0.999999)
		if lo != time.Duration(float64(base)*0.8) {
			t.Errorf("attempt %d: lowest delay %v, want %v", attempt, lo, time.Duration(float64(base)*0.8))
		}
		if hi <= time.Duration(float64(base)*1.19) || hi > time.Duration(float64(base)*1.2) {
			t.Errorf("attempt %d: highest delay %v, want just under %v", attempt, hi, time.Duration(float64(base)*1.2))
		}
	}
	// The real random source stays within ±20 %.
	s := newBackoffState(Backoff{}, nil)
	for range 1000 {
		s.reset()
		if d := s.next(0); d < 8*time.Second || d > 12*time.Second {
			t.Fatalf("jittered first delay %v outside [8s, 12s]", d)
		}
	}
}

// TestG2NoHotLoop drives a child that dies at once through the fake clock:
// one start per backoff window, the delays doubling.
func TestG2NoHotLoop(t *testing.T) {
	sh := shell(t)
	clock := newFakeClock()
	l := newRecordingLauncher()
	inst := NewInstance(Config{
		Name: "crasher", Command: sh, Args: []string{"-c", "echo boom >&2; exit 3"},
	}, &Options{Launcher: l, Clock: clock, RandFunc: func() float64 { return 0.5 }})
	inst.Start()
	defer closeInstance(t, inst)

	l.next(t)
	for _, want := range []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second} {
		if d := clock.nextTimer(t); d != want {
			t.Fatalf("backoff timer %v, want %v", d, want)
		}
		st := inst.Status()
		if st.State != StateError {
			t.Fatalf("state while backing off = %s, want error", st.State)
		}
		clock.Advance(want - time.Millisecond)
		if n := len(l.launched); n != 0 {
			t.Fatalf("%d starts before the backoff window ended", n)
		}
		clock.Advance(time.Millisecond)
		l.next(t)
		if n := len(l.launched); n != 0 {
			t.Fatalf("%d extra starts in one backoff window", n)
		}
	}
	st := waitStatus(t, inst, 10*time.Second, func(s Status) bool { return s.State == StateError })
	for _, want := range []string{"exit status 3", "boom"} {
		if !strings.Contains(st.LastError, want) {
			t.Errorf("LastError %q does not mention %q", st.LastError, want)
		}
	}
	if st.Starts != 0 {
		t.Errorf("Starts = %d for a child that never initialized", st.Starts)
	}
}
