// Package doctor checks a deployment the way an operator would before
// trusting it: the database and its durability, the secret key, what the
// host offers for isolation, how each server resolves, and the mixes of
// settings that give a child more reach than it should have.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"syscall"

	"github.com/mcpgate/mcpgate/config"
	"github.com/mcpgate/mcpgate/isolation"
	"github.com/mcpgate/mcpgate/keyring"
	"github.com/mcpgate/mcpgate/migrations"
	"github.com/mcpgate/mcpgate/settings"
	"github.com/mcpgate/mcpgate/store"
)

// Check statuses.
const (
	OK    = "ok"
	Warn  = "warn"
	Error = "error"
)

// Check is one finding.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

// Report is every finding; OK is false when any check warns or fails.
type Report struct {
	OK     bool    `json:"ok"`
	Checks []Check `json:"checks"`
}

// Inputs are the facts the checks read.
type Inputs struct {
	Config    config.Config
	Store     *store.Store // nil when the database could not be opened
	StoreErr  error
	Host      isolation.Host
	DockerAPI string
	// DockerSocket is the engine's unix socket path, if it is one.
	DockerSocket string
}

func (r *Report) add(name, status, format string, args ...any) {
	r.Checks = append(r.Checks, Check{Name: name, Status: status, Detail: fmt.Sprintf(format, args...)})
}

// Run performs every check.
func Run(ctx context.Context, in Inputs) Report {
	var r Report
	cfg := in.Config
	globalMode := isolation.DefaultGlobal(in.Host)

	if in.Store == nil {
		r.add("database", Error, "unreachable: %v", in.StoreErr)
	} else if err := in.Store.Ping(ctx); err != nil {
		r.add("database", Error, "unreachable: %v", err)
	} else {
		r.add("database", OK, "reachable")
		if pending, err := migrations.Pending(ctx, in.Store.Pool()); err != nil || len(pending) > 0 {
			r.add("migrations", Error, "not current: pending %v %v", pending, errOrEmpty(err))
		} else {
			r.add("migrations", OK, "current")
		}
		fsync, sc, err := in.Store.DurabilitySettings(ctx)
		switch {
		case err != nil:
			r.add("durability", Error, "cannot read fsync and synchronous_commit: %v", err)
		case fsync != "on" || sc == "off":
			r.add("durability", Error, "fsync=%s synchronous_commit=%s: acknowledged writes can be lost in a crash; turn both on", fsync, sc)
		default:
			r.add("durability", OK, "fsync=%s synchronous_commit=%s", fsync, sc)
		}
		var cfgDoc settings.Config
		if err := in.Store.GetSetting(ctx, settings.Key, &cfgDoc); err == nil {
			globalMode = cfgDoc.Isolation.GlobalMode
		}
	}

	checkSecretKey(&r, cfg.SecretKeyFile)

	// What the host lacks matters only where a server needs it: that is
	// judged per server below.
	switch {
	case in.Host.LandlockABI == 0:
		r.add("landlock", OK, "not available")
	case !in.Host.SandboxAvailable():
		r.add("landlock", OK, "ABI %d, below the floor %d: the sandbox is not trusted as isolation", in.Host.LandlockABI, isolation.MinABI)
	default:
		r.add("landlock", OK, "ABI %d", in.Host.LandlockABI)
	}
	if in.Host.DockerAvailable {
		r.add("docker", OK, "engine answers, API %s", in.DockerAPI)
	} else {
		r.add("docker", OK, "no engine answered within 2 s")
	}
	if cfg.EnableSocket {
		r.add("admin socket", Warn, "enabled at %s/mcpgate.sock: any process running as this uid acts as admin", cfg.DataDir)
	} else {
		r.add("admin socket", OK, "off")
	}
	r.add("global isolation", OK, "%s", globalMode)

	if in.Store != nil {
		checkServers(ctx, &r, in, globalMode)
	}
	r.OK = true
	for _, c := range r.Checks {
		if c.Status != OK {
			r.OK = false
		}
	}
	return r
}

func errOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func checkSecretKey(r *Report, path string) {
	st, err := os.Stat(path)
	if err != nil {
		r.add("secret key", Error, "%s: %v", path, err)
		return
	}
	if st.Mode().Perm() != 0o600 {
		r.add("secret key", Error, "%s has mode %v; want 0600", path, st.Mode().Perm())
		return
	}
	if _, err := keyring.Load(path); err != nil {
		r.add("secret key", Error, "%v", err)
		return
	}
	r.add("secret key", OK, "%s, mode 0600", path)
}

func checkServers(ctx context.Context, r *Report, in Inputs, globalMode string) {
	servers, err := in.Store.ListServers(ctx, store.Scope{All: true})
	if err != nil {
		if errors.Is(err, store.ErrSecret) {
			r.add("servers", Error, "a stored secret does not decrypt with this key: %v", err)
			return
		}
		r.add("servers", Error, "listing: %v", err)
		return
	}
	sandboxUID := in.Config.SandboxUID
	if sandboxUID < 0 {
		sandboxUID = os.Geteuid()
	}
	reach := reachableSockets(in, sandboxUID)
	for _, srv := range servers {
		eff := isolation.Resolve(isolation.Server{Protocol: srv.Protocol, Command: srv.Command,
			EnabledOverride: srv.Isolation.EnabledOverride, ModeOverride: srv.Isolation.ModeOverride}, globalMode, in.Host)
		name := "server " + srv.Name
		detail := fmt.Sprintf("%s, mode %s (%s), isolated %v", srv.Protocol, eff.Mode, eff.Source, eff.Isolated)
		status := OK
		var why []string
		if srv.Enabled && srv.Protocol == "stdio" {
			if in.Config.EnableSocket && (eff.Mode == isolation.None || eff.Mode == isolation.Sandbox) {
				status = Warn
				why = append(why, "the admin socket is on and this child runs as a local user who could reach it")
			}
			if eff.Mode == isolation.Sandbox && len(reach) > 0 {
				status = Warn
				why = append(why, "a sandboxed child (uid "+fmt.Sprint(sandboxUID)+") could connect to "+strings.Join(reach, " and "))
			}
			if eff.Mode == isolation.None {
				status = Warn
				why = append(why, "it runs unconfined")
			}
			if eff.Mode != isolation.None && !eff.Isolated {
				status = Warn
				why = append(why, "its mode is not available on this host ("+eff.Source+")")
			}
		}
		if len(why) > 0 {
			detail += ": " + strings.Join(why, "; ")
		}
		r.add(name, status, "%s", detail)
	}
}

// reachableSockets names the sockets a child running as uid could open:
// Landlock below ABI 9 does not guard pathname sockets, file modes do.
func reachableSockets(in Inputs, uid int) []string {
	var out []string
	if in.DockerSocket != "" && canConnect(in.DockerSocket, uid) {
		out = append(out, "the Docker socket "+in.DockerSocket)
	}
	if in.Config.DatabaseURL != "" {
		if u, err := url.Parse(in.Config.DatabaseURL); err == nil {
			if h := u.Query().Get("host"); strings.HasPrefix(h, "/") {
				for _, port := range []string{u.Port(), "5432"} {
					if port == "" {
						continue
					}
					p := h + "/.s.PGSQL." + port
					if canConnect(p, uid) {
						out = append(out, "the database socket "+p)
						break
					}
				}
			}
		}
	}
	return out
}

// canConnect applies the kernel's permission rule for connecting to a unix
// socket (write permission on the file) for uid, ignoring supplementary
// groups except the file's own group when uid is its member by gid.
func canConnect(path string, uid int) bool {
	st, err := os.Stat(path)
	if err != nil {
		return false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	mode := st.Mode().Perm()
	switch {
	case uid == 0:
		return true
	case int(sys.Uid) == uid:
		return mode&0o200 != 0
	case groupMember(uid, int(sys.Gid)):
		return mode&0o020 != 0
	default:
		return mode&0o002 != 0
	}
}

func groupMember(uid, gid int) bool {
	// The sandbox uid is switched with no supplementary groups and its gid
	// equal to its uid; the gateway's own uid keeps its primary group.
	if uid == os.Geteuid() {
		return os.Getegid() == gid
	}
	return uid == gid
}
