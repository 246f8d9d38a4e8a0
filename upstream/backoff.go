package upstream

import (
	"math/rand/v2"
	"time"
)

// Clock is the time source of restart backoff and idle stops, so tests can
// drive them without waiting.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer that Clock users need.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// SystemClock is the real clock.
var SystemClock Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time { return t.t.C }
func (t systemTimer) Stop() bool          { return t.t.Stop() }

// Backoff is the restart policy after a failed start or a dead session:
// Initial, doubling up to Max, back to Initial once a session stayed healthy
// for ResetAfter, each delay moved by up to ±Jitter of itself. Zero fields
// take the defaults (10 s, 5 min, 10 min, 0.2), as Kubernetes' CrashLoopBackOff.
type Backoff struct {
	Initial    time.Duration
	Max        time.Duration
	ResetAfter time.Duration
	Jitter     float64
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = 10 * time.Second
	}
	if b.Max <= 0 {
		b.Max = 5 * time.Minute
	}
	if b.Max < b.Initial {
		b.Max = b.Initial
	}
	if b.ResetAfter <= 0 {
		b.ResetAfter = 10 * time.Minute
	}
	if b.Jitter <= 0 || b.Jitter >= 1 {
		b.Jitter = 0.2
	}
	return b
}

// Delay returns the wait before restart number attempt (0 for the first
// restart). u in [0, 1) picks the jitter: 0.5 is none, 0 is -Jitter, 1 is +Jitter.
func (b Backoff) Delay(attempt int, u float64) time.Duration {
	b = b.withDefaults()
	d := b.Initial
	for i := 0; i < attempt && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	return time.Duration(float64(d) * (1 + b.Jitter*(2*u-1)))
}

// backoffState tracks one instance's position in its Backoff sequence.
type backoffState struct {
	policy  Backoff
	attempt int
	rand    func() float64
}

func newBackoffState(p Backoff, randFunc func() float64) *backoffState {
	if randFunc == nil {
		randFunc = rand.Float64
	}
	return &backoffState{policy: p.withDefaults(), rand: randFunc}
}

// next returns the delay before the next start, given how long the session
// that just ended was healthy (0 when it never became ready).
func (s *backoffState) next(healthy time.Duration) time.Duration {
	if healthy >= s.policy.ResetAfter {
		s.attempt = 0
	}
	d := s.policy.Delay(s.attempt, s.rand())
	s.attempt++
	return d
}

func (s *backoffState) reset() { s.attempt = 0 }
