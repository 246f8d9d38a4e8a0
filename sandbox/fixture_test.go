package sandbox_test

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/sandbox"
)

// nobody is the dedicated sandbox uid and gid of the tests.
const nobody = 65534

// world is a gateway's surroundings as a sandboxed server sees them: a data
// dir with the gateway's secrets and two servers' dirs, sockets standing in
// for the admin socket, the Docker socket and Postgres, and loopback
// listeners. File modes are deliberately loose (world-readable secret,
// world-writable outside dir, both servers owned by one uid) so that a
// denial proves Landlock, not file permissions; the sockets alone are
// 0600 root, since file permissions are their documented guard below ABI 9.
type world struct {
	base, data  string
	alpha, beta sandbox.Dirs
	secret      string
	betaSecret  string
	outside     string
	adminSock   string
	dockerSock  string
	pgSock      string
	tcpAddr     string
	udpAddr     string
	sibling     int // pid of another sandboxed server, when one runs
}

func newWorld(t testing.TB) *world {
	t.Helper()
	need(t, os.Geteuid() == 0, "the sandbox fixture chowns to uid %d and needs root", nobody)
	base, err := os.MkdirTemp("", "mcpgate-sandbox-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	w := &world{base: base, data: filepath.Join(base, "data"), outside: filepath.Join(base, "outside")}
	mkdir(t, base, 0o755)
	mkdir(t, w.data, 0o755)
	mkdir(t, filepath.Join(w.data, "gateway"), 0o755)
	mkdir(t, w.outside, 0o777)
	mkdir(t, filepath.Join(base, "run"), 0o755)

	w.secret = filepath.Join(w.data, "gateway", "secret.key")
	writeFile(t, w.secret, 0o644, "gateway secret")

	if w.alpha, err = sandbox.PrepareOwned(w.data, "alpha", nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if w.beta, err = sandbox.PrepareOwned(w.data, "beta", nobody, nobody); err != nil {
		t.Fatal(err)
	}
	w.betaSecret = filepath.Join(w.beta.Work, "beta-secret")
	writeFile(t, w.betaSecret, 0o644, "beta's data")
	if err := os.Chown(w.betaSecret, nobody, nobody); err != nil {
		t.Fatal(err)
	}

	w.adminSock = unixListener(t, filepath.Join(w.data, "mcpgate.sock"))
	w.dockerSock = unixListener(t, filepath.Join(base, "run", "docker.sock"))
	w.pgSock = unixListener(t, filepath.Join(base, "run", ".s.PGSQL.5432"))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go acceptAndClose(ln)
	w.tcpAddr = ln.Addr().String()

	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	w.udpAddr = pc.LocalAddr().String()
	return w
}

// policy is the production shape of a sandbox policy for server d.
func (w *world) policy(d sandbox.Dirs, uid uint32) sandbox.Policy {
	p := sandbox.ServerPolicy(w.data, d, map[string]string{"SERVER_TOKEN": "only-for-this-server"})
	p.NetworkNone = true
	p.NoFile = 64
	p.DataLimit = 1 << 30
	p.FailClosed = true
	p.UID, p.GID = uid, uid
	return p
}

func mkdir(t testing.TB, p string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(p, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t testing.TB, p string, mode os.FileMode, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func unixListener(t testing.TB, path string) string {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	go acceptAndClose(ln)
	return path
}

func acceptAndClose(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

// sandboxed returns the wrapper command for argv under p.
func sandboxed(t testing.TB, p sandbox.Policy, argv ...string) *exec.Cmd {
	t.Helper()
	cmd, err := sandbox.Command(wrapper, p, argv)
	if err != nil {
		t.Fatal(err)
	}
	return cmd
}

// runCmd runs cmd to completion (killing its group after a minute) and
// returns stdout, stderr and the exit code.
func runCmd(t testing.TB, cmd *exec.Cmd) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %v: %v", cmd.Args, err)
	}
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	watchdog := time.AfterFunc(time.Minute, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	defer watchdog.Stop()
	err := cmd.Wait()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("waiting for %v: %v", cmd.Args, err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// probe runs cmd, which runs escapeprobe, and decodes its results.
func probe(t *testing.T, cmd *exec.Cmd) map[string]string {
	t.Helper()
	out, errOut, code := runCmd(t, cmd)
	if code != 0 {
		t.Fatalf("%v exited %d\nstdout: %s\nstderr: %s", cmd.Args, code, out, errOut)
	}
	var res map[string]string
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("decoding probe output %q (stderr %q): %v", out, errOut, err)
	}
	return res
}
