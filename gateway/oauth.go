package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/mcpgate/mcpgate/oauth"
	"github.com/mcpgate/mcpgate/store"
	"github.com/mcpgate/mcpgate/upstream"
)

// Remote servers that sign in with OAuth (Options.OAuth set, the server
// has an OAuth configuration):
//
//   - shared mode: one instance per replica, keyed by the server name, whose
//     requests carry the server's service-account token.
//   - per-user mode: one instance per (server, user), keyed "name#<userID>",
//     whose requests carry that user's token only; counted against that
//     user's cap on live instances.
//
// Either way the instance is lazy: it starts on a call whose caller has a
// token (looked up, and refreshed when about to expire, before the instance
// is touched), so a server nobody authorized never runs and never loops
// through restarts; a caller without a token gets a tool error naming the
// oauth/start route. It stops after the idle timeout.
//
// The catalog of a per-user server holds the listing of the first user
// instance that listed it on this replica (pins and approval are per
// server, so one listing has to stand for all); the listings of other
// users' instances do not change it until the server is redefined.

// userKeySep separates server name and user id in per-user instance keys;
// server names cannot contain it.
const userKeySep = "#"

func userKey(name string, userID int64) string {
	return name + userKeySep + strconv.FormatInt(userID, 10)
}

// serverOfKey returns the server name of an instance key.
func serverOfKey(key string) string {
	if i := strings.Index(key, userKeySep); i >= 0 {
		return key[:i]
	}
	return key
}

func isRemote(protocol, url string) bool {
	return url != "" && (protocol == upstream.ProtocolStreamableHTTP || protocol == upstream.ProtocolSSE)
}

// oauthMode reads the OAuth mode of a remote server: "" without a
// configuration (or without Options.OAuth).
func (g *Gateway) oauthMode(ctx context.Context, r store.Server) (string, error) {
	if g.opts.OAuth == nil || !isRemote(r.Protocol, r.URL) {
		return "", nil
	}
	mode, err := g.opts.OAuth.Mode(ctx, r.ID)
	if errors.Is(err, oauth.ErrNotOAuth) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the OAuth mode of %q: %w", r.Name, err)
	}
	return mode, nil
}

// withOAuth makes d sign in as userID (0: the shared account): the token
// goes through the SDK's OAuth hook (Streamable HTTP) or a transport wrapper
// (SSE), and a configured Authorization header is dropped.
func (g *Gateway) withOAuth(d upstream.Desired, serverID, userID int64) upstream.Desired {
	m, url := g.opts.OAuth, d.Config.URL
	d.Config.Headers = upstream.WithoutAuthorization(d.Config.Headers)
	d.Config.Auth = &upstream.Auth{
		ID:      "oauth:" + strconv.FormatInt(serverID, 10) + ":" + strconv.FormatInt(userID, 10),
		Handler: m.Handler(serverID, userID, url),
		WrapTransport: func(base http.RoundTripper) (http.RoundTripper, error) {
			return m.Transport(base, url, serverID, userID)
		},
	}
	d.Lazy = true
	return d
}

// reconcileLocked hands the supervisor the servers of the last sync plus an
// instance for every user of a per-user server. The caller holds recMu.
func (g *Gateway) reconcileLocked(ctx context.Context) error {
	desired := slices.Clone(g.baseDesired)
	for name, tmpl := range g.perUser {
		srvID := g.perUserID[name]
		for uid := range g.users[name] {
			d := tmpl
			d.Key = userKey(name, uid)
			d.Owner = strconv.FormatInt(uid, 10)
			desired = append(desired, g.withOAuth(d, srvID, uid))
		}
	}
	return g.sup.Reconcile(ctx, desired)
}

// userInstance returns the key of userID's instance of the per-user server
// info, adding it to the supervisor (stopped) if it is not there.
func (g *Gateway) userInstance(ctx context.Context, info *serverInfo, userID int64) (string, error) {
	key := userKey(info.Name, userID)
	if _, ok := g.sup.Instance(key); ok {
		return key, nil
	}
	g.recMu.Lock()
	defer g.recMu.Unlock()
	if _, ok := g.perUser[info.Name]; !ok {
		return "", fmt.Errorf("server %q: %w", info.Name, ErrNotFound) // redefined meanwhile
	}
	g.mu.Lock()
	if g.users[info.Name] == nil {
		g.users[info.Name] = map[int64]bool{}
	}
	g.users[info.Name][userID] = true
	g.mu.Unlock()
	if err := g.reconcileLocked(ctx); err != nil {
		return "", err
	}
	return key, nil
}

// userKeys returns the instance keys of the per-user server name.
func (g *Gateway) userKeys(name string) []string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	keys := make([]string, 0, len(g.users[name]))
	for uid := range g.users[name] {
		keys = append(keys, userKey(name, uid))
	}
	slices.Sort(keys)
	return keys
}

