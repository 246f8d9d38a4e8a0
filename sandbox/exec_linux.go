package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	"golang.org/x/sys/unix"
)

// Exit codes of the wrapper when it does not exec, after the shell's
// convention: 126 the command cannot be run (confinement failed or was
// refused), 127 the command was not found.
const (
	ExitRefused  = 126
	ExitNotFound = 127
)

// Exec is the wrapper side, run as `self __sandbox_exec --policy-fd 3 --
// argv...` (args excludes the subcommand). It confines the process and
// execs argv in place; it returns only when that failed, with the exit
// code to use, after saying why on stderr.
//
// Order: read and close the policy; rlimits; no_new_privs; the Landlock ABI
// floor (refuse, or run DEGRADED with rlimits only); resolve the command
// while everything is still visible; Landlock (filesystem, TCP when
// NetworkNone, IPC scopes); the seccomp network filter; drop every
// capability; check that the canary is denied; exec.
//
// Call it from the main goroutine (main or TestMain): the package pins that
// goroutine to the main thread when the process was started as the
// wrapper, and the exec must happen there, because the parent-death
// signal and the capabilities dropped here belong to a thread, and only
// the exec'ing thread's survive.
func Exec(args []string) int {
	// Landlock and seccomp are applied to every thread regardless.
	runtime.LockOSThread()

	p, argv, err := readPolicy(args)
	if err != nil {
		return refuse("%v", err)
	}
	if err := setRlimits(p); err != nil {
		return refuse("%v", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return refuse("setting no_new_privs: %v", err)
	}

	abi, abiErr := ABI()
	if p.FakeABI != 0 {
		abi, abiErr = p.FakeABI, nil
		if p.FakeABI < 0 {
			abi, abiErr = 0, errors.New("landlock unavailable (faked)")
		}
	}
	floor := max(p.MinABI, 1)
	confine := abiErr == nil && abi >= floor
	if !confine {
		why := fmt.Sprintf("landlock ABI %d is below the floor %d", abi, floor)
		if abiErr != nil {
			why = abiErr.Error()
		}
		if p.FailClosed {
			return refuse("%s; failing closed", why)
		}
		fmt.Fprintf(os.Stderr, "mcpgate sandbox: DEGRADED: %s; running without Landlock (rlimits and no capabilities only), not isolated\n", why)
	}

	bin, err := lookPath(argv[0], p.Env)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mcpgate sandbox: %v\n", err)
		return ExitNotFound
	}

	if confine {
		if err := restrict(p); err != nil {
			return refuse("applying landlock: %v", err)
		}
	}
	if p.NetworkNone {
		if err := loadNetworkFilter(); err != nil {
			return refuse("%v", err)
		}
	}
	if err := dropCapabilities(); err != nil {
		return refuse("dropping capabilities: %v", err)
	}
	if confine {
		if err := checkCanary(p.Canary); err != nil {
			return refuse("%v", err)
		}
	}
	// Nothing but stdio may cross into the server, whatever the caller
	// passed by mistake.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return refuse("closing inherited descriptors: %v", err)
	}
	err = syscall.Exec(bin, argv, p.Env)
	fmt.Fprintf(os.Stderr, "mcpgate sandbox: executing %s: %v\n", bin, err)
	if errors.Is(err, syscall.ENOENT) {
		return ExitNotFound
	}
	return ExitRefused
}

func init() {
	// Locking in init keeps main (and so Exec) on the main thread, the one
	// that carries the parent-death signal set at fork. Only the wrapper
	// pays for it; the gateway itself is not pinned.
	if len(os.Args) > 1 && os.Args[1] == ExecArg {
		runtime.LockOSThread()
	}
}

func refuse(format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "mcpgate sandbox: "+format+"\n", a...)
	return ExitRefused
}

func readPolicy(args []string) (*Policy, []string, error) {
	if len(args) < 4 || args[0] != "--policy-fd" || args[2] != "--" {
		return nil, nil, errors.New("usage: __sandbox_exec --policy-fd N -- command [args...]")
	}
	fd, err := strconv.Atoi(args[1])
	if err != nil || fd < 3 {
		return nil, nil, fmt.Errorf("bad policy fd %q", args[1])
	}
	f := os.NewFile(uintptr(fd), "policy")
	b, err := io.ReadAll(io.LimitReader(f, maxPolicy+1))
	f.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("reading policy: %w", err)
	}
	var p Policy
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, nil, fmt.Errorf("decoding policy: %w", err)
	}
	if err := p.Validate(); err != nil {
		return nil, nil, err
	}
	return &p, args[3:], nil
}

