package sandbox_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/testbin"
	"github.com/mcpgate/mcpgate/sandbox"
	"golang.org/x/sys/unix"
)

// escape is one probe that the sandbox must deny and a plain child must be
// allowed; deny is the errno the sandbox must answer with.
type escape struct {
	key, param, deny string
}

func (w *world) escapes(col string) []escape {
	gw := strconv.Itoa(os.Getpid())
	sib := strconv.Itoa(w.sibling)
	es := []escape{
		{"write.outside", filepath.Join(w.outside, "escape-"+col), "EACCES"},
		{"read.datadir", w.secret, "EACCES"},
		{"list.datadir", w.data, "EACCES"},
		{"read.otherserver", w.betaSecret, "EACCES"},
		{"write.otherserver", filepath.Join(w.beta.Work, "planted-"+col), "EACCES"},
		{"list.otherserver", w.beta.Work, "EACCES"},
		{"environ.gateway", gw, "EACCES"},
		{"read.gatewaymaps", "/proc/" + gw + "/maps", "EACCES"},
		{"signal.gateway", gw, "EPERM"},
		{"environ.othersandbox", sib, "EACCES"},
		{"signal.othersandbox", sib, "EPERM"},
		{"chmod.gatewayfile", w.secret, "EPERM"},
		{"unix.admin", w.adminSock, "EACCES"},
		{"unix.docker", w.dockerSock, "EACCES"},
		{"unix.postgres", w.pgSock, "EACCES"},
		{"tcp.loopback", w.tcpAddr, "EACCES"},
		{"tcpbind.loopback", "127.0.0.1:0", "EACCES"},
		{"udp.loopback", w.udpAddr, "EPERM"},
		{"mptcp.loopback", w.tcpAddr, "EPERM"},
	}
	// Sockets that Landlock's TCP rules do not see; tried only where this
	// kernel offers them, so that the control can be allowed.
	for key, spec := range map[string][3]int{
		"socket.vsock": {unix.AF_VSOCK, unix.SOCK_STREAM, 0},
		"socket.sctp":  {unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_SCTP},
		"socket.rds":   {unix.AF_RDS, unix.SOCK_SEQPACKET, 0},
	} {
		if fd, err := unix.Socket(spec[0], spec[1]|unix.SOCK_CLOEXEC, spec[2]); err == nil {
			unix.Close(fd)
			es = append(es, escape{key, fmt.Sprintf("%d/%d/%d", spec[0], spec[1], spec[2]), "EPERM"})
		}
	}
	// The i386 entry point, which a filter checking x86-64 numbers alone
	// would miss; where the kernel lacks it, the control says so and the
	// row is left out.
	es = append(es, escape{"compatudp", "", "EPERM"})
	if ln, err := net.ListenPacket("udp6", "[::1]:0"); err == nil {
		es = append(es, escape{"udp.loopback6", ln.LocalAddr().String(), "EPERM"})
		ln.Close()
	}
	return es
}

// inside lists what a sandboxed server with dirs d must still be able to do.
func (w *world) inside(d sandbox.Dirs, col string) map[string]string {
	return map[string]string{
		"write.ownwork": filepath.Join(d.Work, "ok-"+col),
		"write.ownhome": filepath.Join(d.Home, "ok-"+col),
		"write.owntmp":  filepath.Join(d.Tmp, "ok-"+col),
		"write.devnull": "/dev/null",
		"read.etc":      "/etc/passwd",
		"list.etc":      "/etc",
	}
}

// infoProbes report state; nofile and mmap test NoFile 64 and DataLimit
// 1 GiB from the fixture's policy.
var infoProbes = []string{"env", "fds", "caps", "nnp", "pdeathsig", "uid", "pgid", "nofile=70", "mmap=1280"}

type column struct {
	name      string
	sandboxed bool
	uid       uint32 // 0: the sandbox keeps the gateway's uid (root), capabilities dropped
	viaShell  bool   // the probe runs as a grandchild, through /bin/sh
}

