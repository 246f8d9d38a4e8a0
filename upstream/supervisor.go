package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"sort"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var (
	// ErrNotFound is returned for a key that is not in the desired set.
	ErrNotFound = errors.New("no such upstream")
	// ErrOwnerLimit is returned when starting an instance would exceed its
	// owner's cap on live instances and none of them is idle.
	ErrOwnerLimit = errors.New("too many running servers for this owner")
)

// Desired is one upstream the core wants: its Config plus how the supervisor
// runs it.
type Desired struct {
	Key   string // unique; the core's choice (server name, or name and user)
	Owner string // counted against MaxLivePerOwner; "" for shared servers, which have no cap
	// Lazy instances start on first use and stop after IdleTimeout without
	// calls; the others start at once and run until removed.
	Lazy   bool
	Config Config
}

// SupervisorOptions configures a Supervisor. Launcher, Clock, Logger,
// HTTPTransport, RandFunc and ClientVersion are passed to every instance (see
// Options).
type SupervisorOptions struct {
	Launcher        Launcher
	Clock           Clock
	Logger          *slog.Logger
	HTTPTransport   http.RoundTripper
	RandFunc        func() float64
	ClientVersion   string
	IdleTimeout     time.Duration // for lazy instances; default 10 min
	MaxLivePerOwner int           // live instances per non-empty owner; 0: no cap
	// OnToolsChanged is Options.OnToolsChanged with the instance's key.
	OnToolsChanged func(key string, tools []*mcp.Tool)
}

// Supervisor runs a set of instances keyed by string, reconciled against the
// set the core wants.
type Supervisor struct {
	opts SupervisorOptions

	mu      sync.Mutex
	entries map[string]*entry
	closed  bool
}

type entry struct {
	d        Desired
	inst     *Instance
	live     bool // started and not stopped by the supervisor
	inflight int
	lastUsed time.Time
	idleStop chan struct{} // closed to cancel the pending idle stop
}

// NewSupervisor returns an empty supervisor.
func NewSupervisor(opts *SupervisorOptions) *Supervisor {
	var o SupervisorOptions
	if opts != nil {
		o = *opts
	}
	if o.Clock == nil {
		o.Clock = SystemClock
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 10 * time.Minute
	}
	return &Supervisor{opts: o, entries: map[string]*entry{}}
}

func (s *Supervisor) newInstance(d Desired) *Instance {
	o := &Options{
		Launcher:      s.opts.Launcher,
		Clock:         s.opts.Clock,
		Logger:        s.opts.Logger.With("key", d.Key),
		HTTPTransport: s.opts.HTTPTransport,
		RandFunc:      s.opts.RandFunc,
		ClientVersion: s.opts.ClientVersion,
	}
	if f := s.opts.OnToolsChanged; f != nil {
		key := d.Key
		o.OnToolsChanged = func(tools []*mcp.Tool) { f(key, tools) }
	}
	return NewInstance(d.Config, o)
}

// Reconcile makes the running set match desired: new keys are created (and
// started unless lazy), removed keys are stopped, and keys whose Desired
// changed are stopped and replaced. Unchanged instances are left alone.
func (s *Supervisor) Reconcile(ctx context.Context, desired []Desired) error {
	want := make(map[string]Desired, len(desired))
	for _, d := range desired {
		if d.Key == "" {
			return errors.New("reconciling: empty key")
		}
		if _, dup := want[d.Key]; dup {
			return fmt.Errorf("reconciling: duplicate key %q", d.Key)
		}
		want[d.Key] = d
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("reconciling: %w", ErrStopped)
	}
	var stop, start []*Instance
	for key, e := range s.entries {
		if _, ok := want[key]; !ok {
			delete(s.entries, key)
			s.cancelIdle(e)
			stop = append(stop, e.inst)
		}
	}
	for _, d := range desired {
		e := s.entries[d.Key]
		if e != nil && sameDesired(e.d, d) {
			continue
		}
		if e != nil {
			s.cancelIdle(e)
			stop = append(stop, e.inst)
		}
		ne := &entry{d: d, inst: s.newInstance(d)}
		if !d.Lazy {
			ne.live = true
			start = append(start, ne.inst)
		}
		s.entries[d.Key] = ne
	}
	s.mu.Unlock()

	// Old instances go first, so a changed server never runs twice at once.
	err := closeAll(ctx, stop)
	for _, inst := range start {
		inst.Start()
	}
	if err != nil {
		return fmt.Errorf("reconciling: %w", err)
	}
	return nil
}

