package sandbox_test

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// session is an MCP client session over a child's stdin and stdout.
type session struct {
	*mcp.ClientSession
	cmd    *exec.Cmd
	stderr *lockedBuffer
}

// connect starts cmd and completes MCP initialize with the go-sdk client
// over the child's stdio (mcp.IOTransport, as the gateway core does).
func connect(ctx context.Context, tb testing.TB, cmd *exec.Cmd) *session {
	tb.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	s := &session{cmd: cmd, stderr: &lockedBuffer{}}
	cmd.Stderr = s.stderr
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "sandbox-test", Version: "1"},
		&mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
	cs, err := client.Connect(ctx, &mcp.IOTransport{Reader: stdout, Writer: stdin},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		s.kill()
		tb.Fatalf("initialize: %v\nstderr: %s", err, s.stderr)
	}
	s.ClientSession = cs
	return s
}

// close ends the session (stdin EOF) and the whole process group.
func (s *session) close() {
	if s.ClientSession != nil {
		s.ClientSession.Close()
	}
	s.kill()
}

func (s *session) kill() {
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	s.cmd.Wait()
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var _ io.Writer = (*lockedBuffer)(nil)
