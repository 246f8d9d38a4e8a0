// Package sandbox confines a stdio MCP server natively: rlimits, an empty
// capability set, Landlock (filesystem, TCP and IPC scopes), and a seccomp
// filter for the sockets Landlock cannot see, applied by a small re-exec
// wrapper (`mcpgate __sandbox_exec`) that then execs the server in place,
// so the server keeps the wrapper's pid, process group and stdio.
//
// The parent builds a Policy and calls Command; the wrapper side is Exec.
// The package knows nothing of HTTP or Postgres.
//
// Spawning a server, in the gateway core:
//
//	abi, ok := sandbox.Available(sandbox.RecommendedMinABI) // !ok: isolated false, sandbox-unavailable
//	d, err := sandbox.PrepareOwned(dataDir, name, uid, gid)  // uid 0: keep the gateway's uid
//	p := sandbox.ServerPolicy(dataDir, d, server.Env)
//	p.NetworkNone, p.FailClosed, p.UID, p.GID = netNone, failClosed, uid, gid
//	self, err := os.Executable()
//	cmd, err := sandbox.Command(self, p, argv)
//	stdin, _ := cmd.StdinPipe(); stdout, _ := cmd.StdoutPipe(); cmd.Stderr = ring
//	err = cmd.Start(); cmd.ExtraFiles[0].Close()
//	// stop: kill(-cmd.Process.Pid, SIGTERM), grace, then SIGKILL
//
// and in cmd/mcpgate's main, from the main goroutine, before anything else:
//
//	if len(os.Args) > 1 && os.Args[1] == sandbox.ExecArg {
//		os.Exit(sandbox.Exec(os.Args[2:]))
//	}
//
// Orphaned grandchildren are reparented to the nearest subreaper: run the
// gateway under an init that reaps (compose init: true) or make it a
// subreaper (PR_SET_CHILD_SUBREAPER), or they stay as zombies.
package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Policy is everything the wrapper needs to confine one server. It travels
// as JSON over an inherited pipe, never in argv, because argv is readable by
// every process on the host and Env may hold the server's secrets.
type Policy struct {
	// DataDir is the gateway's data directory. Nothing in it is readable
	// except the Write and Read grants below it: the wrapper grants read
	// access entry by entry (every entry of / and, along DataDir's path,
	// every sibling) and never to DataDir or any of its ancestors.
	DataDir string `json:"data_dir"`
	// Read lists extra read-and-execute grants (an interpreter outside the
	// usual places, say). None may be DataDir or one of its ancestors.
	Read []string `json:"read,omitempty"`
	// Write lists directories with every filesystem right: the server's work
	// dir, home and tmp.
	Write []string `json:"write,omitempty"`
	// WriteFiles lists files that may be written, typically /dev/null.
	WriteFiles []string `json:"write_files,omitempty"`

	// NetworkNone denies TCP connect and bind (Landlock, ABI 4+) and, with
	// seccomp, what Landlock's TCP rules do not cover: UDP, raw, MPTCP and
	// SCTP sockets, address families other than unix, netlink and IP
	// (vsock, packet…), io_uring, and system calls of a foreign
	// architecture (i386 on x86-64). Unix sockets stay open.
	NetworkNone bool `json:"network_none,omitempty"`
	// NoFile is RLIMIT_NOFILE (soft and hard); 0 keeps the inherited limit.
	NoFile uint64 `json:"nofile,omitempty"`
	// DataLimit is RLIMIT_DATA in bytes; 0 means no limit. RLIMIT_AS is never
	// used: it breaks runtimes that reserve address space (node's WASM).
	DataLimit uint64 `json:"data_limit,omitempty"`

	// MinABI is the lowest Landlock ABI the wrapper accepts as confinement.
	MinABI int `json:"min_abi,omitempty"`
	// FailClosed makes the wrapper exit 126 instead of running degraded
	// (no Landlock: rlimits, no capabilities, the seccomp filter) when
	// Landlock is missing or below MinABI.
	FailClosed bool `json:"fail_closed,omitempty"`
	// Canary is a file that must be readable by file permissions yet denied
	// by the ruleset; the wrapper checks it before exec (see Prepare).
	Canary string `json:"canary,omitempty"`

	// Env is the command's whole environment (see ChildEnv).
	Env []string `json:"env,omitempty"`
	// Dir is the working directory; empty keeps the parent's.
	Dir string `json:"dir,omitempty"`
	// UID and GID, when UID is non-zero, are the credentials the command
	// runs as (no supplementary groups). Zero keeps the gateway's uid, and
	// the wrapper then drops every capability before exec.
	UID uint32 `json:"uid,omitempty"`
	GID uint32 `json:"gid,omitempty"`

	// FakeABI replaces the kernel's Landlock ABI in the wrapper's floor
	// check; a negative value means "no Landlock". Only tests set it.
	FakeABI int `json:"fake_abi,omitempty"`
}