// authError is the tool error of a caller who has no usable token.
type authError struct {
	server string
	shared bool
	cause  error
}

func (e *authError) Error() string {
	if e.shared {
		return fmt.Sprintf("server %q needs OAuth authorization of its shared account: an admin starts it with "+
			"POST /api/v1/servers/%s/oauth/start and signs in at the returned URL (%v)", e.server, e.server, e.cause)
	}
	return fmt.Sprintf("server %q needs OAuth authorization for your account: start it with "+
		"POST /api/v1/servers/%s/oauth/start and sign in at the returned URL (%v)", e.server, e.server, e.cause)
}

func (e *authError) Unwrap() error { return e.cause }

// needsAuthorization reports whether err means the caller has to go
// through oauth/start.
func needsAuthorization(err error) bool {
	for _, s := range []error{oauth.ErrNoToken, oauth.ErrExpired, oauth.ErrURLChanged, oauth.ErrNeedsAuthorization} {
		if errors.Is(err, s) {
			return true
		}
	}
	// An instance's failed start keeps its reason as text only.
	return err != nil && strings.Contains(err.Error(), oauth.ErrNeedsAuthorization.Error())
}

// oauthKey checks that c has a token for the OAuth server info (refreshing
// it when about to expire) and returns the key of the instance c's calls
// go to, which exists in the supervisor, started or not. A server whose
// OAuth mode changed since the last sync is re-read first.
func (g *Gateway) oauthKey(ctx context.Context, c *Caller, info *serverInfo) (string, *serverInfo, error) {
	mode, err := g.opts.OAuth.Mode(ctx, info.ID)
	if err != nil && !errors.Is(err, oauth.ErrNotOAuth) {
		return "", info, fmt.Errorf("reading the OAuth mode: %w", err)
	}
	if mode != info.OAuth {
		// The configuration changes without a notification of its own.
		if err := g.sync(ctx); err != nil {
			return "", info, err
		}
		if info = g.lookup(info.Name); info == nil {
			return "", nil, fmt.Errorf("server: %w", ErrNotFound)
		}
	}
	if info.OAuth == "" {
		return info.Name, info, nil
	}
	shared := info.OAuth == store.OAuthShared
	if _, err := g.opts.OAuth.Token(ctx, info.ID, c.UserID, info.URL); err != nil {
		if needsAuthorization(err) {
			return "", info, &authError{server: info.Name, shared: shared, cause: err}
		}
		return "", info, fmt.Errorf("reading the OAuth token: %w", err)
	}
	key := info.Name
	if !shared {
		if key, err = g.userInstance(ctx, info, c.UserID); err != nil {
			return "", info, err
		}
	}
	// A start that failed for want of authorization waits out its backoff;
	// with a token now, try again at once.
	if inst, ok := g.sup.Instance(key); ok {
		if st := inst.Status(); st.State == upstream.StateError && needsAuthorization(errors.New(st.LastError)) {
			_ = g.sup.Restart(ctx, key)
		}
	}
	return key, info, nil
}

// StatusFor returns server name's status as userID's calls see it: for a
// per-user OAuth server, that of the user's own instance; otherwise Status.
func (g *Gateway) StatusFor(name string, userID int64) Status {
	info := g.lookup(name)
	if info == nil || !info.Enabled || info.Blocked != "" || info.OAuth != store.OAuthPerUser {
		return g.Status(name)
	}
	return g.statusOf(info, userKey(name, userID))
}

// perUserStatus is the caller-independent status of a per-user server: the
// first ready user instance's, else stopped.
func (g *Gateway) perUserStatus(info *serverInfo) Status {
	for _, key := range g.userKeys(info.Name) {
		if st, ok := g.sup.Status(key); ok && st.State == upstream.StateReady {
			return statusFrom(info, st)
		}
	}
	return statusFrom(info, upstream.Status{State: upstream.StateStopped,
		ToolCount: len(g.cat.List(func(s string) bool { return s == info.Name }))})
}

// restartUsers restarts every live instance of the per-user server name
// but skip's in the background.
func (g *Gateway) restartUsers(name, skip string) {
	for _, key := range g.userKeys(name) {
		inst, ok := g.sup.Instance(key)
		if !ok || key == skip || inst.State() == upstream.StateStopped {
			continue
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), inst.Config().InitTimeout+inst.Config().StopTimeout)
			defer cancel()
			if err := inst.Restart(ctx); err != nil {
				g.log.Warn("restarting upstream", "server", name, "key", key, "err", err)
			}
		}()
	}
}

// starts sums the sessions started for server name on this replica.
func (g *Gateway) starts(name string) (int, bool) {
	if info := g.lookup(name); info != nil && info.OAuth == store.OAuthPerUser {
		n := 0
		for _, key := range g.userKeys(name) {
			if st, ok := g.sup.Status(key); ok {
				n += st.Starts
			}
		}
		return n, true
	}
	st, ok := g.sup.Status(name)
	return st.Starts, ok
}
