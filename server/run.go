package server

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mcpgate/mcpgate/config"
	"github.com/mcpgate/mcpgate/docker"
	"github.com/mcpgate/mcpgate/doctor"
	"github.com/mcpgate/mcpgate/gateway"
	"github.com/mcpgate/mcpgate/isolation"
	"github.com/mcpgate/mcpgate/metrics"
	"github.com/mcpgate/mcpgate/migrations"
	"github.com/mcpgate/mcpgate/oauth"
	"github.com/mcpgate/mcpgate/pglocal"
	"github.com/mcpgate/mcpgate/sandbox"
	"github.com/mcpgate/mcpgate/settings"
	"github.com/mcpgate/mcpgate/store"
	"github.com/mcpgate/mcpgate/upstream"
)

// Version is set at build time.
var Version = "dev"

// NewLogger makes the process's JSON logger.
func NewLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

// Database is an open database, with the private server behind it if any.
type Database struct {
	Pool    *pgxpool.Pool
	private *pglocal.Server
}

// Close closes the pool and stops a private server this process started.
func (d *Database) Close() {
	d.Pool.Close()
	if d.private != nil {
		d.private.Stop()
	}
}

// OpenDatabase connects to MCPGATE_DATABASE_URL, or starts (attach: joins)
// the private PostgreSQL in the data dir, and applies migrations.
func OpenDatabase(ctx context.Context, cfg config.Config, log *slog.Logger, attach bool) (*Database, error) {
	db := &Database{}
	url := cfg.DatabaseURL
	if url == "" {
		if err := prepareDataDir(cfg.DataDir); err != nil {
			return nil, err
		}
		opts := pglocal.Options{
			Dir:          filepath.Join(cfg.DataDir, "pg"),
			PasswordFile: filepath.Join(cfg.DataDir, "gateway", "pg.password"),
			Durable:      true,
			Log:          &slogWriter{log: log},
		}
		var (
			pg  *pglocal.Server
			err error
		)
		if attach {
			if pg, err = pglocal.Attach(opts); err == nil {
				url = pg.URL()
			}
		}
		if url == "" {
			log.Info("starting the private PostgreSQL", "dir", opts.Dir)
			if pg, err = pglocal.Start(ctx, opts); err != nil {
				return nil, err
			}
			db.private = pg
			url = pg.URL()
		}
	}
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, errors.New("MCPGATE_DATABASE_URL: cannot be parsed") // the parse error may echo the password
	}
	if db.Pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		db.Close()
		return nil, fmt.Errorf("connecting to the database: %w", err)
	}
	applied, err := migrations.Up(ctx, db.Pool)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("migrating: %w", err)
	}
	if len(applied) > 0 {
		log.Info("migrations applied", "files", applied)
	}
	return db, nil
}

// prepareDataDir lays out the data dir: gateway/ holds what only the gateway
// may read (keys, passwords); pg/ the private cluster; sandboxes/ the
// children's own dirs. The root must be passable for the database's user.
func prepareDataDir(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, "gateway"), 0o700); err != nil {
		return fmt.Errorf("MCPGATE_DATA_DIR: %w", err)
	}
	if err := os.Chmod(filepath.Join(dir, "gateway"), 0o700); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		if err := os.Chmod(dir, 0o711); err != nil {
			return err
		}
	}
	return nil
}

type slogWriter struct{ log *slog.Logger }

