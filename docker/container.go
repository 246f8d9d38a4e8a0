package docker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/pkg/jsonmessage"
	"github.com/docker/docker/pkg/stdcopy"
)

// Defaults applied when a Spec leaves a field zero.
const (
	DefaultUser          = "65534:65534" // nobody: a server never runs as root unless asked
	DefaultNetworkMode   = "none"
	DefaultTmpfsSize     = 64 << 20
	DefaultStopGrace     = 3 * time.Second
	DefaultServerDirPath = "/srv/mcp"
)

// Spec describes one stdio MCP server container.
type Spec struct {
	// Server is the server's name; it goes into the LabelServer label and
	// the container name.
	Server string
	// Image is the image reference, usually from ChooseImage.
	Image string
	// Entrypoint, when non-nil, replaces the image's entrypoint.
	Entrypoint []string
	// Argv is the command (after the entrypoint, if any); empty keeps the
	// image's CMD.
	Argv []string
	// Env is passed in the create request body, never on a command line,
	// so secrets do not show up in process listings of the host.
	Env map[string]string
	// WorkDir is the working directory inside the container; empty keeps
	// the image's, or uses the server dir's mount point when one is mounted.
	WorkDir string
	// NetworkMode is "none" when empty. "host" and "container:…" are
	// refused: both would put the child in a network namespace that reaches
	// the gateway's own loopback services.
	NetworkMode string
	// MemoryBytes limits memory (swap included); 0 means no limit.
	MemoryBytes int64
	// CPUs limits CPU time, in CPUs (1.5 = one and a half); 0 means no limit.
	CPUs float64
	// PidsLimit limits processes and threads; 0 means no limit.
	PidsLimit int64
	// User is "uid:gid" inside the container; empty means DefaultUser.
	User string
	// ServerDir, when set, is a host directory private to this server (for
	// example <data>/sandboxes/<id>), mounted read-write at ServerDirPath
	// (DefaultServerDirPath when empty). Nothing else of the host is mounted.
	ServerDir     string
	ServerDirPath string
	// ExtraArgs is the server's closed set of engine options; see
	// ValidateExtraArgs.
	ExtraArgs map[string]any
	// Stderr receives the child's stderr. It is written from the goroutine
	// that also feeds Stdout, so it must not block (a bounded ring buffer);
	// nil discards.
	Stderr io.Writer
	// AllowPull lets Start pull a missing image; otherwise a missing image
	// is ErrImageMissing.
	AllowPull bool
}

// Container is one running stdio child. Its methods match the gateway's
// launcher Child interface.
type Container struct {
	r     *Runner
	id    string
	grace time.Duration
	hj    types.HijackedResponse
	in    *attachStdin
	out   *io.PipeReader

	cancelWait context.CancelFunc
	exited     chan struct{} // closed when the engine reported the container removed, or the wait failed
	waitErr    error         // set before exited is closed
	copyDone   chan struct{}
}

// ExitError is Wait's error for a container that exited with a non-zero
// status.
type ExitError struct {
	Status  int64
	Message string // the engine's error text, if any
}

