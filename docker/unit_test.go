package docker

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestChooseImage(t *testing.T) {
	b := builtinImages
	tests := []struct {
		name    string
		server  string
		command string
		args    []string
		policy  ImagePolicy
		want    string
	}{
		{"server image wins", "example/own:1", "npx", nil, ImagePolicy{Images: map[string]string{"npx": "x"}}, "example/own:1"},
		{"uvx", "", "uvx", []string{"mcp-server-fetch"}, ImagePolicy{}, b[RuntimePython]},
		{"python3 by path", "", "/usr/bin/python3", []string{"-m", "srv"}, ImagePolicy{}, b[RuntimePython]},
		{"python3.12", "", "python3.12", nil, ImagePolicy{}, b[RuntimePython]},
		{"pip", "", "pip", []string{"install", "x"}, ImagePolicy{}, b[RuntimePython]},
		{"pipx", "", "pipx", []string{"run", "x"}, ImagePolicy{}, b[RuntimePython]},
		{"uvx git+ arg", "", "uvx", []string{"--from", "git+https://example.com/r.git", "srv"}, ImagePolicy{}, b[RuntimePythonGit]},
		{"uvx --from=git+", "", "uvx", []string{"--from=git+https://example.com/r.git", "srv"}, ImagePolicy{}, b[RuntimePythonGit]},
		{"pip PEP 508 git", "", "pip", []string{"install", "pkg @ git+https://example.com/r.git"}, ImagePolicy{}, b[RuntimePythonGit]},
		{"legit+ is not git", "", "uvx", []string{"legit+thing"}, ImagePolicy{}, b[RuntimePython]},
		{"git+ for node stays node", "", "npx", []string{"git+https://example.com/r.git"}, ImagePolicy{}, b[RuntimeNode]},
		{"npx", "", "npx", []string{"-y", "@scope/srv"}, ImagePolicy{}, b[RuntimeNode]},
		{"node", "", "node", []string{"srv.js"}, ImagePolicy{}, b[RuntimeNode]},
		{"yarn", "", "yarn", nil, ImagePolicy{}, b[RuntimeNode]},
		{"npm", "", "npm", nil, ImagePolicy{}, b[RuntimeNode]},
		{"go", "", "go", []string{"run", "example.com/srv@latest"}, ImagePolicy{}, b[RuntimeGo]},
		{"cargo", "", "cargo", nil, ImagePolicy{}, b[RuntimeRust]},
		{"rustc", "", "rustc", nil, ImagePolicy{}, b[RuntimeRust]},
		{"ruby", "", "ruby", nil, ImagePolicy{}, b[RuntimeRuby]},
		{"gem", "", "gem", nil, ImagePolicy{}, b[RuntimeRuby]},
		{"php", "", "php", nil, ImagePolicy{}, b[RuntimePHP]},
		{"composer", "", "composer", nil, ImagePolicy{}, b[RuntimePHP]},
		{"sh", "", "sh", []string{"-c", "x"}, ImagePolicy{}, b[RuntimeShell]},
		{"bash", "", "/bin/bash", nil, ImagePolicy{}, b[RuntimeShell]},
		{"unknown", "", "my-server", nil, ImagePolicy{}, b[RuntimeShell]},
		{"registry rewrites docker.io", "", "npx", nil, ImagePolicy{Registry: "mirror.example.com/hub/"}, "mirror.example.com/hub/library/node:22-bookworm-slim"},
		{"registry rewrites ghcr", "", "uvx", nil, ImagePolicy{Registry: "mirror.example.com"}, "mirror.example.com/astral-sh/uv:python3.12-bookworm-slim"},
		{"registry leaves server image", "example/own:1", "uvx", nil, ImagePolicy{Registry: "mirror.example.com"}, "example/own:1"},
		{"operator runtime key", "", "npx", nil, ImagePolicy{Images: map[string]string{RuntimeNode: "corp/node:22"}}, "corp/node:22"},
		{"operator basename beats runtime", "", "npx", nil, ImagePolicy{Images: map[string]string{RuntimeNode: "corp/node", "npx": "corp/npx"}}, "corp/npx"},
		{"operator image not rewritten", "", "npx", nil, ImagePolicy{Registry: "m.example", Images: map[string]string{RuntimeNode: "corp/node:22"}}, "corp/node:22"},
		{"operator merge keeps other keys", "", "uvx", nil, ImagePolicy{Images: map[string]string{RuntimeNode: "corp/node"}}, b[RuntimePython]},
		{"git+ ignores basename override", "", "uvx", []string{"git+https://e.com/r"}, ImagePolicy{Images: map[string]string{"uvx": "corp/uv-nogit"}}, b[RuntimePythonGit]},
		{"operator python-git", "", "uvx", []string{"git+https://e.com/r"}, ImagePolicy{Images: map[string]string{RuntimePythonGit: "corp/uv-git"}}, "corp/uv-git"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ChooseImage(tt.server, tt.command, tt.args, tt.policy); got != tt.want {
				t.Errorf("ChooseImage(%q, %q, %q) = %q, want %q", tt.server, tt.command, tt.args, got, tt.want)
			}
		})
	}
}

