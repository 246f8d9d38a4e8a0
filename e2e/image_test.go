package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/jackc/pgx/v5"

	"github.com/mcpgate/mcpgate/internal/testbin"
	"github.com/mcpgate/mcpgate/pglocal"
)

// need skips the test for a missing resource, or fails it under
// MCPGATE_TEST_STRICT=1, where CI promised the resource.
func need(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("MCPGATE_TEST_STRICT") != "" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// engine returns a client of the Docker engine at DOCKER_HOST.
func engine(t *testing.T) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		need(t, "no Docker engine answers (DOCKER_HOST=%q): %v", os.Getenv("DOCKER_HOST"), err)
	}
	return cli
}

// The slim image builds from the repository with no registry, runs as a
// non-root uid with no capabilities against a PostgreSQL on loopback,
// becomes ready and healthy through its own HEALTHCHECK, and stops cleanly
// on SIGTERM (L1, L2, L4).
func TestImageSlim(t *testing.T) {
	cli := engine(t)
	dbURL := startTCPPostgres(t)
	tag := buildImage(t, cli, "slim", nil)
	runImage(t, cli, tag, dbURL, nil)
}

// The full image adds node, npm and python3 for sandbox-mode stdio servers.
// Its base takes minutes to make (deploy/base/build.sh, or `make
// image-full`), so the test runs only when MCPGATE_TEST_FULL_IMAGE=1.
func TestImageFull(t *testing.T) {
	if os.Getenv("MCPGATE_TEST_FULL_IMAGE") != "1" {
		t.Skip("set MCPGATE_TEST_FULL_IMAGE=1 (after deploy/base/build.sh) to test the full image")
	}
	cli := engine(t)
	base := os.Getenv("MCPGATE_BASE_IMAGE")
	if base == "" {
		base = "mcpgate-base:bookworm"
	}
	if _, err := cli.ImageInspect(context.Background(), base); err != nil {
		t.Fatalf("base image %s: %v; make it with deploy/base/build.sh", base, err)
	}
	dbURL := startTCPPostgres(t)
	tag := buildImage(t, cli, "full", map[string]*string{"FULL_BASE": &base})
	runImage(t, cli, tag, dbURL, func(ctx context.Context, id string) {
		for _, argv := range [][]string{{"node", "--version"}, {"npm", "--version"}, {"python3", "--version"}} {
			if code, out := execIn(t, ctx, cli, id, nil, argv...); code != 0 {
				t.Errorf("%v in the full image: exit %d %s", argv, code, out)
			}
		}
	})
}