func (e *ExitError) Error() string {
	msg := fmt.Sprintf("container exited with status %d", e.Status)
	if e.Status == 137 {
		msg += " (killed or out of memory)"
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

var envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)

func (s *Spec) check() (extraArgs, error) {
	bad := func(format string, a ...any) (extraArgs, error) {
		return extraArgs{}, fmt.Errorf("%w: %s", ErrInvalidSpec, fmt.Sprintf(format, a...))
	}
	if s.Image == "" {
		return bad("no image")
	}
	for k := range s.Env {
		if !envKeyRE.MatchString(k) {
			return bad("environment variable name %q", k)
		}
	}
	mode := s.NetworkMode
	if mode == "host" || strings.HasPrefix(mode, "container:") || strings.HasPrefix(mode, "service:") {
		return bad("network mode %q shares another namespace and is not allowed", mode)
	}
	if s.ServerDir != "" && !path.IsAbs(s.ServerDir) {
		return bad("server dir %q is not absolute", s.ServerDir)
	}
	if p := s.ServerDirPath; p != "" && (!path.IsAbs(p) || path.Clean(p) != p || p == "/") {
		return bad("server dir mount point %q", p)
	}
	if s.MemoryBytes < 0 || s.PidsLimit < 0 || s.CPUs < 0 || math.IsNaN(s.CPUs) || math.IsInf(s.CPUs, 0) {
		return bad("negative resource limit")
	}
	return parseExtraArgs(s.ExtraArgs)
}

// configs turns a checked Spec into the engine's create request.
func (r *Runner) configs(s *Spec, x extraArgs) (*container.Config, *container.HostConfig) {
	env := make([]string, 0, len(s.Env))
	for k, v := range s.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	cfg := &container.Config{
		Image:        s.Image,
		Cmd:          s.Argv,
		Env:          env,
		WorkingDir:   s.WorkDir,
		User:         cmp.Or(s.User, DefaultUser),
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		OpenStdin:    true,
		// The engine closes the child's stdin when our attach goes away, so a
		// crashed gateway leaves no container behind.
		StdinOnce: true,
		Tty:       false, // a TTY would merge stderr into stdout and rewrite \n
		Labels: map[string]string{
			LabelManaged: "true",
			LabelReplica: r.replicaID,
			LabelServer:  s.Server,
		},
	}
	if s.Entrypoint != nil {
		cfg.Entrypoint = s.Entrypoint
	}
	initp := true
	hc := &container.HostConfig{
		AutoRemove:     true,
		NetworkMode:    container.NetworkMode(cmp.Or(s.NetworkMode, DefaultNetworkMode)),
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges:true"},
		ReadonlyRootfs: true,
		Tmpfs:          map[string]string{"/tmp": tmpOptions(DefaultTmpfsSize)},
		Init:           &initp,
		// stderr is read through the attach stream; a log driver would keep
		// a second copy on the engine's disk.
		LogConfig: container.LogConfig{Type: "none"},
	}
	if s.MemoryBytes > 0 {
		hc.Memory = s.MemoryBytes
		hc.MemorySwap = s.MemoryBytes // equal to Memory: no swap
	}
	if s.CPUs > 0 {
		hc.NanoCPUs = int64(math.Round(s.CPUs * 1e9))
	}
	if s.PidsLimit > 0 {
		n := s.PidsLimit
		hc.PidsLimit = &n
	}
	if s.ServerDir != "" {
		target := cmp.Or(s.ServerDirPath, DefaultServerDirPath)
		hc.Mounts = []mount.Mount{{Type: mount.TypeBind, Source: s.ServerDir, Target: target}}
		if cfg.WorkingDir == "" {
			cfg.WorkingDir = target
		}
	}
	x.apply(cfg, hc)
	return cfg, hc
}

// Start creates, attaches and starts a container for spec. It returns
// ErrUnavailable when the engine does not answer, ErrImageMissing when the
// image is absent and spec.AllowPull is false, and ErrInvalidSpec for a
// spec it refuses. On error nothing is left running.
func (r *Runner) Start(ctx context.Context, spec Spec) (*Container, error) {
	x, err := spec.check()
	if err != nil {
		return nil, err
	}
	if _, err := r.Probe(ctx); err != nil {
		return nil, fmt.Errorf("starting %s: %w", spec.Server, err)
	}
	if err := r.ensureImage(ctx, spec.Image, spec.AllowPull); err != nil {
		return nil, err
	}
	grace := DefaultStopGrace
	if x.stopGrace != "" {
		grace, _ = parseGrace(x.stopGrace) // checked by parseExtraArgs
	}
	cfg, hc := r.configs(&spec, x)

	created, err := r.cli.ContainerCreate(ctx, cfg, hc, &network.NetworkingConfig{}, nil, containerName(spec.Server))
	if err != nil {
		return nil, r.engineErr("creating container", err)
	}
	c := &Container{r: r, id: created.ID, grace: grace, exited: make(chan struct{}), copyDone: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			c.abort()
		}
	}()

	// Attach before start, or the child's first output is lost.
	c.hj, err = r.cli.ContainerAttach(ctx, c.id, container.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return nil, r.engineErr("attaching to container", err)
	}
	// Register the wait before start: a child that exits at once is removed
	// (AutoRemove) before a later wait could find it. "removed" rather than
	// "next-exit" so that Wait and Stop return only once the container no
	// longer exists; the exit status is reported either way.
	waitCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancelWait = cancel
	waitC, errC := r.cli.ContainerWait(waitCtx, c.id, container.WaitConditionRemoved)
	select {
	case err := <-errC: // the engine refused the wait outright
		return nil, r.engineErr("waiting for container", err)
	default:
	}

	if err := r.cli.ContainerStart(ctx, c.id, container.StartOptions{}); err != nil {
		return nil, r.engineErr("starting container", err)
	}
	ok = true

	go c.watch(waitC, errC)
	pr, pw := io.Pipe()
	c.out = pr
	c.in = &attachStdin{hj: c.hj}
	stderr := spec.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	go func() {
		defer close(c.copyDone)
		// hj.Reader, not hj.Conn: the bufio reader may already hold bytes.
		_, err := stdcopy.StdCopy(pw, stderr, c.hj.Reader)
		pw.CloseWithError(err) // nil: readers see io.EOF
		// The engine ends the stream only when the child's output is closed,
		// so the connection has nothing left to carry; without this a child
		// that exits on its own would hold it until Stop.
		c.hj.Close()
	}()
	return c, nil
}

func (c *Container) watch(waitC <-chan container.WaitResponse, errC <-chan error) {
	defer close(c.exited)
	defer c.cancelWait()
	select {
	case w := <-waitC:
		switch {
		case w.Error != nil && w.Error.Message != "":
			c.waitErr = &ExitError{Status: w.StatusCode, Message: w.Error.Message}
		case w.StatusCode != 0:
			c.waitErr = &ExitError{Status: w.StatusCode}
		}
	case err := <-errC:
		c.waitErr = fmt.Errorf("waiting for container %s: %w", shortID(c.id), err)
	}
}

