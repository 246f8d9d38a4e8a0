package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Child is one running stdio MCP server, however it was started (a plain
// process, a sandboxed process, a container).
type Child interface {
	// Stdin carries JSON-RPC to the child; Close gives the child EOF.
	Stdin() io.WriteCloser
	// Stdout carries JSON-RPC from the child.
	Stdout() io.Reader
	// Wait returns once the child has exited, with its exit status.
	Wait() error
	// Stop closes stdin, waits a grace period, sends SIGTERM to the whole
	// process group, waits again, then sends SIGKILL. It is idempotent and
	// returns when nothing of the child remains.
	Stop(ctx context.Context) error
}

// Launcher starts stdio children. The core picks one per isolation mode.
type Launcher interface {
	Launch(ctx context.Context, spec Spec) (Child, error)
}

// Spec is what a launcher needs to start one stdio server.
type Spec struct {
	Server  string            // the server's name, for labels and messages
	Command string            // the program; resolved against the child's PATH
	Args    []string          // arguments after the program
	Env     map[string]string // the server's configured environment, secrets included
	Dir     string            // working directory; empty keeps the launcher's default
	// Stderr receives the child's stderr. It should never block (see LogRing);
	// nil discards it.
	Stderr io.Writer
	// Isolation is filled in by the core after resolving the server's mode;
	// each launcher reads the fields it acts on.
	Isolation Isolation
}

// Isolation carries the resolved isolation mode and its per-server knobs.
type Isolation struct {
	Mode        string // "none", "sandbox" or "docker"
	Image       string
	NetworkMode string
	MemoryLimit string
	CPULimit    string
	ExtraArgs   map[string]any
}

// ProcessLauncher starts children as plain processes in their own process
// group: the "none" isolation mode. The child's environment is only the
// server's configured env plus PATH, HOME, TMPDIR and LANG, so none of the
// gateway's own variables (database URL, admin token) reach it.
type ProcessLauncher struct {
	Path    string // PATH for children; default: the gateway's PATH, else a system default
	Home    string // HOME for children; default: the gateway's HOME
	TempDir string // TMPDIR for children; default: os.TempDir()
	Lang    string // LANG for children; default: the gateway's LANG, else C.UTF-8
	// Grace is how long Stop waits after closing stdin and again after
	// SIGTERM; zero means DefaultGrace.
	Grace time.Duration
}

// DefaultGrace is the wait between the steps of Child.Stop.
const DefaultGrace = 3 * time.Second

// Launch starts spec as a plain process.
func (l *ProcessLauncher) Launch(ctx context.Context, spec Spec) (Child, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if spec.Command == "" {
		return nil, errors.New("starting child: no command")
	}
	env := l.baseEnv()
	for k, v := range spec.Env {
		env[k] = v
	}
	prog, err := lookPath(spec.Command, env["PATH"])
	if err != nil {
		return nil, fmt.Errorf("starting child: %w", err)
	}
	cmd := exec.Command(prog, spec.Args...)
	cmd.Args[0] = spec.Command
	cmd.Env = make([]string, 0, len(env))
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Dir = spec.Dir
	return StartCmd(cmd, spec.Stderr, &ProcessOptions{Grace: l.Grace})
}

func (l *ProcessLauncher) baseEnv() map[string]string {
	or := func(v, fallback string) string {
		if v != "" {
			return v
		}
		return fallback
	}
	return map[string]string{
		"PATH":   or(l.Path, or(os.Getenv("PATH"), "/usr/local/bin:/usr/bin:/bin")),
		"HOME":   or(l.Home, or(os.Getenv("HOME"), "/")),
		"TMPDIR": or(l.TempDir, os.TempDir()),
		"LANG":   or(l.Lang, or(os.Getenv("LANG"), "C.UTF-8")),
	}
}

// lookPath resolves file against the child's PATH rather than the gateway's,
// which exec.Command would use.
func lookPath(file, path string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH %q", file, path)
}

// ProcessOptions tunes StartCmd. A nil *ProcessOptions means the defaults.
type ProcessOptions struct {
	Grace time.Duration // see ProcessLauncher.Grace
}

// StartCmd starts an unstarted cmd built elsewhere (for example the sandbox's
// re-exec wrapper) as a Child: in its own process group, with a parent-death
// signal, stdin and stdout as pipes, and stderr copied to stderr. It sets
// cmd.Stdin, Stdout, Stderr and the process-group fields of SysProcAttr and
// leaves the rest (Env, Dir, Credential) as the caller built it.
func StartCmd(cmd *exec.Cmd, stderr io.Writer, opts *ProcessOptions) (Child, error) {
	grace := DefaultGrace
	if opts != nil && opts.Grace > 0 {
		grace = opts.Grace
	}
	if stderr == nil {
		stderr = io.Discard
	}
	// Our own pipes rather than cmd.StdoutPipe: cmd.Wait then neither closes
	// the read end under the MCP reader nor waits for grandchildren that keep
	// a copy of stderr open.
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	pipe := func() (*os.File, *os.File, error) {
		r, w, err := os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	inR, inW, err := pipe()
	if err != nil {
		return nil, fmt.Errorf("starting child: %w", err)
	}
	outR, outW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("starting child: %w", err)
	}
	errR, errW, err := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("starting child: %w", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if !cmd.SysProcAttr.Setsid {
		cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Pgid = true, 0
	}
	if cmd.SysProcAttr.Pdeathsig == 0 {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}

	c := &processChild{
		stdin:  inW,
		stdout: outR,
		grace:  grace,
		done:   make(chan struct{}),
		errEOF: make(chan struct{}),
	}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal fires when the thread that forked the child
		// exits, so that thread stays ours until the child is gone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		c.pid = cmd.Process.Pid
		started <- nil
		c.waitErr = cmd.Wait()
		// Let the last stderr lines land first: they usually say why the
		// child exited. A grandchild holding stderr open must not delay
		// Wait for long.
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-c.errEOF:
		case <-t.C:
		}
		t.Stop()
		close(c.done)
	}()
	if err := <-started; err != nil {
		closeAll()
		return nil, fmt.Errorf("starting child: %w", err)
	}
	inR.Close()
	outW.Close()
	errW.Close()
	go func() {
		defer close(c.errEOF)
		defer errR.Close()
		io.Copy(stderr, errR)
	}()
	return c, nil
}