func closeAll(ctx context.Context, insts []*Instance) error {
	errs := make([]error, len(insts))
	var wg sync.WaitGroup
	for n, inst := range insts {
		wg.Go(func() { errs[n] = inst.Close(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// sameDesired compares two Desired values, a nil map or slice equal to an
// empty one, so that a reload from the database does not restart anything.
func sameDesired(a, b Desired) bool {
	ja, errA := json.Marshal(normalized(a))
	jb, errB := json.Marshal(normalized(b))
	if errA != nil || errB != nil {
		return reflect.DeepEqual(a, b)
	}
	return string(ja) == string(jb)
}

func normalized(d Desired) Desired {
	c := &d.Config
	if len(c.Args) == 0 {
		c.Args = nil
	}
	if len(c.Env) == 0 {
		c.Env = nil
	}
	if len(c.Headers) == 0 {
		c.Headers = nil
	}
	if len(c.Isolation.ExtraArgs) == 0 {
		c.Isolation.ExtraArgs = nil
	}
	return d
}

// Instance returns the instance for key.
func (s *Supervisor) Instance(key string) (*Instance, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[key]
	if !ok {
		return nil, false
	}
	return e.inst, true
}

// Status returns the live status for key.
func (s *Supervisor) Status(key string) (Status, bool) {
	inst, ok := s.Instance(key)
	if !ok {
		return Status{}, false
	}
	return inst.Status(), true
}

// Keys returns the keys of the desired set, sorted.
func (s *Supervisor) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.entries))
	for k := range s.entries {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Acquire returns the instance for key, started if it was not, and a release
// func to call once the caller is done with it; a lazy instance's idle time
// counts from its last release. Starting an instance whose owner is at the
// cap stops the owner's least recently used idle lazy instance, or fails with
// ErrOwnerLimit when none is idle.
func (s *Supervisor) Acquire(ctx context.Context, key string) (*Instance, func(), error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, fmt.Errorf("upstream %q: %w", key, ErrStopped)
	}
	e, ok := s.entries[key]
	if !ok {
		s.mu.Unlock()
		return nil, nil, fmt.Errorf("upstream %q: %w", key, ErrNotFound)
	}
	var evict *entry
	start := !e.live
	if start && s.opts.MaxLivePerOwner > 0 && e.d.Owner != "" {
		live := 0
		for _, o := range s.entries {
			if o.live && o.d.Owner == e.d.Owner {
				live++
				if o.inflight == 0 && o.d.Lazy && (evict == nil || o.lastUsed.Before(evict.lastUsed)) {
					evict = o
				}
			}
		}
		if live < s.opts.MaxLivePerOwner {
			evict = nil
		} else if evict == nil {
			s.mu.Unlock()
			return nil, nil, fmt.Errorf("upstream %q: %w (%d running)", key, ErrOwnerLimit, live)
		} else {
			evict.live = false
			s.cancelIdle(evict)
		}
	}
	e.live = true
	e.inflight++
	e.lastUsed = s.opts.Clock.Now()
	s.cancelIdle(e)
	s.mu.Unlock()

	if evict != nil {
		s.opts.Logger.Info("stopping idle upstream for owner cap", "key", evict.d.Key, "owner", evict.d.Owner)
		if err := evict.inst.Close(ctx); err != nil {
			s.opts.Logger.Warn("stopping idle upstream", "key", evict.d.Key, "err", err)
		}
	}
	if start {
		e.inst.Start()
		// Reconcile or Close may have dropped the entry meanwhile, and
		// closed its instance before this Start: close it again.
		s.mu.Lock()
		stale := s.closed || s.entries[key] != e
		s.mu.Unlock()
		if stale {
			s.release(e)
			if err := e.inst.Close(ctx); err != nil {
				s.opts.Logger.Warn("stopping a dropped upstream", "key", key, "err", err)
			}
			return nil, nil, fmt.Errorf("upstream %q: %w", key, ErrStopped)
		}
	}
	var once sync.Once
	return e.inst, func() { once.Do(func() { s.release(e) }) }, nil
}

func (s *Supervisor) release(e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.inflight--
	e.lastUsed = s.opts.Clock.Now()
	if e.inflight > 0 || !e.d.Lazy || !e.live || s.closed || s.entries[e.d.Key] != e {
		return
	}
	stop := make(chan struct{})
	e.idleStop = stop
	t := s.opts.Clock.NewTimer(s.opts.IdleTimeout)
	go func() {
		select {
		case <-t.C():
			s.idleExpired(e, stop)
		case <-stop:
			t.Stop()
		}
	}()
}

func (s *Supervisor) idleExpired(e *entry, stop chan struct{}) {
	s.mu.Lock()
	if e.idleStop != stop || e.inflight > 0 || !e.live || s.entries[e.d.Key] != e {
		s.mu.Unlock()
		return
	}
	e.live, e.idleStop = false, nil
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), e.inst.Config().StopTimeout)
	defer cancel()
	s.opts.Logger.Info("stopping idle upstream", "key", e.d.Key)
	if err := e.inst.Close(ctx); err != nil {
		s.opts.Logger.Warn("stopping idle upstream", "key", e.d.Key, "err", err)
	}
}

func (s *Supervisor) cancelIdle(e *entry) {
	if e.idleStop != nil {
		close(e.idleStop)
		e.idleStop = nil
	}
}

// Call calls tool on the instance for key, starting it if needed.
func (s *Supervisor) Call(ctx context.Context, key, tool string, args json.RawMessage) (*mcp.CallToolResult, error) {
	inst, release, err := s.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	defer release()
	return inst.Call(ctx, tool, args)
}

// Restart restarts the instance for key now, starting it if it was stopped.
func (s *Supervisor) Restart(ctx context.Context, key string) error {
	s.mu.Lock()
	e := s.entries[key]
	wasLive := e != nil && e.live
	s.mu.Unlock()
	inst, release, err := s.Acquire(ctx, key)
	if err != nil {
		return err
	}
	defer release()
	if !wasLive {
		return inst.WaitReady(ctx) // just started: a second start would be waste
	}
	return inst.Restart(ctx)
}

// Close stops every instance; the supervisor accepts nothing afterwards.
func (s *Supervisor) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	insts := make([]*Instance, 0, len(s.entries))
	for _, e := range s.entries {
		s.cancelIdle(e)
		e.live = false
		insts = append(insts, e.inst)
	}
	s.mu.Unlock()
	return closeAll(ctx, insts)
}
