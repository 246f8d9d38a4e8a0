// Package config reads mcpgate's deployment settings from MCPGATE_* environment
// variables. Runtime settings live in the database (see store.Settings); only
// what is needed before the database is reachable, or what must not be
// changeable through the API, comes from here.
package config

import (
	"cmp"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Config is the deployment configuration of one replica.
type Config struct {
	Listen        string // MCPGATE_LISTEN
	MetricsListen string // MCPGATE_METRICS_LISTEN; empty: /metrics on Listen, admins only
	DataDir       string // MCPGATE_DATA_DIR
	DatabaseURL   string // MCPGATE_DATABASE_URL; empty: a private PostgreSQL in DataDir/pg
	AdminToken    string // MCPGATE_ADMIN_TOKEN; empty: no bootstrap admin
	SecretKeyFile string // MCPGATE_SECRET_KEY_FILE; empty: DataDir/gateway/secret.key
	// SecretKeyFileSet: the operator named the key file, so a missing one is
	// an error rather than a reason to generate a new key.
	SecretKeyFileSet  bool
	EnableSocket      bool   // MCPGATE_ENABLE_SOCKET
	PublicURL         string // MCPGATE_PUBLIC_URL
	LogLevel          string // MCPGATE_LOG_LEVEL
	ReplicaID         string // MCPGATE_REPLICA_ID; empty: generated at start
	ShutdownTimeout   time.Duration
	SandboxUID        int // MCPGATE_SANDBOX_UID; -1: children keep the gateway's uid
	SandboxFailClosed bool
	SandboxNoFile     uint64 // MCPGATE_SANDBOX_NOFILE
	// OAuthUnboundCallbacks accepts OAuth callbacks from a browser that did
	// not start the flow (MCPGATE_OAUTH_UNBOUND_CALLBACKS).
	OAuthUnboundCallbacks bool
	JWTIssuer             string // MCPGATE_JWT_ISSUER: external issuer whose JWTs are accepted
	JWTAudience           string // MCPGATE_JWT_AUDIENCE
	JWKSURL               string // MCPGATE_JWT_JWKS_URL
}

// Var documents one environment variable; the README's table is written from
// the same facts, and a test keeps the two in step.
type Var struct {
	Name, Default, Doc string
}

// Vars lists every variable Load reads.
var Vars = []Var{
	{"MCPGATE_LISTEN", ":8080", "address of the HTTP listener (REST, /mcp, health)"},
	{"MCPGATE_METRICS_LISTEN", "(unset)", "serve Prometheus /metrics without authentication on this address; unset, /metrics is on MCPGATE_LISTEN for admins"},
	{"MCPGATE_DATA_DIR", "./data (/data in the image)", "directory for the private PostgreSQL, the secret key and per-server sandbox dirs"},
	{"MCPGATE_DATABASE_URL", "(unset: private PostgreSQL)", "PostgreSQL connection URL; unset, `serve` starts a private PostgreSQL in `<data_dir>/pg` on a unix socket"},
	{"MCPGATE_ADMIN_TOKEN", "(unset)", "bootstrap token that authenticates as the built-in admin; at least 32 characters"},
	{"MCPGATE_SECRET_KEY_FILE", "<data_dir>/gateway/secret.key", "key file that encrypts secrets at rest; generated with mode 0600 when unset and missing"},
	{"MCPGATE_ENABLE_SOCKET", "false", "serve the admin unix socket `<data_dir>/mcpgate.sock` (0600, peer uid checked)"},
	{"MCPGATE_PUBLIC_URL", "http://localhost:8080", "external base URL, used for OAuth redirects and resource metadata"},
	{"MCPGATE_LOG_LEVEL", "info", "debug, info, warn or error"},
	{"MCPGATE_REPLICA_ID", "(random per start)", "name of this replica in container labels and /status"},
	{"MCPGATE_SHUTDOWN_TIMEOUT", "20s", "how long SIGTERM waits for in-flight requests"},
	{"MCPGATE_SANDBOX_UID", "65534 when running as root, else unset", "uid (and gid) sandboxed children run as; -1 keeps the gateway's uid"},
	{"MCPGATE_SANDBOX_FAIL_CLOSED", "false", "refuse to start sandboxed servers when Landlock is unavailable instead of running them degraded"},
	{"MCPGATE_SANDBOX_NOFILE", "1024", "RLIMIT_NOFILE of sandboxed children"},
	{"MCPGATE_OAUTH_UNBOUND_CALLBACKS", "false", "accept an upstream OAuth callback in a browser that did not start the flow (flows started from a CLI); weaker: whoever opens the link signs in for the user who started it"},
	{"MCPGATE_JWT_ISSUER", "(unset)", "issuer (`iss`) of external JWTs to accept; requires MCPGATE_JWT_JWKS_URL"},
	{"MCPGATE_JWT_AUDIENCE", "(unset)", "required audience (`aud`) of accepted JWTs"},
	{"MCPGATE_JWT_JWKS_URL", "(unset)", "JWKS URL of the external issuer"},
}

// Load reads the configuration through getenv. An invalid value is an error
// naming the variable, so a bad deployment stops at start, not at first use.
func Load(getenv func(string) string, uid int) (Config, error) {
	c := Config{
		Listen:        cmp.Or(getenv("MCPGATE_LISTEN"), ":8080"),
		DataDir:       cmp.Or(getenv("MCPGATE_DATA_DIR"), "data"),
		MetricsListen: getenv("MCPGATE_METRICS_LISTEN"),
		DatabaseURL:   getenv("MCPGATE_DATABASE_URL"),
		AdminToken:    getenv("MCPGATE_ADMIN_TOKEN"),
		PublicURL:     strings.TrimRight(cmp.Or(getenv("MCPGATE_PUBLIC_URL"), "http://localhost:8080"), "/"),
		LogLevel:      strings.ToLower(cmp.Or(getenv("MCPGATE_LOG_LEVEL"), "info")),
		ReplicaID:     getenv("MCPGATE_REPLICA_ID"),
		JWTIssuer:     getenv("MCPGATE_JWT_ISSUER"),
		JWTAudience:   getenv("MCPGATE_JWT_AUDIENCE"),
		JWKSURL:       getenv("MCPGATE_JWT_JWKS_URL"),
	}
	var err error
	if c.DataDir, err = filepath.Abs(c.DataDir); err != nil {
		return c, fmt.Errorf("MCPGATE_DATA_DIR: %w", err)
	}
	c.SecretKeyFileSet = getenv("MCPGATE_SECRET_KEY_FILE") != ""
	c.SecretKeyFile = cmp.Or(getenv("MCPGATE_SECRET_KEY_FILE"), filepath.Join(c.DataDir, "gateway", "secret.key"))
	if c.EnableSocket, err = parseBool(getenv, "MCPGATE_ENABLE_SOCKET", false); err != nil {
		return c, err
	}
	if c.SandboxFailClosed, err = parseBool(getenv, "MCPGATE_SANDBOX_FAIL_CLOSED", false); err != nil {
		return c, err
	}
	if c.OAuthUnboundCallbacks, err = parseBool(getenv, "MCPGATE_OAUTH_UNBOUND_CALLBACKS", false); err != nil {
		return c, err
	}
	c.SandboxNoFile = 1024
	if v := getenv("MCPGATE_SANDBOX_NOFILE"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n < 16 || n > 1<<20 {
			return c, fmt.Errorf("MCPGATE_SANDBOX_NOFILE: %q is not a number of files from 16 to 1048576", v)
		}
		c.SandboxNoFile = n
	}
	if c.ShutdownTimeout, err = parseDuration(getenv, "MCPGATE_SHUTDOWN_TIMEOUT", 20*time.Second); err != nil {
		return c, err
	}
	c.SandboxUID = -1
	if uid == 0 {
		c.SandboxUID = 65534
	}
	if v := getenv("MCPGATE_SANDBOX_UID"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < -1 {
			return c, fmt.Errorf("MCPGATE_SANDBOX_UID: %q is not a uid (a number, or -1 to keep the gateway's)", v)
		}
		c.SandboxUID = n
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return c, fmt.Errorf("MCPGATE_LOG_LEVEL: %q is not one of debug, info, warn, error", c.LogLevel)
	}
	if c.AdminToken != "" && len(c.AdminToken) < 32 {
		return c, fmt.Errorf("MCPGATE_ADMIN_TOKEN: must be at least 32 characters (generate one with `openssl rand -hex 32`)")
	}
	if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return c, fmt.Errorf("MCPGATE_PUBLIC_URL: %q is not an absolute http(s) URL", c.PublicURL)
	}
	if c.DatabaseURL != "" {
		if _, err := url.Parse(c.DatabaseURL); err != nil || !strings.HasPrefix(c.DatabaseURL, "postgres") {
			// The parse error could echo the password; name the variable only.
			return c, fmt.Errorf("MCPGATE_DATABASE_URL: not a postgres:// or postgresql:// URL")
		}
	}
	if (c.JWTIssuer == "") != (c.JWKSURL == "") {
		return c, fmt.Errorf("MCPGATE_JWT_ISSUER and MCPGATE_JWT_JWKS_URL must be set together")
	}
	return c, nil
}

func parseBool(getenv func(string) string, name string, def bool) (bool, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return def, fmt.Errorf("%s: %q is not a boolean (true or false)", name, v)
	}
	return b, nil
}

func parseDuration(getenv func(string) string, name string, def time.Duration) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return def, fmt.Errorf("%s: %q is not a duration such as 20s", name, v)
	}
	return d, nil
}