func (w *slogWriter) Write(b []byte) (int, error) {
	w.log.Info("postgres", "line", string(trimNL(b)))
	return len(b), nil
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// DockerSocket returns the engine's unix socket path, when it is one.
func DockerSocket() string {
	h := os.Getenv("DOCKER_HOST")
	if h == "" {
		h = "unix:///var/run/docker.sock"
	}
	if p, ok := strings.CutPrefix(h, "unix://"); ok {
		return p
	}
	return ""
}

// ProbeHost is probeHost for the CLI.
func ProbeHost(ctx context.Context, replicaID string, log *slog.Logger) (isolation.Host, string) {
	return probeHost(ctx, replicaID, log)
}

// probeHost asks the kernel for its Landlock ABI and the Docker engine for
// an answer (2 s at most), once at start.
func probeHost(ctx context.Context, replicaID string, log *slog.Logger) (isolation.Host, string) {
	var host isolation.Host
	host.LandlockABI, _ = sandbox.Available(isolation.MinABI)
	r, err := docker.New(replicaID, nil)
	if err != nil {
		log.Warn("docker client", "err", err.Error())
		return host, ""
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := r.Probe(ctx)
	if err != nil {
		log.Info("docker engine unavailable", "err", err.Error())
		return host, ""
	}
	host.DockerAvailable = st.Available
	return host, st.APIVersion
}

// Run serves one replica until ctx ends.
func Run(ctx context.Context, getenv func(string) string, stderr io.Writer) error {
	cfg, err := config.Load(getenv, os.Geteuid())
	if err != nil {
		return err
	}
	log := NewLogger(stderr, cfg.LogLevel)
	if cfg.ReplicaID == "" {
		// Stable across restarts (a replica sweeps its own leftover
		// containers by this id), distinct per data dir on one host.
		host, _ := os.Hostname()
		sum := sha256.Sum256([]byte(cfg.DataDir))
		cfg.ReplicaID = fmt.Sprintf("%s-%s", host, hex.EncodeToString(sum[:3]))
	}
	if err := prepareDataDir(cfg.DataDir); err != nil {
		return err
	}
	db, err := OpenDatabase(ctx, cfg, log, false)
	if err != nil {
		return err
	}
	defer db.Close()

	sealer, err := LoadSecretKey(cfg, log)
	if err != nil {
		return err
	}
	st := store.New(db.Pool, sealer)
	if fsync, sc, err := st.DurabilitySettings(ctx); err == nil && (fsync != "on" || sc == "off") {
		log.Warn("the database may lose acknowledged writes in a crash", "fsync", fsync, "synchronous_commit", sc)
	}

	host, dockerAPI := probeHost(ctx, cfg.ReplicaID, log)
	log.Info("host isolation", "landlock_abi", host.LandlockABI, "docker_available", host.DockerAvailable, "docker_api", dockerAPI)
	if wrote, err := st.InitSetting(ctx, settings.Key, settings.Defaults(isolation.DefaultGlobal(host))); err != nil {
		return fmt.Errorf("initialising settings: %w", err)
	} else if wrote {
		log.Info("first start: global isolation mode chosen", "global_mode", isolation.DefaultGlobal(host))
	}

	sessionKey, err := loadSessionKey(filepath.Join(cfg.DataDir, "gateway", "session.key"))
	if err != nil {
		return err
	}
	om, err := oauth.New(st, &oauth.Options{PublicURL: cfg.PublicURL, Logger: log, AllowUnboundCallbacks: cfg.OAuthUnboundCallbacks})
	if err != nil {
		return err
	}
	reg := metrics.NewRegistry()
	reg.NewGaugeFunc("mcpgate_db_pool_connections", "Database pool connections by state.", []string{"state"}, func() []metrics.Sample {
		st := db.Pool.Stat()
		return []metrics.Sample{
			{Labels: []string{"acquired"}, Value: float64(st.AcquiredConns())},
			{Labels: []string{"idle"}, Value: float64(st.IdleConns())},
			{Labels: []string{"total"}, Value: float64(st.TotalConns())},
		}
	})
	srv, err := New(Options{
		Metrics: reg,
		OAuth:   om,
		Store:   st, Log: log, AdminToken: cfg.AdminToken, ReplicaID: cfg.ReplicaID, Version: Version,
		HostFunc: func() isolation.Host { return host }, DockerAPIVersion: func() string { return dockerAPI },
		JWT:       JWTOptions{SessionKey: sessionKey, Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience, JWKSURL: cfg.JWKSURL},
		ExtraArgs: docker.ValidateExtraArgs,
		Doctor: func(ctx context.Context) doctor.Report {
			return doctor.Run(ctx, doctor.Inputs{Config: cfg, Store: st, Host: host, DockerAPI: dockerAPI, DockerSocket: DockerSocket()})
		},
	})
	if err != nil {
		return err
	}
	gw, closeGateway, err := startGateway(ctx, cfg, log, st, srv, host, reg, om)
	if err != nil {
		return err
	}
	srv.SetGateway(gw)
	// Children and containers stop after the listeners have drained.
	defer closeGateway()

	jobs, stopJobs := context.WithCancel(ctx)
	defer stopJobs()
	go retainActivity(jobs, st, host, log)

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("MCPGATE_LISTEN: %w", err)
	}
	errLog := slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	servers := []*http.Server{{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: errLog}}
	listeners := []net.Listener{ln}
	sockPath := filepath.Join(cfg.DataDir, "mcpgate.sock")
	if cfg.EnableSocket {
		sl, err := ListenSocket(sockPath)
		if err != nil {
			return fmt.Errorf("MCPGATE_ENABLE_SOCKET: %w", err)
		}
		defer os.Remove(sockPath)
		servers = append(servers, &http.Server{Handler: srv.SocketHandler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: errLog})
		listeners = append(listeners, sl)
		log.Warn("admin socket enabled: local processes running as this uid act as admin", "path", sockPath)
	} else if st, err := os.Lstat(sockPath); err == nil && st.Mode()&os.ModeSocket != 0 {
		// Left by an earlier run with the socket on: off means no file.
		os.Remove(sockPath)
	}
	if cfg.MetricsListen != "" {
		ml, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			return fmt.Errorf("MCPGATE_METRICS_LISTEN: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", srv.MetricsHandler())
		servers = append(servers, &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: errLog})
		listeners = append(listeners, ml)
	}
	errc := make(chan error, len(servers))
	for i, hs := range servers {
		go func() { errc <- hs.Serve(listeners[i]) }()
	}
	log.Info("serving", "addr", ln.Addr().String(), "replica_id", cfg.ReplicaID, "version", Version)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", cfg.ShutdownTimeout.String())
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	var errs []error
	for _, hs := range servers {
		errs = append(errs, hs.Shutdown(shutdownCtx))
	}
	return errors.Join(errs...)
}