// buildImage stages the context the way `make image` does (the test binary
// stands in for the release build) and builds target with the legacy
// builder, which needs neither buildx nor a registry. The image is removed
// when the test ends.
func buildImage(t *testing.T, cli *client.Client, target string, args map[string]*string) string {
	t.Helper()
	root := repoRoot(t)
	bin := testbin.Build(t, "cmd/mcpgate")
	stage := t.TempDir()
	if out, err := exec.Command(filepath.Join(root, "deploy", "image-context.sh"), bin, filepath.Join(stage, "bin", "image")).CombinedOutput(); err != nil {
		t.Fatalf("staging the image context: %v\n%s", err, out)
	}
	var ctxTar bytes.Buffer
	tw := tar.NewWriter(&ctxTar)
	for _, f := range []string{"Dockerfile", ".dockerignore"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		tw.WriteHeader(&tar.Header{Name: f, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg})
		tw.Write(b)
	}
	if err := addTree(tw, stage); err != nil {
		t.Fatalf("taring the context: %v", err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}

	tag := "mcpgate-e2e:" + target + "-" + randomHex(4)
	version := "e2e"
	if args == nil {
		args = map[string]*string{}
	}
	args["VERSION"] = &version
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	resp, err := cli.ImageBuild(ctx, &ctxTar, build.ImageBuildOptions{
		Tags: []string{tag}, Target: target, Dockerfile: "Dockerfile", BuildArgs: args,
		Version: build.BuilderV1, Remove: true, ForceRemove: true, PullParent: false,
	})
	if err != nil {
		t.Fatalf("building the %s image: %v", target, err)
	}
	// Stages before the target leave untagged images of their own; remove
	// those too, unless something else (a child) still uses them.
	var stepImages []string
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := cli.ImageRemove(ctx, tag, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("removing %s: %v", tag, err)
		}
		for _, id := range slices.Backward(stepImages) {
			// A tagged one is a base (FROM) that the test did not make.
			if img, err := cli.ImageInspect(ctx, id); err == nil && len(img.RepoTags) == 0 {
				cli.ImageRemove(ctx, id, image.RemoveOptions{PruneChildren: true})
			}
		}
	})
	// Build errors arrive inside the stream, which must be read to the end.
	var log strings.Builder
	dec := json.NewDecoder(resp.Body)
	for {
		var msg struct {
			Stream      string `json:"stream"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("reading the build output: %v\n%s", err, log.String())
		}
		log.WriteString(msg.Stream)
		if id, ok := strings.CutPrefix(strings.TrimSpace(msg.Stream), "---> "); ok && len(id) == 12 && strings.Trim(id, "0123456789abcdef") == "" {
			stepImages = append(stepImages, id)
		}
		if msg.ErrorDetail != nil {
			t.Fatalf("building the %s image: %s\n%s", target, msg.ErrorDetail.Message, log.String())
		}
	}
	resp.Body.Close()

	img, err := cli.ImageInspect(context.Background(), tag)
	if err != nil {
		t.Fatalf("inspecting %s: %v\n%s", tag, err, log.String())
	}
	c := img.Config
	if c == nil {
		t.Fatalf("%s has no config", tag)
	}
	if uid, _, _ := strings.Cut(c.User, ":"); uid == "" || uid == "0" || strings.Trim(uid, "0123456789") != "" {
		t.Errorf("image USER %q; want a numeric uid other than 0", c.User)
	}
	if strings.Join(c.Entrypoint, " ") != "mcpgate serve" {
		t.Errorf("ENTRYPOINT %q; want [mcpgate serve]", c.Entrypoint)
	}
	if _, ok := c.Volumes["/data"]; !ok {
		t.Errorf("no VOLUME /data: %v", c.Volumes)
	}
	if _, ok := c.ExposedPorts["8080/tcp"]; !ok {
		t.Errorf("8080/tcp not exposed: %v", c.ExposedPorts)
	}
	if c.Healthcheck == nil || strings.Join(c.Healthcheck.Test, " ") != "CMD mcpgate healthcheck" {
		t.Errorf("HEALTHCHECK %+v; want CMD mcpgate healthcheck", c.Healthcheck)
	}
	if !slices.Contains(c.Env, "MCPGATE_DATA_DIR=/data") {
		t.Errorf("env %q lacks MCPGATE_DATA_DIR=/data", c.Env)
	}
	t.Logf("%s: %d bytes", tag, img.Size)
	return tag
}

// runImage runs tag on the host's loopback (the engine may have no bridge),
// read-only with every capability dropped, and checks it the way an
// operator would. extra runs more checks while the container is up.
func runImage(t *testing.T, cli *client.Client, tag, dbURL string, extra func(ctx context.Context, id string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	addr := freeLoopbackAddr(t)
	created, err := cli.ContainerCreate(ctx, &container.Config{
		Image: tag,
		Env: []string{
			"MCPGATE_DATABASE_URL=" + dbURL,
			"MCPGATE_LISTEN=" + addr,
			"MCPGATE_ADMIN_TOKEN=" + adminToken,
		},
		// Only the interval changes: the test comes from the image.
		Healthcheck: &container.HealthConfig{Interval: time.Second, Timeout: 5 * time.Second, Retries: 3},
	}, &container.HostConfig{
		NetworkMode:    "host",
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges:true"},
		ReadonlyRootfs: true,
		Tmpfs:          map[string]string{"/tmp": "rw,nosuid,size=64m"},
	}, nil, nil, "")
	if err != nil {
		t.Fatalf("creating the container: %v", err)
	}
	id := created.ID
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("removing the container: %v", err)
		}
	})
	logs := func() string {
		rc, err := cli.ContainerLogs(context.Background(), id, container.LogsOptions{ShowStdout: true, ShowStderr: true})
		if err != nil {
			return err.Error()
		}
		defer rc.Close()
		var out bytes.Buffer
		stdcopy.StdCopy(&out, &out, rc)
		return out.String()
	}
	if err := cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		t.Fatalf("starting the container: %v", err)
	}

	// /readyz answers 200 once the database is reachable and migrated.
	base := "http://" + addr
	waitFor(t, 90*time.Second, "/readyz to answer 200", func() (bool, error) {
		if st, err := cli.ContainerInspect(ctx, id); err != nil || !st.State.Running {
			return false, fmt.Errorf("container not running (%v)\n%s", err, logs())
		}
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	req, _ := http.NewRequest("GET", base+"/api/v1/status", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("/api/v1/status with the admin token: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// The process runs as a non-root uid with no capabilities (L1).
	st, err := cli.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if uid, _, _ := strings.Cut(st.Config.User, ":"); uid == "" || uid == "0" {
		t.Errorf("container user %q; want non-root", st.Config.User)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", st.State.Pid))
	if err != nil {
		t.Fatalf("reading the gateway's /proc status: %v", err)
	}
	for _, field := range []string{"Uid", "Gid"} {
		ids := procField(string(status), field)
		if len(ids) != 4 {
			t.Fatalf("%s line missing in /proc/%d/status", field, st.State.Pid)
		}
		for _, v := range ids {
			if v == "0" {
				t.Errorf("%s: %v; want no 0 among real, effective, saved, fs", field, ids)
			}
		}
	}
	if capEff := procField(string(status), "CapEff"); len(capEff) != 1 || strings.Trim(capEff[0], "0") != "" {
		t.Errorf("CapEff %v; want none", capEff)
	}

	// The keys landed in the data volume, private; the admin socket is off (L2).
	for _, f := range []string{"/data/gateway/secret.key", "/data/gateway/session.key"} {
		ps, err := cli.ContainerStatPath(ctx, id, f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
		} else if ps.Mode.Perm() != 0o600 {
			t.Errorf("%s mode %v; want 0600", f, ps.Mode.Perm())
		}
	}
	if _, err := cli.ContainerStatPath(ctx, id, "/data/mcpgate.sock"); !cerrdefs.IsNotFound(err) {
		t.Errorf("stat /data/mcpgate.sock: %v; want not found (the socket is off by default)", err)
	}

	// The HEALTHCHECK turns the container healthy, and the same command
	// fails when nothing answers.
	waitFor(t, 60*time.Second, "the health status to turn healthy", func() (bool, error) {
		st, err := cli.ContainerInspect(ctx, id)
		if err != nil {
			return false, err
		}
		if st.State.Health == nil {
			return false, errors.New("the container has no health state")
		}
		switch st.State.Health.Status {
		case container.Healthy:
			return true, nil
		case container.Unhealthy:
			return false, fmt.Errorf("unhealthy: %+v", st.State.Health.Log)
		}
		return false, nil
	})
	if code, out := execIn(t, ctx, cli, id, nil, "mcpgate", "healthcheck", "--ready"); code != 0 {
		t.Errorf("mcpgate healthcheck --ready: exit %d %s", code, out)
	}
	if code, _ := execIn(t, ctx, cli, id, []string{"MCPGATE_LISTEN=" + freeLoopbackAddr(t)}, "mcpgate", "healthcheck"); code == 0 {
		t.Error("mcpgate healthcheck exits 0 with nothing listening")
	}
	if extra != nil {
		extra(ctx, id)
	}

	// SIGTERM ends it cleanly.
	timeout := 30
	if err := cli.ContainerStop(ctx, id, container.StopOptions{Timeout: &timeout}); err != nil {
		t.Fatalf("stopping: %v", err)
	}
	if st, err := cli.ContainerInspect(ctx, id); err != nil || st.State.ExitCode != 0 {
		t.Errorf("exit after SIGTERM: %+v %v\n%s", st.State, err, logs())
	}
	if l := logs(); strings.Contains(l, adminToken) || strings.Contains(l, dbURL) {
		t.Error("the logs show the admin token or the database URL")
	}
}

// execIn runs argv in the container and returns its exit code and output.
func execIn(t *testing.T, ctx context.Context, cli *client.Client, id string, env []string, argv ...string) (int, string) {
	t.Helper()
	ex, err := cli.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: argv, Env: env, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatalf("exec %v: %v", argv, err)
	}
	hj, err := cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		t.Fatalf("exec attach %v: %v", argv, err)
	}
	var out bytes.Buffer
	stdcopy.StdCopy(&out, &out, hj.Reader) // returns when the process ends
	hj.Close()
	var code int
	waitFor(t, 30*time.Second, fmt.Sprintf("%v to finish", argv), func() (bool, error) {
		in, err := cli.ContainerExecInspect(ctx, ex.ID)
		code = in.ExitCode
		return err == nil && !in.Running, err
	})
	return code, out.String()
}

// startTCPPostgres runs a throwaway PostgreSQL on a free loopback port with
// password authentication, as a containerised gateway must reach it, and
// returns its URL.
func startTCPPostgres(t *testing.T) string {
	t.Helper()
	bin, err := pglocal.FindBinaries()
	if err != nil {
		need(t, "no PostgreSQL server binaries: %v", err)
	}
	var cred *syscall.Credential
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			need(t, "running as root needs a postgres user for the test database: %v", err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	}
	dir, err := os.MkdirTemp("", "mcpg-img-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	password := randomHex(16)
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		for _, p := range []string{dir, pwFile} {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	pgdata := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", pgdata, "-U", "mcpgate", "--pwfile", pwFile,
		"--auth-local=scram-sha-256", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.Env = []string{"LANG=C", "LC_ALL=C", "PATH=/usr/bin:/bin"}
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	_, port, _ := net.SplitHostPort(freeLoopbackAddr(t))
	var logBuf lockedBuffer
	pg := exec.Command(filepath.Join(bin, "postgres"), "-D", pgdata, "-p", port,
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+dir,
		"-c", "fsync=off", "-c", "full_page_writes=off")
	pg.Env = initdb.Env
	pg.Stdout, pg.Stderr = &logBuf, &logBuf
	pg.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := pg.Start(); err != nil {
		t.Fatalf("starting postgres: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- pg.Wait() }()
	t.Cleanup(func() {
		pg.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			pg.Process.Kill()
			<-done
		}
	})
	url := fmt.Sprintf("postgres://mcpgate:%s@127.0.0.1:%s/postgres?sslmode=disable", password, port)
	waitFor(t, 60*time.Second, "the test PostgreSQL to accept connections", func() (bool, error) {
		select {
		case err := <-done:
			done <- err
			return false, fmt.Errorf("postgres exited: %v\n%s", err, logBuf.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return false, nil
		}
		_, err = conn.Exec(ctx, "CREATE DATABASE mcpgate")
		conn.Close(ctx)
		return true, err
	})
	return strings.Replace(url, "/postgres?", "/mcpgate?", 1)
}

// waitFor polls cond every 100 ms until it holds, fails, or the deadline
// passes; the ticker only paces the polling, the condition decides.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-deadline.C:
			t.Fatalf("%s did not happen within %v", what, limit)
		case <-tick.C:
		}
	}
}

func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// addTree adds dir's files to tw under their paths relative to dir, with
// their modes, owned by root.
func addTree(tw *tar.Writer, dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		hdr.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
}

// procField returns the whitespace-separated values of a /proc status line.
func procField(status, name string) []string {
	for line := range strings.Lines(status) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.Fields(v)
		}
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// lockedBuffer collects a child's output, written from the exec package's
// copying goroutines and read by the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
