package sandbox_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/sandbox"
	"golang.org/x/sys/unix"
)

// spawnerArg makes the test binary act as a gateway that starts one
// sandboxed child, prints its pid and waits to be killed.
const spawnerArg = "test-spawner"

func spawner(args []string) int {
	var p sandbox.Policy
	if err := json.Unmarshal([]byte(args[0]), &p); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Pdeathsig follows the starting thread, so it stays alive and locked.
	runtime.LockOSThread()
	cmd, err := sandbox.Command(args[1], p, args[2:])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(cmd.Process.Pid)
	cmd.Wait()
	return 0
}

// TestChildDiesWithGateway checks that the parent-death signal set by
// Command survives the switch to the sandbox uid, the wrapper and the exec:
// killing the gateway (a spawner process here) kills the server.
func TestChildDiesWithGateway(t *testing.T) {
	w := newWorld(t)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })

	pol, err := json.Marshal(w.policy(w.alpha, nobody))
	if err != nil {
		t.Fatal(err)
	}
	gw := exec.Command(wrapper, spawnerArg, string(pol), wrapper, "sleep", "1000")
	gw.Stderr = os.Stderr
	out, err := gw.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		gw.Process.Kill()
		gw.Wait()
		t.Fatalf("reading the child's pid: %v", err)
	}
	child, _ := strconv.Atoi(strings.TrimSpace(line))
	waitFor(t, 10*time.Second, "the child to exec sleep", func() bool { return comm(child) == "sleep" })

	gw.Process.Kill()
	gw.Wait()
	// The child is reparented to us (subreaper); reap it once it is dead.
	done := make(chan syscall.WaitStatus, 1)
	go func() {
		var ws syscall.WaitStatus
		syscall.Wait4(child, &ws, 0, nil)
		done <- ws
	}()
	select {
	case ws := <-done:
		if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("child ended with %v, want killed by SIGKILL", ws)
		}
	case <-time.After(10 * time.Second):
		syscall.Kill(child, syscall.SIGKILL)
		t.Fatal("the sandboxed child outlived its gateway")
	}
}
