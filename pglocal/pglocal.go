// Package pglocal runs a private PostgreSQL server for mcpgate when no
// database URL is configured: a cluster in a directory of its own, listening
// only on a unix socket in that directory, with scram password
// authentication. It needs the PostgreSQL server binaries on the machine.
package pglocal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrRunning means a server already runs on the cluster: another mcpgate
// process uses this data directory.
var ErrRunning = errors.New("a PostgreSQL server already runs on this data directory (another mcpgate process?)")

// ErrNoBinaries means no PostgreSQL server binaries were found.
var ErrNoBinaries = errors.New("PostgreSQL server binaries (initdb, postgres) not found on PATH or in /usr/lib/postgresql/*/bin; " +
	"install them (Debian: apt-get install postgresql) or set MCPGATE_DATABASE_URL")

const (
	superuser = "mcpgate"
	database  = "mcpgate"
)

// Options configures a private server.
type Options struct {
	// Dir holds the cluster and its socket. The socket path must stay under
	// the kernel's 107-byte limit, so keep it short.
	Dir string
	// PasswordFile keeps the superuser password between starts; it must lie
	// outside Dir, where only the gateway's uid can read it.
	PasswordFile string
	// Durable false turns fsync off: for tests only.
	Durable bool
	// Log receives the server's own log output.
	Log io.Writer
}

// Server is a running private PostgreSQL.
type Server struct {
	opts   Options
	cmd    *exec.Cmd
	done   chan error
	url    string
	exited error
}

// FindBinaries returns the directory holding initdb and postgres: PATH first,
// then the newest /usr/lib/postgresql/<version>/bin.
func FindBinaries() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	sort.Slice(matches, func(i, j int) bool { return versionOf(matches[i]) > versionOf(matches[j]) })
	for _, m := range matches {
		dir := filepath.Dir(m)
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	return "", ErrNoBinaries
}

func versionOf(postgresPath string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(postgresPath))))
	return v
}

// Start initialises the cluster on first use and starts the server. The
// server is a child of this process and dies with it.
func Start(ctx context.Context, opts Options) (*Server, error) {
	bin, err := FindBinaries()
	if err != nil {
		return nil, err
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	cred, owner, err := runAs()
	if err != nil {
		return nil, err
	}
	password, err := loadPassword(opts.PasswordFile)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", opts.Dir, err)
	}
	if err := chown(opts.Dir, owner); err != nil {
		return nil, err
	}
	if cred != nil {
		if err := reachable(opts.Dir); err != nil {
			return nil, err
		}
	}
	pgdata := filepath.Join(opts.Dir, "data")
	if _, err := os.Stat(filepath.Join(pgdata, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := initdb(ctx, bin, pgdata, password, cred, owner, opts.Log); err != nil {
			return nil, err
		}
	}
	if running(pgdata) {
		return nil, ErrRunning
	}
	s := &Server{opts: opts, done: make(chan error, 1)}
	if err := s.start(bin, pgdata, cred); err != nil {
		return nil, err
	}
	s.url = connURL(opts.Dir, password)
	if err := s.waitReady(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// Attach connects to a private server that another process started on the
// same directory (the break-glass CLI next to a running gateway). Stop on
// the result does nothing.
func Attach(opts Options) (*Server, error) {
	if !running(filepath.Join(opts.Dir, "data")) {
		return nil, errors.New("no private PostgreSQL runs on this data directory")
	}
	b, err := os.ReadFile(opts.PasswordFile)
	if err != nil {
		return nil, fmt.Errorf("reading the private PostgreSQL password: %w", err)
	}
	return &Server{opts: opts, url: connURL(opts.Dir, strings.TrimSpace(string(b)))}, nil
}

func connURL(dir, password string) string {
	return (&url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(superuser, password),
		Path:     "/" + database,
		RawQuery: url.Values{"host": {dir}, "sslmode": {"disable"}}.Encode(),
	}).String()
}

// URL is the connection URL of the mcpgate database. It holds the password:
// never log it.
func (s *Server) URL() string { return s.url }

// AdminURL connects to the maintenance database, for creating others.
func (s *Server) AdminURL() string {
	u, _ := url.Parse(s.url)
	u.Path = "/postgres"
	return u.String()
}

// Stop shuts the server down (fast shutdown: open sessions are cut, the data
// is checkpointed) and waits for it.
func (s *Server) Stop() error {
	if s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-s.done:
		s.exited = err
		return nil
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		return fmt.Errorf("private PostgreSQL did not stop within 30s; killed")
	}
}

func (s *Server) start(bin, pgdata string, cred *syscall.Credential) error {
	durable := "on"
	if !s.opts.Durable {
		durable = "off"
	}
	s.cmd = exec.Command(filepath.Join(bin, "postgres"),
		"-D", pgdata,
		"-c", "listen_addresses=",
		"-c", "unix_socket_directories="+s.opts.Dir,
		"-c", "unix_socket_permissions=0700",
		"-c", "fsync="+durable,
		"-c", "synchronous_commit=on",
		"-c", "full_page_writes="+durable,
		"-c", "max_connections=200",
	)
	s.cmd.Dir = s.opts.Dir
	s.cmd.Env = []string{"LANG=C", "LC_ALL=C", "PATH=/usr/bin:/bin"}
	s.cmd.Stdout = s.opts.Log
	s.cmd.Stderr = s.opts.Log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGINT}
	started := make(chan error, 1)
	// Pdeathsig fires when the thread that forked exits, not the process:
	// keep that thread alive, locked, for as long as the server runs.
	go func() {
		runtime.LockOSThread()
		if err := s.cmd.Start(); err != nil {
			started <- fmt.Errorf("starting postgres: %w", err)
			return
		}
		started <- nil
		s.done <- s.cmd.Wait()
	}()
	return <-started
}