// TestEscapeMatrix is RELIABILITY-TESTS E1–E11, E16, E17 and the NOFILE
// part of E12: every escape is allowed for a plain child (the control,
// without which the denials prove nothing) and denied under the sandbox,
// also for a grandchild, as the dedicated uid and as root without
// capabilities. As root, pathname unix sockets stay reachable below
// Landlock ABI 9 and chmod of the gateway's files is allowed: those are
// the documented gaps that the dedicated uid closes.
func TestEscapeMatrix(t *testing.T) {
	need(t, os.Geteuid() == 0, "switching to uid %d needs root", nobody)
	abi, err := sandbox.ABI()
	need(t, err == nil && abi >= 6, "needs Landlock ABI 6 or later (have %d, %v)", abi, err)
	_, err = os.Stat("/bin/sh")
	need(t, err == nil, "needs /bin/sh for the grandchild column: %v", err)

	probeBin := testbin.Build(t, "internal/cmd/escapeprobe")
	w := newWorld(t)
	// Another server, sandboxed as the same uid: only Landlock's domains
	// keep the probe from reading its environment or signalling it.
	other := sandboxed(t, w.policy(w.beta, nobody), "sleep", "1000")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	other.ExtraFiles[0].Close()
	t.Cleanup(func() {
		syscall.Kill(-other.Process.Pid, syscall.SIGKILL)
		other.Wait()
	})
	w.sibling = other.Process.Pid
	waitFor(t, 10*time.Second, "the other server to exec sleep", func() bool { return comm(w.sibling) == "sleep" })
	// Stands for the gateway's own environment, which no server may see.
	t.Setenv("MCPGATE_ADMIN_TOKEN", "gateway-only")
	// The root column's server keeps root-owned dirs: without
	// CAP_DAC_OVERRIDE it could not write nobody's.
	gamma, err := sandbox.Prepare(w.data, "gamma")
	if err != nil {
		t.Fatal(err)
	}
	own := func(c column) sandbox.Dirs {
		if c.sandboxed && c.uid == 0 {
			return gamma
		}
		return w.alpha
	}

	cols := []column{
		{name: "none"},
		{name: "none/sh", viaShell: true},
		{name: "sandbox", sandboxed: true, uid: nobody},
		{name: "sandbox/sh", sandboxed: true, uid: nobody, viaShell: true},
		{name: "sandbox-root", sandboxed: true},
	}
	results := map[string]map[string]string{}
	for _, c := range cols {
		args := []string{}
		for _, e := range w.escapes(safe(c.name)) {
			if e.param == "" {
				args = append(args, e.key)
				continue
			}
			args = append(args, e.key+"="+e.param)
		}
		for k, v := range w.inside(own(c), safe(c.name)) {
			args = append(args, k+"="+v)
		}
		args = append(args, infoProbes...)
		argv := append([]string{probeBin}, args...)
		if c.viaShell {
			// "; exit" keeps the shell from exec'ing the probe in place.
			argv = append([]string{"/bin/sh", "-c", `"$0" "$@"; exit $?`}, argv...)
		}
		var cmd *exec.Cmd
		if c.sandboxed {
			cmd = sandboxed(t, w.policy(own(c), c.uid), argv...)
		} else {
			cmd = exec.Command(argv[0], argv[1:]...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		}
		results[c.name] = probe(t, cmd)
	}
	t.Log("\n" + matrix(cols, results))

	unavailable := map[string]bool{}
	if v := results["none"]["compatudp"]; strings.HasPrefix(v, "error: ") {
		t.Logf("compatudp is not available on this machine: %s", v)
		unavailable["compatudp"] = true
	}
	for _, c := range cols {
		res := results[c.name]
		for _, e := range w.escapes(safe(c.name)) {
			if unavailable[e.key] {
				continue
			}
			got := res[e.key]
			want := "allowed"
			if c.sandboxed {
				want = "denied: " + e.deny
				if c.uid == 0 && strings.HasPrefix(e.key, "unix.") && abi < 9 {
					want = "allowed" // documented gap, see the doc comment
				}
				if c.uid == 0 && e.key == "chmod.gatewayfile" {
					want = "allowed" // Landlock does not govern chmod; the uid does
				}
			}
			if got != want {
				t.Errorf("%s: %s = %q, want %q", c.name, e.key, got, want)
			}
		}
		for k := range w.inside(own(c), safe(c.name)) {
			if res[k] != "allowed" {
				t.Errorf("%s: %s = %q, want allowed", c.name, k, res[k])
			}
		}
		// A plain child inherits whatever the test process inherited
		// without close-on-exec; the wrapper must not pass any of it on.
		if c.sandboxed && res["fds"] != "0,1,2" {
			t.Errorf("%s: open fds = %q, want 0,1,2 (E17)", c.name, res["fds"])
		}
		pid, pgid := parsePgid(t, res["pgid"])
		if c.viaShell == (pid == pgid) {
			t.Errorf("%s: %s: a direct child must lead its group, a grandchild must not", c.name, res["pgid"])
		}
		gotGatewayEnv := strings.Contains(","+res["env"]+",", ",MCPGATE_ADMIN_TOKEN,")
		if gotGatewayEnv == c.sandboxed {
			t.Errorf("%s: environment %s: the gateway's variables must reach a plain child and no sandboxed one", c.name, res["env"])
		}
		if c.sandboxed && !c.viaShell && res["env"] != "HOME,LANG,PATH,SERVER_TOKEN,TMPDIR" {
			t.Errorf("%s: environment %s, want the configured variables plus HOME, LANG, PATH, TMPDIR", c.name, res["env"])
		}
		if !c.sandboxed {
			if res["nofile"] != "allowed" || res["mmap"] != "allowed" {
				t.Errorf("%s: nofile = %q, mmap = %q, want both allowed", c.name, res["nofile"], res["mmap"])
			}
			continue
		}
		if res["mmap"] != "denied: ENOMEM" {
			t.Errorf("%s: mapping 1.25 GiB = %q, want denied: ENOMEM (RLIMIT_DATA 1 GiB)", c.name, res["mmap"])
		}
		if res["nofile"] != "denied: EMFILE" {
			t.Errorf("%s: 70 open files = %q, want denied: EMFILE (NOFILE 64)", c.name, res["nofile"])
		}
		if !strings.Contains(res["caps"], "CapEff=0000000000000000") {
			t.Errorf("%s: %s, want no effective capabilities", c.name, res["caps"])
		}
		if c.uid == 0 && !strings.Contains(res["caps"], "CapBnd=0000000000000000") {
			t.Errorf("%s: %s, want an empty bounding set", c.name, res["caps"])
		}
		if res["nnp"] != "NoNewPrivs=1" {
			t.Errorf("%s: %s, want NoNewPrivs=1", c.name, res["nnp"])
		}
		wantUID := fmt.Sprintf("uid=%d euid=%d", c.uid, c.uid)
		if res["uid"] != wantUID {
			t.Errorf("%s: %s, want %s", c.name, res["uid"], wantUID)
		}
		if !c.viaShell && res["pdeathsig"] != strconv.Itoa(int(syscall.SIGKILL)) {
			t.Errorf("%s: parent-death signal %s, want SIGKILL to survive setuid and exec", c.name, res["pdeathsig"])
		}
	}
}

func safe(col string) string { return strings.ReplaceAll(col, "/", "-") }

func parsePgid(t *testing.T, s string) (pid, pgid int) {
	t.Helper()
	if _, err := fmt.Sscanf(s, "pid=%d pgid=%d", &pid, &pgid); err != nil {
		t.Fatalf("parsing pgid probe %q: %v", s, err)
	}
	return pid, pgid
}

func matrix(cols []column, results map[string]map[string]string) string {
	keys := map[string]bool{}
	for _, r := range results {
		for k := range r {
			keys[k] = true
		}
	}
	var rows []string
	for k := range keys {
		rows = append(rows, k)
	}
	sort.Strings(rows)
	var b strings.Builder
	fmt.Fprintf(&b, "%-20s", "probe")
	for _, c := range cols {
		fmt.Fprintf(&b, " | %-24s", c.name)
	}
	b.WriteString("\n")
	for _, k := range rows {
		fmt.Fprintf(&b, "%-20s", k)
		for _, c := range cols {
			v := results[c.name][k]
			if len(v) > 24 {
				v = v[:24]
			}
			fmt.Fprintf(&b, " | %-24s", v)
		}
		b.WriteString("\n")
	}
	return b.String()
}
