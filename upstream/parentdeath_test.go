package upstream

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const helperEnv = "UPSTREAM_TEST_HELPER"

// runParentHelper plays a gateway: it launches a child, reports its pid and
// waits to be killed.
func runParentHelper() {
	c, err := (&ProcessLauncher{}).Launch(context.Background(), Spec{Command: "sleep", Args: []string{"1000"}})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println(c.(interface{ Pid() int }).Pid())
	select {}
}

// TestChildDiesWithGateway: SIGKILL to the gateway takes its child along
// (parent-death signal), even though the child was started from another
// goroutine than the one that blocks.
func TestChildDiesWithGateway(t *testing.T) {
	shell(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=parent")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("helper said %q", line)
	}
	defer syscall.Kill(pid, syscall.SIGKILL) // should the test fail
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("child %d not running: %v", pid, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	// The orphan comes to this process (a subreaper): reap it once dead.
	eventually(t, 10*time.Second, "child of the killed gateway gone", func() bool {
		var ws syscall.WaitStatus
		if got, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); got == pid {
			return ws.Signaled() && ws.Signal() == syscall.SIGKILL
		}
		return syscall.Kill(pid, 0) != nil
	})
}
