// Package docker runs stdio MCP servers as containers through the Docker
// Engine API. It never shells out to the docker CLI: the gateway talks to
// the engine named by DOCKER_HOST (or the default socket) with API version
// negotiation, so an old engine (API 1.41) and a new one both work.
//
// Every container it starts is hardened (no capabilities, no-new-privileges,
// read-only root, no network unless asked, a non-root user, tini as PID 1),
// labelled with the gateway replica and the server name, attached before it
// starts and removed when it exits. The gateway's data directory is never
// mounted; only a per-server directory may be, when the Spec asks for it.
package docker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
)

// Labels set on every container the runner creates.
const (
	LabelManaged = "io.mcpgate.managed"
	LabelReplica = "io.mcpgate.replica"
	LabelServer  = "io.mcpgate.server"
)

// ProbeTimeout bounds one availability probe, so a hung engine cannot stall
// the gateway's start or a server's start.
const ProbeTimeout = 2 * time.Second

var (
	// ErrUnavailable means the engine did not answer (no socket, refused,
	// or no reply within ProbeTimeout).
	ErrUnavailable = errors.New("docker engine unavailable")
	// ErrImageMissing means the image is not present on the engine and the
	// spec does not allow pulling it.
	ErrImageMissing = errors.New("image not present")
	// ErrInvalidSpec means a Spec or its extra args were refused before
	// anything was sent to the engine.
	ErrInvalidSpec = errors.New("invalid container spec")
)

// Options tunes a Runner. The zero value is fine.
type Options struct {
	// Host overrides DOCKER_HOST, for example "unix:///run/other.sock".
	Host string
	// ProbeTTL is how long a probe's answer is reused; 0 means 5 s.
	ProbeTTL time.Duration
}

// Status is what a probe learned about the engine.
type Status struct {
	Available bool
	// APIVersion is the version the client negotiated with the engine.
	APIVersion string
	// EngineAPIVersion is the newest API version the engine speaks.
	EngineAPIVersion string
	// ServerVersion is the engine's release, for example "20.10.24".
	ServerVersion string
	OSType        string
	CheckedAt     time.Time
	// Err is why the engine is unavailable; nil when Available.
	Err error
}

// Runner starts containers for one gateway replica. It is safe for
// concurrent use.
type Runner struct {
	cli       *client.Client
	replicaID string
	ttl       time.Duration

	mu       sync.Mutex
	status   Status
	probing  chan struct{} // non-nil while a probe runs; closed when it ends
	hasProbe bool
}

// New returns a Runner for the engine named by the environment (DOCKER_HOST,
// DOCKER_TLS_VERIFY, DOCKER_CERT_PATH) or opts.Host. replicaID names this
// gateway replica in container labels, so that SweepOrphans only ever
// touches this replica's containers when several share an engine. New does
// not contact the engine.
func New(replicaID string, opts *Options) (*Runner, error) {
	if replicaID == "" {
		return nil, errors.New("creating docker runner: empty replica id")
	}
	if opts == nil {
		opts = &Options{}
	}
	clientOpts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if opts.Host != "" {
		clientOpts = append(clientOpts, client.WithHost(opts.Host))
	}
	cli, err := client.NewClientWithOpts(clientOpts...)
	if err != nil {
		return nil, fmt.Errorf("creating docker client: %w", err)
	}
	ttl := opts.ProbeTTL
	if ttl <= 0 {
		ttl = 5 * time.Second
	}
	return &Runner{cli: cli, replicaID: replicaID, ttl: ttl}, nil
}

// ReplicaID returns the replica id the runner labels its containers with.
func (r *Runner) ReplicaID() string { return r.replicaID }

// Close releases the client's idle connections. Running containers are not
// affected; stop them first.
func (r *Runner) Close() error { return r.cli.Close() }

// Probe reports whether the engine answers, reusing an answer younger than
// the TTL. Concurrent callers share one probe. When the engine is
// unavailable the error wraps ErrUnavailable and Status says why.
func (r *Runner) Probe(ctx context.Context) (Status, error) {
	for {
		r.mu.Lock()
		if r.hasProbe && time.Since(r.status.CheckedAt) < r.ttl {
			st := r.status
			r.mu.Unlock()
			return st, st.Err
		}
		if wait := r.probing; wait != nil {
			r.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return Status{}, fmt.Errorf("probing docker engine: %w", ctx.Err())
			}
		}
		done := make(chan struct{})
		r.probing = done
		r.mu.Unlock()

		st := r.probe(ctx)

		r.mu.Lock()
		r.probing = nil
		// A probe cut short by the caller's own context says nothing about
		// the engine, so it is not cached.
		if ctx.Err() == nil {
			r.status, r.hasProbe = st, true
		}
		r.mu.Unlock()
		close(done)
		return st, st.Err
	}
}

func (r *Runner) probe(ctx context.Context) Status {
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	st := Status{CheckedAt: time.Now()}
	ping, err := r.cli.Ping(ctx)
	if err != nil {
		st.Err = fmt.Errorf("%w: %v", ErrUnavailable, err)
		return st
	}
	st.EngineAPIVersion, st.OSType = ping.APIVersion, ping.OSType
	v, err := r.cli.ServerVersion(ctx)
	if err != nil {
		st.Err = fmt.Errorf("%w: %v", ErrUnavailable, err)
		return st
	}
	st.Available = true
	st.ServerVersion = v.Version
	st.APIVersion = r.cli.ClientVersion()
	return st
}

// forgetProbe drops the cached answer after a call found the engine gone,
// so the next Start re-probes instead of trusting a stale "available".
func (r *Runner) forgetProbe() {
	r.mu.Lock()
	r.hasProbe = false
	r.mu.Unlock()
}

// engineErr classifies an error from an engine call: connection failures
// become ErrUnavailable.
func (r *Runner) engineErr(what string, err error) error {
	if client.IsErrConnectionFailed(err) {
		r.forgetProbe()
		return fmt.Errorf("%s: %w: %v", what, ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// SweepOrphans force-removes every container labelled with this runner's
// replica id and returns how many it removed. Call it when the replica
// starts, before it launches anything: containers of other replicas sharing
// the engine are left alone. Containers that vanish during the sweep (an
// AutoRemove racing it) are not errors.
func (r *Runner) SweepOrphans(ctx context.Context) (int, error) {
	list, err := r.cli.ContainerList(ctx, container.ListOptions{
		All: true,
		Filters: filters.NewArgs(
			filters.Arg("label", LabelManaged+"=true"),
			filters.Arg("label", LabelReplica+"="+r.replicaID),
		),
	})
	if err != nil {
		return 0, r.engineErr("listing orphan containers", err)
	}
	removed := 0
	var errs []error
	for _, c := range list {
		// The engine filtered by label already; checking again guards against
		// an engine that ignores an unknown filter.
		if c.Labels[LabelReplica] != r.replicaID || c.Labels[LabelManaged] != "true" {
			continue
		}
		err := r.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
		switch {
		case err == nil, cerrdefs.IsNotFound(err), cerrdefs.IsConflict(err):
			// NotFound and Conflict ("removal already in progress"): the
			// kill let AutoRemove win the race; the container is gone either way.
			removed++
		default:
			errs = append(errs, r.engineErr("removing orphan container "+shortID(c.ID), err))
		}
	}
	return removed, errors.Join(errs...)
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