// RecommendedMinABI is the Landlock floor for production: ABI 6 adds the
// signal and abstract-socket scopes that keep a server away from the
// gateway and from other servers.
const RecommendedMinABI = 6

// DefaultNoFile is the RLIMIT_NOFILE that ServerPolicy sets.
const DefaultNoFile = 1024

// ServerPolicy is the production policy for one server whose dirs are d:
// writes only to d and /dev/null, nothing of the data dir readable beyond
// d, its environment from ChildEnv, d.Work as working dir, RLIMIT_NOFILE
// DefaultNoFile, floor RecommendedMinABI. The caller adds what depends on
// configuration: NetworkNone, DataLimit, FailClosed, UID/GID (the same ones
// given to PrepareOwned).
func ServerPolicy(dataDir string, d Dirs, env map[string]string) Policy {
	return Policy{
		DataDir:    dataDir,
		Write:      []string{d.Work, d.Home, d.Tmp},
		WriteFiles: []string{"/dev/null"},
		NoFile:     DefaultNoFile,
		MinABI:     RecommendedMinABI,
		Canary:     d.Canary,
		Env:        ChildEnv(env, d),
		Dir:        d.Work,
	}
}

// Dirs are one server's private directories, as made by Prepare.
type Dirs struct {
	Work string
	Home string
	Tmp  string
	// Canary is a world-readable file under the data dir that no server is
	// granted, for Policy.Canary.
	Canary string
}

var serverName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// Prepare makes <dataDir>/sandboxes/<server>/{work,home,tmp} and the
// canary file, owned by the caller. Use PrepareOwned when the server runs
// as a dedicated uid.
func Prepare(dataDir, server string) (Dirs, error) {
	return PrepareOwned(dataDir, server, 0, 0)
}

// PrepareOwned is Prepare with the server's dirs owned by uid:gid when uid
// is non-zero. dataDir itself must be searchable (o+x) by that uid. The sandboxes dir is
// 0711, so a sandboxed uid can reach its own dirs without listing the other
// servers; each server's dirs are 0700. Landlock, not ownership, keeps
// servers that share a uid apart: a Policy grants only its own Dirs. The
// gateway's own files belong in <dataDir>/gateway, which is never granted.
func PrepareOwned(dataDir, server string, uid, gid uint32) (Dirs, error) {
	if !serverName.MatchString(server) {
		return Dirs{}, fmt.Errorf("preparing sandbox: invalid server name %q", server)
	}
	dataDir, err := filepath.Abs(dataDir)
	if err != nil {
		return Dirs{}, fmt.Errorf("preparing sandbox: %w", err)
	}
	root := filepath.Join(dataDir, "sandboxes")
	if err := os.MkdirAll(root, 0o711); err != nil {
		return Dirs{}, fmt.Errorf("preparing sandbox: %w", err)
	}
	if err := os.Chmod(root, 0o711); err != nil {
		return Dirs{}, fmt.Errorf("preparing sandbox: %w", err)
	}
	canary := filepath.Join(root, ".canary")
	if err := os.WriteFile(canary, []byte("sandbox canary: readable only when confinement is broken\n"), 0o644); err != nil {
		return Dirs{}, fmt.Errorf("writing canary: %w", err)
	}
	if err := os.Chmod(canary, 0o644); err != nil {
		return Dirs{}, fmt.Errorf("writing canary: %w", err)
	}
	base := filepath.Join(root, server)
	d := Dirs{
		Work:   filepath.Join(base, "work"),
		Home:   filepath.Join(base, "home"),
		Tmp:    filepath.Join(base, "tmp"),
		Canary: canary,
	}
	for _, p := range []string{base, d.Work, d.Home, d.Tmp} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			return Dirs{}, fmt.Errorf("preparing sandbox: %w", err)
		}
		if uid != 0 {
			if err := os.Lchown(p, int(uid), int(gid)); err != nil {
				return Dirs{}, fmt.Errorf("preparing sandbox: %w", err)
			}
		}
	}
	return d, nil
}