// abort cleans up after a failed Start.
func (c *Container) abort() {
	if c.cancelWait != nil {
		c.cancelWait()
	}
	if c.hj.Conn != nil {
		c.hj.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.r.cli.ContainerRemove(ctx, c.id, container.RemoveOptions{Force: true})
}

// ID returns the engine's container id.
func (c *Container) ID() string { return c.id }

// Stdin returns the child's stdin. Close half-closes the attach connection:
// the child reads EOF while its stdout keeps flowing.
func (c *Container) Stdin() io.WriteCloser { return c.in }

// Stdout returns the child's stdout, demultiplexed from the attach stream.
// It ends with io.EOF when the child's output ends.
func (c *Container) Stdout() io.Reader { return c.out }

// Wait blocks until the container has exited and been removed. It returns
// nil for exit status 0, an *ExitError for another status, or an error when
// the engine stopped reporting on the container.
func (c *Container) Wait() error {
	<-c.exited
	return c.waitErr
}

// Exited is closed when Wait would return.
func (c *Container) Exited() <-chan struct{} { return c.exited }

// Stop ends the container: it closes stdin, gives the child the grace
// period to exit on EOF, then force-removes it. It returns once the
// container no longer exists, or with ctx's error. Calling it again, or
// after the child exited on its own, is fine.
func (c *Container) Stop(ctx context.Context) error {
	_ = c.in.Close()
	t := time.NewTimer(c.grace)
	defer t.Stop()
	select {
	case <-c.exited:
	case <-t.C:
	case <-ctx.Done():
	}
	if !c.gone() {
		err := c.r.cli.ContainerRemove(ctx, c.id, container.RemoveOptions{Force: true})
		if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
			return fmt.Errorf("stopping container %s: %w", shortID(c.id), c.r.engineErr("removing", err))
		}
		select {
		case <-c.exited:
		case <-ctx.Done():
			return fmt.Errorf("stopping container %s: %w", shortID(c.id), ctx.Err())
		}
		if !c.gone() {
			// The wait stream broke (engine restart?): ask the engine directly.
			if _, err := c.r.cli.ContainerInspect(ctx, c.id); !cerrdefs.IsNotFound(err) {
				if err == nil {
					err = errors.New("still exists")
				}
				return fmt.Errorf("stopping container %s: %w", shortID(c.id), err)
			}
		}
	}
	c.release()
	return nil
}

// gone reports whether the engine confirmed the container's removal.
func (c *Container) gone() bool {
	select {
	case <-c.exited:
		var ee *ExitError
		return c.waitErr == nil || errors.As(c.waitErr, &ee)
	default:
		return false
	}
}

// release frees the attach connection and unblocks the stdout copier even
// if nobody reads Stdout any more.
func (c *Container) release() {
	c.cancelWait()
	c.hj.Close()
	_ = c.out.CloseWithError(io.EOF)
	<-c.copyDone
}

// attachStdin writes to the attach connection; Close half-closes it.
type attachStdin struct {
	hj   types.HijackedResponse
	once sync.Once
	err  error
}

func (a *attachStdin) Write(p []byte) (int, error) { return a.hj.Conn.Write(p) }

func (a *attachStdin) Close() error {
	a.once.Do(func() { a.err = a.hj.CloseWrite() })
	return a.err
}

func (r *Runner) ensureImage(ctx context.Context, ref string, allowPull bool) error {
	_, err := r.cli.ImageInspect(ctx, ref)
	if err == nil {
		return nil
	}
	if !cerrdefs.IsNotFound(err) {
		return r.engineErr("inspecting image "+ref, err)
	}
	if !allowPull {
		return fmt.Errorf("%w: %s (pulling is not allowed; load or build it on the engine)", ErrImageMissing, ref)
	}
	rc, err := r.cli.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		return r.engineErr("pulling image "+ref, err)
	}
	defer rc.Close()
	// The pull completes only when the progress stream is read to the end,
	// and its errors arrive inside that stream.
	dec := json.NewDecoder(rc)
	for {
		var m jsonmessage.JSONMessage
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			return fmt.Errorf("pulling image %s: %w", ref, err)
		}
		if m.Error != nil {
			return fmt.Errorf("pulling image %s: %s", ref, m.Error.Message)
		}
	}
	if _, err := r.cli.ImageInspect(ctx, ref); err != nil {
		return fmt.Errorf("%w: %s (pull finished but the image is absent: %v)", ErrImageMissing, ref, err)
	}
	return nil
}

var nameUnsafe = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// containerName makes a readable, unique name: "mcpgate-<server>-<random>".
func containerName(server string) string {
	s := strings.Trim(nameUnsafe.ReplaceAllString(server, "-"), "-.")
	if len(s) > 40 {
		s = s[:40]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	if s == "" {
		return "mcpgate-" + hex.EncodeToString(b[:])
	}
	return "mcpgate-" + s + "-" + hex.EncodeToString(b[:])
}

func parseGrace(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > 5*time.Minute {
		return 0, fmt.Errorf("want a duration between 0s and 5m, got %q", s)
	}
	return d, nil
}