// startGateway builds the MCP core with the launcher the host allows.
func startGateway(ctx context.Context, cfg config.Config, log *slog.Logger, st *store.Store, srv *Server, host isolation.Host, reg *metrics.Registry, om *oauth.Manager) (*gateway.Gateway, func(), error) {
	self, err := sandboxWrapper()
	if err != nil {
		return nil, nil, err
	}
	launcher := &upstream.IsolatingLauncher{
		None: &upstream.ProcessLauncher{}, Self: self, DataDir: cfg.DataDir,
		FailClosed: cfg.SandboxFailClosed, MinABI: isolation.MinABI, NoFile: cfg.SandboxNoFile,
		DockerSettings: func() (docker.ImagePolicy, bool) {
			c := settings.Defaults(isolation.DefaultGlobal(host))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = st.GetSetting(ctx, settings.Key, &c)
			return docker.ImagePolicy{Registry: c.Docker.Registry, Images: c.Docker.DefaultImages}, c.Docker.AllowPull
		},
	}
	if cfg.SandboxUID > 0 {
		launcher.SandboxUID, launcher.SandboxGID = uint32(cfg.SandboxUID), uint32(cfg.SandboxUID)
	}
	var runner *docker.Runner
	if host.DockerAvailable {
		if runner, err = docker.New(cfg.ReplicaID, nil); err != nil {
			return nil, nil, err
		}
		if n, err := runner.SweepOrphans(ctx); err != nil {
			log.Warn("removing this replica's leftover containers", "err", err.Error())
		} else if n > 0 {
			log.Info("removed this replica's leftover containers", "count", n)
		}
		launcher.Docker = runner
	}
	u, _ := url.Parse(cfg.PublicURL)
	gw, err := gateway.New(ctx, &gateway.Options{
		Store: st, Logger: log, ReplicaID: cfg.ReplicaID, Version: Version, Launcher: launcher, Host: host,
		AuthenticateFunc: srv.AuthenticateMCP,
		// A revoked token keeps working on /mcp for at most this long.
		AuthCacheTTL:  time.Second,
		Metrics:       reg,
		OAuth:         om,
		Admin:         srv,
		RequestIDFunc: func(ctx context.Context, _ http.Header) string { return requestID(ctx) },
		// The SDK's DNS-rebinding guard fits a gateway on localhost; one
		// published under another name sits behind a proxy.
		DisableLocalhostProtection: u == nil || !isLoopbackHost(u.Hostname()),
	})
	if err != nil {
		if runner != nil {
			runner.Close()
		}
		return nil, nil, fmt.Errorf("starting the gateway core: %w", err)
	}
	return gw, func() {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		if err := gw.Close(ctx); err != nil {
			log.Warn("stopping upstreams", "err", err.Error())
		}
		if runner != nil {
			runner.Close()
		}
	}, nil
}