func TestValidateExtraArgs(t *testing.T) {
	// Values as encoding/json decodes them into map[string]any.
	var fromJSON map[string]any
	if err := json.Unmarshal([]byte(`{"pids_limit": 64, "shm_size": "16m", "tmpfs_size": 1048576,
		"read_only_rootfs": false, "add_hosts": ["db.internal:10.0.0.5"], "dns": ["10.0.0.2"],
		"tmpfs": {"/home/node": "rw,nosuid,size=128m,mode=1777"}, "hostname": "srv",
		"nofile": 1024, "cpuset_cpus": "0-1", "init": true, "stop_grace": "500ms"}`), &fromJSON); err != nil {
		t.Fatal(err)
	}
	if err := ValidateExtraArgs(fromJSON); err != nil {
		t.Fatalf("valid JSON extra args refused: %v", err)
	}
	if err := ValidateExtraArgs(nil); err != nil {
		t.Fatalf("nil extra args refused: %v", err)
	}
	bad := []struct {
		name string
		args map[string]any
		key  string
	}{
		{"unknown key", map[string]any{"privileged": true}, "privileged"},
		{"binds are not extra args", map[string]any{"binds": []any{"/:/host"}}, "binds"},
		{"cap_add", map[string]any{"cap_add": []any{"SYS_ADMIN"}}, "cap_add"},
		{"fractional pids", map[string]any{"pids_limit": 1.5}, "pids_limit"},
		{"zero pids", map[string]any{"pids_limit": 0.0}, "pids_limit"},
		{"string pids", map[string]any{"pids_limit": "64"}, "pids_limit"},
		{"bad size", map[string]any{"shm_size": "lots"}, "shm_size"},
		{"bool as string", map[string]any{"read_only_rootfs": "false"}, "read_only_rootfs"},
		{"host without ip", map[string]any{"add_hosts": []any{"db"}}, "add_hosts"},
		{"host bad ip", map[string]any{"add_hosts": []any{"db:999.1.1.1"}}, "add_hosts"},
		{"dns not ip", map[string]any{"dns": []any{"dns.example"}}, "dns"},
		{"tmpfs relative", map[string]any{"tmpfs": map[string]any{"home": ""}}, "tmpfs"},
		{"tmpfs root", map[string]any{"tmpfs": map[string]any{"/": ""}}, "tmpfs"},
		{"tmpfs bad option", map[string]any{"tmpfs": map[string]any{"/x": "suid"}}, "tmpfs"},
		{"hostname with space", map[string]any{"hostname": "a b"}, "hostname"},
		{"cpuset text", map[string]any{"cpuset_cpus": "all"}, "cpuset_cpus"},
		{"grace too long", map[string]any{"stop_grace": "1h"}, "stop_grace"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateExtraArgs(tt.args)
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("ValidateExtraArgs(%v) = %v, want ErrInvalidSpec", tt.args, err)
			}
			if !strings.Contains(err.Error(), `"`+tt.key+`"`) {
				t.Errorf("error %q does not name key %q", err, tt.key)
			}
		})
	}
	if !slices.IsSorted(ExtraArgKeys()) {
		t.Errorf("ExtraArgKeys not sorted: %v", ExtraArgKeys())
	}
}

