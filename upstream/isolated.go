package upstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/mcpgate/mcpgate/docker"
	"github.com/mcpgate/mcpgate/sandbox"
)

// IsolatingLauncher starts each child the way its resolved isolation mode
// says: a plain process group ("none"), the Landlock re-exec wrapper
// ("sandbox"), or a container ("docker"). The resolution itself (package
// isolation) happens before: Spec.Isolation.Mode is its outcome.
type IsolatingLauncher struct {
	// None starts unconfined children.
	None *ProcessLauncher
	// Self is the mcpgate executable that holds the __sandbox_exec wrapper.
	Self string
	// DataDir holds sandboxes/<server>/; its gateway/ part is never granted.
	DataDir string
	// SandboxUID and SandboxGID are who sandboxed children run as; 0 keeps
	// the gateway's uid.
	SandboxUID, SandboxGID uint32
	// FailClosed refuses to run a sandboxed child where Landlock is missing
	// or below MinABI; otherwise it runs degraded (rlimits only).
	FailClosed bool
	MinABI     int
	// NoFile is RLIMIT_NOFILE of sandboxed children; 0 keeps the sandbox's default.
	NoFile uint64
	// Docker runs container children; nil means docker mode is unavailable.
	Docker *docker.Runner
	// DockerSettings returns the current image policy and pull permission.
	DockerSettings func() (docker.ImagePolicy, bool)
}

// ErrModeUnavailable means the host cannot provide the isolation asked for.
var ErrModeUnavailable = errors.New("isolation mode unavailable on this host")

// Launch implements Launcher.
func (l *IsolatingLauncher) Launch(ctx context.Context, spec Spec) (Child, error) {
	switch spec.Isolation.Mode {
	case "", "none":
		return l.None.Launch(ctx, spec)
	case "sandbox":
		return l.launchSandbox(spec)
	case "docker":
		return l.launchDocker(ctx, spec)
	}
	return nil, fmt.Errorf("%w: unknown mode %q", ErrModeUnavailable, spec.Isolation.Mode)
}

func (l *IsolatingLauncher) launchSandbox(spec Spec) (Child, error) {
	dirs, err := sandbox.PrepareOwned(l.DataDir, spec.Server, l.SandboxUID, l.SandboxGID)
	if err != nil {
		return nil, err
	}
	p := sandbox.ServerPolicy(l.DataDir, dirs, spec.Env)
	p.NetworkNone = spec.Isolation.NetworkMode != "bridge"
	p.FailClosed = l.FailClosed
	if l.MinABI > 0 {
		p.MinABI = l.MinABI
	}
	p.UID, p.GID = l.SandboxUID, l.SandboxGID
	if l.NoFile > 0 {
		p.NoFile = l.NoFile
	}
	if spec.Isolation.MemoryLimit != "" {
		n, err := ParseBytes(spec.Isolation.MemoryLimit)
		if err != nil {
			return nil, err
		}
		p.DataLimit = uint64(n)
	}
	if spec.Dir != "" {
		// A configured working dir is read-only to the child; it writes in
		// its own dirs.
		p.Dir = spec.Dir
	}
	cmd, err := sandbox.Command(l.Self, p, append([]string{spec.Command}, spec.Args...))
	if err != nil {
		return nil, err
	}
	policy := cmd.ExtraFiles[0]
	defer policy.Close() // the child has its own copy once started
	return StartCmd(cmd, spec.Stderr, nil)
}

func (l *IsolatingLauncher) launchDocker(ctx context.Context, spec Spec) (Child, error) {
	if l.Docker == nil {
		return nil, fmt.Errorf("%w: no Docker engine", ErrModeUnavailable)
	}
	var (
		policy    docker.ImagePolicy
		allowPull bool
	)
	if l.DockerSettings != nil {
		policy, allowPull = l.DockerSettings()
	}
	ds := docker.Spec{
		Server:      spec.Server,
		Image:       docker.ChooseImage(spec.Isolation.Image, spec.Command, spec.Args, policy),
		Argv:        append([]string{spec.Command}, spec.Args...),
		Env:         spec.Env,
		WorkDir:     spec.Dir,
		NetworkMode: spec.Isolation.NetworkMode,
		ExtraArgs:   spec.Isolation.ExtraArgs,
		Stderr:      spec.Stderr,
		AllowPull:   allowPull,
	}
	if spec.Isolation.MemoryLimit != "" {
		n, err := ParseBytes(spec.Isolation.MemoryLimit)
		if err != nil {
			return nil, err
		}
		ds.MemoryBytes = n
	}
	if spec.Isolation.CPULimit != "" {
		f, err := strconv.ParseFloat(spec.Isolation.CPULimit, 64)
		if err != nil {
			return nil, fmt.Errorf("cpu limit %q: %w", spec.Isolation.CPULimit, err)
		}
		ds.CPUs = f
	}
	c, err := l.Docker.Start(ctx, ds)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// ParseBytes reads "512m", "1g", "65536" or "64k".
func ParseBytes(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("empty memory limit")
	}
	mult := int64(1)
	switch strings.ToLower(s[len(s)-1:]) {
	case "k":
		mult = 1 << 10
	case "m":
		mult = 1 << 20
	case "g":
		mult = 1 << 30
	}
	num := s
	if mult > 1 {
		num = s[:len(s)-1]
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("memory limit %q is not a size such as 512m", s)
	}
	return n * mult, nil
}