// retainActivity deletes activity past activity.retention_days every hour;
// with several replicas, one does it each time.
func retainActivity(ctx context.Context, st *store.Store, host isolation.Host, log *slog.Logger) {
	tick := time.NewTicker(time.Hour)
	defer tick.Stop()
	for {
		c := settings.Defaults(isolation.DefaultGlobal(host))
		if err := st.GetSetting(ctx, settings.Key, &c); err != nil && !errors.Is(err, store.ErrNotFound) && ctx.Err() == nil {
			log.Warn("activity retention: reading settings", "err", err.Error())
		}
		n, ran, err := st.PruneActivity(ctx, time.Duration(c.Activity.RetentionDays)*24*time.Hour)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.Warn("activity retention", "err", err.Error())
		case ran && n > 0:
			log.Info("activity retention: deleted old records", "count", n, "retention_days", c.Activity.RetentionDays)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// sandboxWrapper is the binary that runs `__sandbox_exec`: the small
// mcpgate-sandbox next to this binary when it is there, else this binary.
func sandboxWrapper() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("locating the mcpgate binary for the sandbox wrapper: %w", err)
	}
	small := filepath.Join(filepath.Dir(self), "mcpgate-sandbox")
	if st, err := os.Stat(small); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
		return small, nil
	}
	return self, nil
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// loadSessionKey reads the Ed25519 key that signs session JWTs, making it
// on first start. Replicas sharing a data dir may start together: the file
// is created exclusively, and the loser of the race reads the winner's key.
func loadSessionKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		_, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, err
		}
		// Written whole under a temporary name, then linked into place:
		// link fails if the name exists, and no reader sees half a file.
		tmp, err := os.CreateTemp(filepath.Dir(path), ".session.key-")
		if err != nil {
			return nil, fmt.Errorf("writing the session key: %w", err)
		}
		defer os.Remove(tmp.Name())
		_, err = tmp.Write(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
		if err == nil {
			err = tmp.Sync()
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("writing the session key: %w", err)
		}
		if err := os.Link(tmp.Name(), path); errors.Is(err, os.ErrExist) {
			return loadSessionKey(path)
		} else if err != nil {
			return nil, fmt.Errorf("writing the session key: %w", err)
		}
		return key, nil
	} else if err != nil {
		return nil, fmt.Errorf("reading the session key: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("session key %s: not PEM", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("session key %s: %w", path, err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("session key %s: not an Ed25519 key", path)
	}
	return key, nil
}