func TestConfigsHardening(t *testing.T) {
	r, err := New("replica-1", &Options{Host: "unix:///nonexistent.sock"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	spec := Spec{
		Server: "fs", Image: "img", Argv: []string{"srv", "--flag"},
		Env:         map[string]string{"API_KEY": "s3cret", "B": "2"},
		MemoryBytes: 256 << 20, CPUs: 0.5, PidsLimit: 64,
		ExtraArgs: map[string]any{"tmpfs_size": "8m", "hostname": "fs"},
	}
	x, err := spec.check()
	if err != nil {
		t.Fatal(err)
	}
	cfg, hc := r.configs(&spec, x)
	if cfg.User != DefaultUser || cfg.Tty || !cfg.OpenStdin || !cfg.StdinOnce || !cfg.AttachStdin {
		t.Errorf("config stdio/user: %+v", cfg)
	}
	if !slices.Equal(cfg.Env, []string{"API_KEY=s3cret", "B=2"}) {
		t.Errorf("env = %v", cfg.Env)
	}
	for _, a := range append(cfg.Cmd, cfg.Entrypoint...) {
		if strings.Contains(a, "s3cret") {
			t.Errorf("secret on the command line: %v", cfg.Cmd)
		}
	}
	if cfg.Labels[LabelManaged] != "true" || cfg.Labels[LabelReplica] != "replica-1" || cfg.Labels[LabelServer] != "fs" {
		t.Errorf("labels = %v", cfg.Labels)
	}
	if cfg.Hostname != "fs" {
		t.Errorf("hostname extra arg not applied: %q", cfg.Hostname)
	}
	if !hc.AutoRemove || hc.NetworkMode != "none" || !slices.Equal(hc.CapDrop, []string{"ALL"}) ||
		!slices.Contains(hc.SecurityOpt, "no-new-privileges:true") || !hc.ReadonlyRootfs ||
		hc.Init == nil || !*hc.Init || hc.LogConfig.Type != "none" || hc.Privileged {
		t.Errorf("host config not hardened: %+v", hc)
	}
	if len(hc.Binds) != 0 || len(hc.Mounts) != 0 {
		t.Errorf("mounts without a server dir: %v %v", hc.Binds, hc.Mounts)
	}
	if hc.Memory != 256<<20 || hc.MemorySwap != hc.Memory || hc.NanoCPUs != 5e8 || hc.PidsLimit == nil || *hc.PidsLimit != 64 {
		t.Errorf("limits: mem %d swap %d cpu %d pids %v", hc.Memory, hc.MemorySwap, hc.NanoCPUs, hc.PidsLimit)
	}
	if !strings.Contains(hc.Tmpfs["/tmp"], "size=8388608") || !strings.Contains(hc.Tmpfs["/tmp"], "noexec") {
		t.Errorf("/tmp tmpfs = %q", hc.Tmpfs["/tmp"])
	}

	spec.ServerDir = "/data/sandboxes/7"
	x, _ = spec.check()
	cfg, hc = r.configs(&spec, x)
	if len(hc.Mounts) != 1 || hc.Mounts[0].Source != "/data/sandboxes/7" || hc.Mounts[0].Target != DefaultServerDirPath || len(hc.Binds) != 0 {
		t.Errorf("server dir mount = %+v binds %v", hc.Mounts, hc.Binds)
	}
	if cfg.WorkingDir != DefaultServerDirPath {
		t.Errorf("working dir = %q, want the server dir", cfg.WorkingDir)
	}
}

func TestSpecRefused(t *testing.T) {
	r, err := New("replica-1", &Options{Host: "unix:///nonexistent.sock"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for name, spec := range map[string]Spec{
		"no image":           {Server: "a"},
		"host network":       {Server: "a", Image: "i", NetworkMode: "host"},
		"container network":  {Server: "a", Image: "i", NetworkMode: "container:gateway"},
		"bad env name":       {Server: "a", Image: "i", Env: map[string]string{"A=B": "c"}},
		"relative dir":       {Server: "a", Image: "i", ServerDir: "data/x"},
		"root mount point":   {Server: "a", Image: "i", ServerDir: "/d", ServerDirPath: "/"},
		"negative memory":    {Server: "a", Image: "i", MemoryBytes: -1},
		"unknown extra args": {Server: "a", Image: "i", ExtraArgs: map[string]any{"privileged": true}},
	} {
		t.Run(name, func(t *testing.T) {
			// The spec is refused before the engine is contacted, so the
			// error is ErrInvalidSpec even though no engine answers.
			_, err := r.Start(context.Background(), spec)
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("Start = %v, want ErrInvalidSpec", err)
			}
		})
	}
}

// TestEngineDown is F7: with no engine, Probe fails fast and Start says
// ErrUnavailable. It needs no engine, so it always runs.
func TestEngineDown(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "missing.sock")
	r, err := New("replica-down", &Options{Host: "unix://" + sock})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	start := time.Now()
	st, err := r.Probe(ctx)
	took := time.Since(start)
	if !errors.Is(err, ErrUnavailable) || st.Available || st.Err == nil {
		t.Fatalf("Probe = %+v, %v; want unavailable", st, err)
	}
	if took > ProbeTimeout {
		t.Errorf("Probe took %v, beyond its %v bound", took, ProbeTimeout)
	}
	t.Logf("probe of a missing socket failed in %v", took)
	again, _ := r.Probe(ctx)
	if !again.CheckedAt.Equal(st.CheckedAt) {
		t.Errorf("second Probe within the TTL probed again")
	}
	_, err = r.Start(ctx, Spec{Server: "s", Image: "whatever:1"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Start = %v, want ErrUnavailable", err)
	}
	if _, err := r.SweepOrphans(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("SweepOrphans = %v, want ErrUnavailable", err)
	}
}

// TestEngineHangs: a socket that accepts and never answers must not hold a
// probe past ProbeTimeout.
func TestEngineHangs(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "hang.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	r, err := New("replica-hang", &Options{Host: "unix://" + sock})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	start := time.Now()
	_, err = r.Probe(context.Background())
	took := time.Since(start)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Probe = %v, want ErrUnavailable", err)
	}
	// A bound, not a speed goal: the probe's own timeout plus scheduling slack.
	if took > ProbeTimeout+3*time.Second {
		t.Errorf("Probe took %v against a hung engine", took)
	}
}

func TestProbeCallerCancel(t *testing.T) {
	r, err := New("replica-c", &Options{Host: "unix:///nonexistent.sock"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Probe(ctx); err == nil {
		t.Fatal("Probe with a cancelled context succeeded")
	}
	r.mu.Lock()
	cached := r.hasProbe
	r.mu.Unlock()
	if cached {
		t.Error("a probe cut short by the caller was cached")
	}
}

func TestContainerName(t *testing.T) {
	for _, server := range []string{"fs", "my server/ü", "", strings.Repeat("x", 100), "-.-"} {
		n := containerName(server)
		if !nameUnsafe.MatchString(n) && strings.HasPrefix(n, "mcpgate-") && len(n) <= 64 {
			continue
		}
		t.Errorf("containerName(%q) = %q", server, n)
	}
}
