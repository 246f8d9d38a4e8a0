package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// ExecArg is the hidden subcommand that runs the wrapper side (Exec).
const ExecArg = "__sandbox_exec"

// policyFD is where the policy pipe lands in the wrapper: the first of
// cmd.ExtraFiles.
const policyFD = 3

// maxPolicy bounds the policy so that it fits in one pipe buffer and can be
// written before the child starts, with no goroutine left behind.
const maxPolicy = 1 << 20

// Command returns an unstarted command that runs `self __sandbox_exec`,
// which confines itself by p and then execs argv in place, keeping the pid.
// self is the gateway's own executable (os.Executable()).
//
// The policy goes to the wrapper through a pipe in cmd.ExtraFiles. The
// caller owns stdin, stdout and stderr and starts the command; after Start
// it should close cmd.ExtraFiles[0] (the child has its own copy).
//
// The command gets an empty environment (the server's comes from p.Env),
// its own process group (pgid == pid, so kill(-pid) reaches grandchildren),
// p.UID/p.GID with no supplementary groups when p.UID is set, and SIGKILL
// as parent-death signal. Pdeathsig fires when the OS thread that started
// the child exits, not the process: start sandboxed children from a
// goroutine that holds runtime.LockOSThread for the child's lifetime, or
// rely on the process group and a startup sweep instead.
func Command(self string, p Policy, argv []string) (*exec.Cmd, error) {
	if len(argv) == 0 {
		return nil, errors.New("sandbox command: empty argv")
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("sandbox command: %w", err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encoding policy: %w", err)
	}
	if len(b) > maxPolicy {
		return nil, fmt.Errorf("sandbox command: policy is %d bytes, more than %d", len(b), maxPolicy)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("creating policy pipe: %w", err)
	}
	defer w.Close()
	if len(b) > 60<<10 {
		// The default pipe buffer is 64 KiB; grow it so the write below
		// cannot block on a reader that has not started yet.
		if _, err := unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, len(b)); err != nil {
			r.Close()
			return nil, fmt.Errorf("sizing policy pipe: %w", err)
		}
	}
	if _, err := w.Write(b); err != nil {
		r.Close()
		return nil, fmt.Errorf("writing policy: %w", err)
	}

	args := append([]string{ExecArg, "--policy-fd", fmt.Sprint(policyFD), "--"}, argv...)
	cmd := exec.Command(self, args...)
	cmd.Env = []string{}
	cmd.Dir = p.Dir
	cmd.ExtraFiles = []*os.File{r}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:   true,
		Pdeathsig: syscall.SIGKILL,
	}
	if p.UID != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: p.UID, Gid: p.GID, Groups: []uint32{}}
	}
	return cmd, nil
}