// DefaultPath is the PATH a child gets when its configuration sets none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ChildEnv is the environment of a sandboxed server: its configured
// variables plus PATH, HOME, TMPDIR and LANG (configured values win for
// PATH and LANG; HOME and TMPDIR always point at the server's own dirs).
// Nothing of the gateway's environment is included.
func ChildEnv(configured map[string]string, d Dirs) []string {
	env := make([]string, 0, len(configured)+4)
	fixed := map[string]string{"HOME": d.Home, "TMPDIR": d.Tmp}
	defaults := map[string]string{"PATH": DefaultPath, "LANG": "C.UTF-8"}
	for k, v := range configured {
		if _, ok := fixed[k]; ok {
			continue
		}
		if _, ok := defaults[k]; ok {
			defaults[k] = v
			continue
		}
		env = append(env, k+"="+v)
	}
	for _, m := range []map[string]string{fixed, defaults} {
		for k, v := range m {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// Validate reports a policy that could not confine: no data dir, relative
// paths, or a grant that would expose the data dir.
func (p *Policy) Validate() error {
	if p.DataDir == "" || !filepath.IsAbs(p.DataDir) || filepath.Clean(p.DataDir) == "/" {
		return errors.New("policy: data_dir must be an absolute path below /")
	}
	data := filepath.Clean(p.DataDir)
	if r, err := filepath.EvalSymlinks(data); err == nil {
		data = r
	}
	check := func(kind string, paths []string) error {
		for _, g := range paths {
			if !filepath.IsAbs(g) {
				return fmt.Errorf("policy: %s grant %q is not absolute", kind, g)
			}
			if exposes(g, data) {
				return fmt.Errorf("policy: %s grant %q would expose the data dir", kind, g)
			}
		}
		return nil
	}
	if err := check("read", p.Read); err != nil {
		return err
	}
	if err := check("write", p.Write); err != nil {
		return err
	}
	if err := check("write file", p.WriteFiles); err != nil {
		return err
	}
	if p.UID != 0 && p.GID == 0 {
		return errors.New("policy: a sandbox uid needs a non-root gid")
	}
	if !filepath.IsAbs(p.Canary) {
		return errors.New("policy: canary must be an absolute path (see Dirs.Canary)")
	}
	return nil
}

// exposes reports whether a grant on path would cover data, also when path
// is (or passes through) a symlink.
func exposes(path, data string) bool {
	if isAncestorOrSelf(filepath.Clean(path), data) {
		return true
	}
	r, err := filepath.EvalSymlinks(path)
	return err == nil && isAncestorOrSelf(r, data)
}

// isAncestorOrSelf reports whether dir is path or one of its ancestors.
func isAncestorOrSelf(dir, path string) bool {
	if dir == path || dir == "/" {
		return true
	}
	return strings.HasPrefix(path, dir+"/")
}

// readGrants lists what the wrapper grants read access to: every entry of
// / and, walking down to the data dir, every sibling of each step, so that
// no grant covers the data dir. Entries created later are not covered;
// the wrapper computes this at each start.
func readGrants(dataDir string) ([]string, error) {
	data, err := filepath.EvalSymlinks(dataDir)
	if err != nil {
		return nil, fmt.Errorf("resolving data dir: %w", err)
	}
	var grants []string
	dir := "/"
	for _, part := range strings.Split(strings.TrimPrefix(data, "/"), "/") {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrPermission) {
			// Unlistable by this uid: grant none of its siblings, which
			// errs on the side of less access.
			dir = filepath.Join(dir, part)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", dir, err)
		}
		for _, e := range entries {
			if e.Name() == part {
				continue
			}
			g := filepath.Join(dir, e.Name())
			// A sibling may be a symlink to an ancestor of the data dir
			// (/var/run -> /run); Landlock would follow it.
			r, err := filepath.EvalSymlinks(g)
			if err != nil || isAncestorOrSelf(r, data) || isAncestorOrSelf(data, r) {
				continue
			}
			grants = append(grants, g)
		}
		dir = filepath.Join(dir, part)
	}
	return grants, nil
}