func setRlimits(p *Policy) error {
	if err := syscall.Setrlimit(unix.RLIMIT_CORE, &syscall.Rlimit{}); err != nil {
		return fmt.Errorf("setting RLIMIT_CORE: %w", err)
	}
	if p.NoFile != 0 {
		// syscall.Setrlimit (not x/sys) so the runtime forgets the soft
		// limit it would otherwise restore at exec.
		if err := syscall.Setrlimit(unix.RLIMIT_NOFILE, &syscall.Rlimit{Cur: p.NoFile, Max: p.NoFile}); err != nil {
			return fmt.Errorf("setting RLIMIT_NOFILE: %w", err)
		}
	}
	if p.DataLimit != 0 {
		if err := syscall.Setrlimit(unix.RLIMIT_DATA, &syscall.Rlimit{Cur: p.DataLimit, Max: p.DataLimit}); err != nil {
			return fmt.Errorf("setting RLIMIT_DATA: %w", err)
		}
	}
	return nil
}

// lookPath resolves name with the server's PATH, not the wrapper's (which
// is empty).
func lookPath(name string, env []string) (string, error) {
	path := DefaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	if err := os.Setenv("PATH", path); err != nil {
		return "", err
	}
	return exec.LookPath(name)
}

func restrict(p *Policy) error {
	reads, err := readGrants(p.DataDir)
	if err != nil {
		return err
	}
	reads = append(reads, p.Read...)
	var roDirs, roFiles []string
	for _, g := range reads {
		fi, err := os.Stat(g)
		if err != nil {
			continue // gone or dangling: nothing to grant
		}
		if fi.IsDir() {
			roDirs = append(roDirs, g)
		} else {
			roFiles = append(roFiles, g)
		}
	}
	rules := []landlock.Rule{
		landlock.RODirs(roDirs...).IgnoreIfMissing(),
		landlock.ROFiles(roFiles...).IgnoreIfMissing(),
		landlock.RWDirs(p.Write...),
		landlock.RWFiles(p.WriteFiles...).IgnoreIfMissing(),
	}
	cfg := landlock.V11.BestEffort().EnableLoggingForSubprocesses()
	if !p.NetworkNone {
		cfg.HandledAccessNet = 0
	}
	return cfg.Restrict(rules...)
}

// dropCapabilities empties the bounding, ambient, inheritable, permitted
// and effective sets of this thread (the one that execs). A root child
// with capabilities could read /proc/<gateway>/environ despite Landlock.
// Without CAP_SETPCAP (a non-root wrapper) the bounding set cannot shrink,
// but there is nothing left to gain from it under no_new_privs.
func dropCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	if data[0].Effective&(1<<unix.CAP_SETPCAP) != 0 {
		for c := 0; c <= unix.CAP_LAST_CAP+32; c++ {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				if errors.Is(err, unix.EINVAL) {
					break // past the kernel's last capability
				}
				return fmt.Errorf("dropping bounding capability %d: %w", c, err)
			}
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	data = [2]unix.CapUserData{}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return err
	}
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	for _, d := range data {
		if d.Effective|d.Permitted|d.Inheritable != 0 {
			return errors.New("capabilities remain after dropping them")
		}
	}
	return nil
}

// checkCanary proves the ruleset is in force: the canary must be readable
// by file permissions (access(2), which Landlock does not mediate) and yet
// refused with EACCES on open.
func checkCanary(path string) error {
	if err := unix.Access(path, unix.R_OK); err != nil {
		return fmt.Errorf("canary %s must exist and be readable by file permissions: %w", path, err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
		return fmt.Errorf("canary %s is readable: confinement is not in force", path)
	}
	if !errors.Is(err, unix.EACCES) {
		return fmt.Errorf("canary %s: unexpected %w", path, err)
	}
	return nil
}