func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		select {
		case err := <-s.done:
			s.exited = err
			return fmt.Errorf("private PostgreSQL exited during start (%v); see its log", err)
		case <-ctx.Done():
			return fmt.Errorf("private PostgreSQL not ready: %w", errors.Join(ctx.Err(), lastErr))
		case <-tick.C:
		}
		conn, err := pgx.Connect(ctx, s.AdminURL())
		if err != nil {
			lastErr = err
			continue
		}
		var exists bool
		err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, database).Scan(&exists)
		if err == nil && !exists {
			_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{database}.Sanitize())
		}
		conn.Close(ctx)
		return err
	}
}

func initdb(ctx context.Context, bin, pgdata, password string, cred *syscall.Credential, owner *user.User, log io.Writer) error {
	// initdb reads the password from a file the server's user can read;
	// it lives only for the call.
	pw, err := os.CreateTemp(filepath.Dir(pgdata), ".pw-")
	if err != nil {
		return err
	}
	defer os.Remove(pw.Name())
	if _, err := pw.WriteString(password + "\n"); err != nil {
		return err
	}
	pw.Close()
	if err := chown(pw.Name(), owner); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "initdb"),
		"-D", pgdata, "-U", superuser, "--pwfile", pw.Name(),
		"--auth-local=scram-sha-256", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C")
	cmd.Env = []string{"LANG=C", "LC_ALL=C", "PATH=/usr/bin:/bin"}
	cmd.Dir = filepath.Dir(pgdata)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if err := cmd.Run(); err != nil {
		os.RemoveAll(pgdata)
		return fmt.Errorf("initdb: %w", err)
	}
	return nil
}

// runAs picks the user the server runs as. PostgreSQL refuses to run as
// root; as root we use the distribution's "postgres" account, never nobody,
// since sandboxed children may run as nobody and must not own the socket.
func runAs() (*syscall.Credential, *user.User, error) {
	if os.Geteuid() != 0 {
		u, err := user.Current()
		return nil, u, err
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, nil, fmt.Errorf("running as root needs a \"postgres\" system user for the private PostgreSQL " +
			"(the postgresql package creates it), or set MCPGATE_DATABASE_URL")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, u, nil
}

// reachable checks that another user can pass through every parent of dir,
// since the server runs as the postgres user.
func reachable(dir string) error {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("the private PostgreSQL runs as the postgres user, who cannot pass through %s: "+
				"chmod o+x it, choose another MCPGATE_DATA_DIR, or set MCPGATE_DATABASE_URL", d)
		}
		if d == "/" {
			return nil
		}
	}
}

func chown(path string, u *user.User) error {
	if os.Geteuid() != 0 {
		return nil
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(path, uid, gid); err != nil {
		return fmt.Errorf("handing %s to the postgres user: %w", path, err)
	}
	return nil
}

func loadPassword(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if p := strings.TrimSpace(string(b)); p != "" {
			return p, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("reading the private PostgreSQL password: %w", err)
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	p := hex.EncodeToString(raw)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(p+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("writing the private PostgreSQL password: %w", err)
	}
	return p, nil
}

// running reports whether the postmaster named in the cluster's pid file is
// alive. A stale file (pid gone or reused) is left for postgres to clean up.
func running(pgdata string) bool {
	b, err := os.ReadFile(filepath.Join(pgdata, "postmaster.pid"))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil || pid <= 1 {
		return false
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return err == nil && filepath.Base(exe) == "postgres"
}
