package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	// Re-executed as another uid: act as a client of the admin socket.
	if path := os.Getenv("E2E_SOCKET_CLIENT"); path != "" {
		code, err := socketGet(path, "/api/v1/status")
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(0)
		}
		fmt.Println("status:", code)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func socketGet(path, url string) (int, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
	resp, err := c.Get("http://mcpgate" + url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// B7/L2: the admin socket does not exist by default; enabled, it is 0600,
// answers its own uid as admin, and closes a connection from another uid
// even when file permissions would let it in.
func TestAdminSocket(t *testing.T) {
	data := dataDir(t)
	sock := filepath.Join(data, "mcpgate.sock")

	g := startGateway(t, "MCPGATE_DATA_DIR="+data)
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket file with the default settings: %v", err)
	}
	g.stop(t)

	g = startGateway(t, "MCPGATE_DATA_DIR="+data, "MCPGATE_ENABLE_SOCKET=true")
	st, err := os.Lstat(sock)
	if err != nil {
		t.Fatalf("socket enabled but missing: %v", err)
	}
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode = %v, want a socket with 0600", st.Mode())
	}
	if code, err := socketGet(sock, "/api/v1/status"); err != nil || code != 200 {
		t.Fatalf("same uid over the socket: %d %v, want 200", code, err)
	}
	if code, _ := socketGet(sock, "/api/v1/config"); code != 200 {
		t.Fatalf("same uid is not admin: /config = %d", code)
	}
	if os.Geteuid() != 0 {
		if os.Getenv("MCPGATE_TEST_STRICT") != "" {
			t.Fatal("the other-uid half of this test needs root")
		}
		t.Skip("the other-uid half of this test needs root")
	}
	// Open the file to everyone, so only the peer-uid check stands.
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "mcpgate-e2e-bin-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "client")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = []string{"E2E_SOCKET_CLIENT=" + sock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client as uid 65534: %v %s", err, out)
	}
	if !strings.HasPrefix(string(out), "error:") {
		t.Fatalf("a client running as uid 65534 got %q; want the connection closed", out)
	}
	g.stop(t)
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket file left after shutdown: %v", err)
	}
}