type processChild struct {
	pid    int // also the process group id
	stdin  *os.File
	stdout *os.File
	grace  time.Duration

	done    chan struct{} // closed once the leader is reaped
	waitErr error
	errEOF  chan struct{} // closed when every holder of stderr is gone

	stopOnce sync.Once
	stopErr  error
}

func (c *processChild) Stdin() io.WriteCloser { return c.stdin }
func (c *processChild) Stdout() io.Reader     { return c.stdout }

// Pid returns the child's pid, which is also its process group id.
func (c *processChild) Pid() int { return c.pid }

func (c *processChild) Wait() error {
	<-c.done
	return c.waitErr
}

func (c *processChild) Stop(ctx context.Context) error {
	c.stopOnce.Do(func() { c.stopErr = c.stop(ctx) })
	return c.stopErr
}

func (c *processChild) stop(ctx context.Context) error {
	defer c.stdout.Close()
	c.stdin.Close()
	var ctxErr error
	wait := func(d time.Duration, gone func() bool) bool {
		if gone() {
			return true
		}
		if ctxErr != nil {
			return false
		}
		t := time.NewTimer(d)
		defer t.Stop()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		done := c.done
		for {
			select {
			case <-done:
				done = nil // closed: stop selecting it, or the loop spins
			case <-tick.C:
			case <-t.C:
				return gone()
			case <-ctx.Done():
				ctxErr = ctx.Err()
				return gone()
			}
			if gone() {
				return true
			}
		}
	}
	leaderGone := c.leaderReaped
	// Once the leader is reaped its pid stays reserved only while members of
	// its group live, so the group is re-checked before every signal.
	allGone := func() bool { return leaderGone() && !c.groupAlive() }

	// Zombies of the group that this process adopted are reaped last, once
	// nothing of the group runs any more.
	defer c.reapGroup()
	if wait(c.grace, leaderGone) && !c.groupAlive() {
		return nil
	}
	c.signalGroup(syscall.SIGTERM)
	if !wait(c.grace, allGone) {
		c.signalGroup(syscall.SIGKILL)
		// SIGKILL cannot be ignored; what is left is the kernel tearing the
		// processes down, which ctx does not get to cut short.
		<-c.done
		for !allGone() {
			c.signalGroup(syscall.SIGKILL)
			t := time.NewTimer(10 * time.Millisecond)
			<-t.C
		}
	}
	if ctxErr != nil {
		return fmt.Errorf("stopping child: %w", ctxErr)
	}
	return nil
}

func (c *processChild) signalGroup(sig syscall.Signal) {
	if !c.groupAlive() && c.leaderReaped() {
		return
	}
	_ = syscall.Kill(-c.pid, sig)
}

func (c *processChild) leaderReaped() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// groupAlive reports whether any process of the child's group still runs.
// Zombies do not count; grandchildren this process adopted (see
// BecomeSubreaper) are reaped on the way, but never the leader, whose status
// belongs to cmd.Wait.
func (c *processChild) groupAlive() bool {
	c.reapGroup()
	procs, _ := GroupProcesses(c.pid)
	for _, p := range procs {
		if p.State != "Z" {
			return true
		}
	}
	return false
}

func (c *processChild) reapGroup() {
	if !c.leaderReaped() {
		return
	}
	for {
		pid, err := unix.Wait4(-c.pid, nil, unix.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}

// GroupProcess is one entry of /proc that belongs to a process group.
type GroupProcess struct {
	Pid   int
	State string // the state letter of /proc/PID/stat; "Z" is a zombie
	Comm  string
}

// GroupProcesses lists the processes in /proc whose process group is pgid,
// zombies included.
func GroupProcesses(pgid int) ([]GroupProcess, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	var out []GroupProcess
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		// comm may hold spaces and parentheses; the fields after the last
		// ')' are fixed: state, ppid, pgrp, ...
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if len(fields) < 3 {
			continue
		}
		if pg, err := strconv.Atoi(fields[2]); err == nil && pg == pgid {
			out = append(out, GroupProcess{Pid: pid, State: fields[0], Comm: s[open+1 : end]})
		}
	}
	return out, nil
}

// BecomeSubreaper makes this process adopt its orphaned descendants, so that
// a child's grandchildren (npx → node) are reaped by Child.Stop instead of
// staying zombies under an init that does not reap. The gateway's main calls
// it once at start.
func BecomeSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("becoming subreaper: %w", err)
	}
	return nil
}
