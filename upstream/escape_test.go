package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/testbin"
	"github.com/mcpgate/mcpgate/internal/testimage"
	"github.com/mcpgate/mcpgate/sandbox"
)

// TestEscapeMatrixByMode runs the escape probe as a server's child through
// the launcher the gateway uses, under none (the control: everything must
// be allowed, or the matrix proves nothing), sandbox and docker, and prints
// the matrix. Every cell under sandbox and docker must be denied.
func TestEscapeMatrixByMode(t *testing.T) {
	require(t, os.Geteuid() == 0, "the sandbox column switches uid, which needs root")
	_, ok := sandbox.Available(sandbox.RecommendedMinABI)
	require(t, ok, "Landlock ABI below the floor")
	l, _ := isolatingLauncher(t, true)
	probe := testbin.Build(t, "internal/cmd/escapeprobe")
	ref := fmt.Sprintf("mcpgate-test/escapeprobe:%d", os.Getpid())
	testimage.Scratch(t, testimage.Client(t), ref, map[string]string{"escapeprobe": probe}, "USER 65534:65534")

	// What a child must not reach: the gateway's files, another server's
	// dir, the gateway process, its sockets, and (network none) the network.
	secret := filepath.Join(l.DataDir, "gateway", "secret.key")
	if err := os.WriteFile(secret, []byte("key"), 0o600); err != nil {
		t.Fatal(err)
	}
	otherDirs, err := sandbox.PrepareOwned(l.DataDir, "other", l.SandboxUID, l.SandboxGID)
	if err != nil {
		t.Fatal(err)
	}
	otherFile := filepath.Join(otherDirs.Work, "notes")
	if err := os.WriteFile(otherFile, []byte("theirs"), 0o600); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	os.Chmod(outside, 0o700)
	sockDir := t.TempDir()
	sockets := map[string]string{}
	for _, name := range []string{"admin", "docker", "db"} {
		path := filepath.Join(sockDir, name+".sock")
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		os.Chmod(path, 0o600)
		t.Cleanup(func() { ln.Close() })
		go acceptAll(ln)
		sockets[name] = path
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	go acceptAll(tcp)
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	datagrams := make(chan struct{}, 100)
	go func() {
		buf := make([]byte, 1500)
		for {
			if _, _, err := udp.ReadFrom(buf); err != nil {
				return
			}
			datagrams <- struct{}{}
		}
	}()
	// A UDP send "succeeds" whether or not anything receives it: what
	// counts is whether the datagram reached the host's listener.
	udpArrived := func() bool {
		select {
		case <-datagrams:
			return true
		case <-time.After(200 * time.Millisecond):
			return false
		}
	}

	probes := []string{
		"write.outside=" + filepath.Join(outside, "escaped"),
		"read.datadir=" + secret,
		"read.other=" + otherFile,
		"write.other=" + filepath.Join(otherDirs.Work, "planted"),
		fmt.Sprintf("environ.gateway=%d", os.Getpid()),
		fmt.Sprintf("signal.gateway=%d", os.Getpid()),
		"unix.admin=" + sockets["admin"],
		"unix.docker=" + sockets["docker"],
		"unix.db=" + sockets["db"],
		"tcp=" + tcp.Addr().String(),
		"udp=" + udp.LocalAddr().String(),
		"mptcp=" + tcp.Addr().String(),
	}
	results := map[string]map[string]string{}
	for _, mode := range []string{"none", "sandbox", "docker"} {
		spec := Spec{Server: "probe-" + mode, Command: probe, Args: probes, Isolation: Isolation{Mode: mode, NetworkMode: "none"}}
		if mode == "docker" {
			spec.Command, spec.Isolation.Image = "/escapeprobe", ref
		}
		results[mode] = runProbe(t, l, spec)
		if results[mode]["udp"] == "allowed" && !udpArrived() {
			results[mode]["udp"] = "denied: not delivered"
		}
	}
	// Grandchildren: the same probes through sh -c under sandbox (a
	// container has no other way out than its own processes, and the
	// scratch image has no shell).
	sh := shell(t)
	quoted := make([]string, len(probes))
	for i, p := range probes {
		quoted[i] = "'" + p + "'"
	}
	results["sandbox via sh"] = runProbe(t, l, Spec{Server: "probe-sh", Command: sh,
		Args: []string{"-c", probe + " " + strings.Join(quoted, " ")}, Isolation: Isolation{Mode: "sandbox", NetworkMode: "none"}})
	if results["sandbox via sh"]["udp"] == "allowed" && !udpArrived() {
		results["sandbox via sh"]["udp"] = "denied: not delivered"
	}

	var b strings.Builder
	cols := []string{"none", "sandbox", "sandbox via sh", "docker"}
	fmt.Fprintf(&b, "\n%-18s", "probe")
	for _, c := range cols {
		fmt.Fprintf(&b, " %-22s", c)
	}
	keys := make([]string, 0, len(probes))
	for _, p := range probes {
		keys = append(keys, strings.SplitN(p, "=", 2)[0])
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "\n%-18s", k)
		for _, c := range cols {
			fmt.Fprintf(&b, " %-22s", results[c][k])
		}
	}
	t.Log(b.String())
	for _, k := range keys {
		if got := results["none"][k]; got != "allowed" {
			t.Errorf("control: %s = %q under none, want allowed", k, got)
		}
		for _, c := range cols[1:] {
			if got := results[c][k]; !strings.HasPrefix(got, "denied") {
				t.Errorf("%s = %q under %s, want denied", k, got, c)
			}
		}
	}
}

func acceptAll(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

func runProbe(t *testing.T, l Launcher, spec Spec) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	child, err := l.Launch(ctx, spec)
	if err != nil {
		t.Fatalf("launching the probe under %s: %v", spec.Isolation.Mode, err)
	}
	defer child.Stop(context.Background())
	out, err := io.ReadAll(child.Stdout())
	if err != nil {
		t.Fatalf("reading the probe under %s: %v", spec.Isolation.Mode, err)
	}
	var res map[string]string
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("probe under %s printed %q: %v", spec.Isolation.Mode, out, err)
	}
	return res
}

// The operator's RLIMIT_NOFILE reaches sandboxed children.
func TestSandboxNoFile(t *testing.T) {
	_, ok := sandbox.Available(sandbox.RecommendedMinABI)
	require(t, ok, "Landlock ABI below the floor")
	l, _ := isolatingLauncher(t, false)
	probe := testbin.Build(t, "internal/cmd/escapeprobe")
	spec := Spec{Server: "nofile", Command: probe, Args: []string{"nofile=100"}, Isolation: Isolation{Mode: "sandbox", NetworkMode: "none"}}
	if got := runProbe(t, l, spec)["nofile"]; got != "allowed" {
		t.Fatalf("100 files under the default limit: %q", got)
	}
	l.NoFile = 64
	if got := runProbe(t, l, spec)["nofile"]; got != "denied: EMFILE" {
		t.Fatalf("100 files under NoFile 64: %q, want denied: EMFILE", got)
	}
}
