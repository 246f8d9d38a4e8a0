package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/catalog"
	"github.com/mcpgate/mcpgate/store"
	"github.com/mcpgate/mcpgate/upstream"
)

// Server states beyond upstream's: StateQuarantined is reported for a
// quarantined server whatever its instance does.
const StateQuarantined = "quarantined"

// Status is a server's live state on this replica, for the REST server
// object's status.
type Status struct {
	State          string     `json:"state"` // connecting, ready, error, stopped, quarantined
	LastError      string     `json:"last_error,omitempty"`
	ToolCount      int        `json:"tool_count"`
	ConnectedSince *time.Time `json:"connected_since,omitempty"`
}

// Status returns what this replica knows of server name. An unknown or
// disabled server is "stopped"; one that cannot run here is "error" with
// the reason (for example docker-unavailable).
func (g *Gateway) Status(name string) Status {
	g.mu.RLock()
	info := g.servers[name]
	g.mu.RUnlock()
	if info == nil || !info.Enabled {
		return Status{State: string(upstream.StateStopped)}
	}
	if info.Blocked != "" {
		return Status{State: string(upstream.StateError), LastError: "cannot run on this replica: " + info.Blocked}
	}
	if info.OAuth == store.OAuthPerUser {
		return g.perUserStatus(info)
	}
	return g.statusOf(info, name)
}

// statusOf is the status of the instance key of server info.
func (g *Gateway) statusOf(info *serverInfo, key string) Status {
	st, ok := g.sup.Status(key)
	if !ok {
		st = upstream.Status{State: upstream.StateStopped}
	}
	return statusFrom(info, st)
}

func statusFrom(info *serverInfo, st upstream.Status) Status {
	out := Status{State: string(st.State), LastError: st.LastError, ToolCount: st.ToolCount}
	if !st.ConnectedSince.IsZero() {
		t := st.ConnectedSince
		out.ConnectedSince = &t
	}
	if info.Quarantined {
		out.State = StateQuarantined
	}
	return out
}

// ToolState is one tool of a server with its approval state, for
// GET /servers/{name}/tools.
type ToolState struct {
	Name         string               `json:"name"`
	Title        string               `json:"title,omitempty"`
	Description  string               `json:"description,omitempty"`
	InputSchema  any                  `json:"input_schema,omitempty"`
	OutputSchema any                  `json:"output_schema,omitempty"`
	Annotations  *mcp.ToolAnnotations `json:"annotations,omitempty"`
	Variant      string               `json:"variant"` // read, write or destructive
	State        string               `json:"state"`   // approved, pending, changed, quarantined
	Pin          string               `json:"pin"`     // SHA-256 of the tool as it is now
}

// Tools returns the tools server name offers now, with their approval
// states. A personal server that never ran on this replica is started (and
// waited for, within ctx) so that its owner can review it before approving.
func (g *Gateway) Tools(ctx context.Context, name string) ([]ToolState, error) {
	info, err := g.known(ctx, name)
	if err != nil {
		return nil, err
	}
	entries, err := g.currentTools(ctx, info, 0)
	if err != nil {
		return nil, err
	}
	out := make([]ToolState, 0, len(entries))
	for _, e := range entries {
		t := e.Tool
		out = append(out, ToolState{Name: t.Name, Title: t.Title, Description: t.Description,
			InputSchema: t.InputSchema, OutputSchema: t.OutputSchema, Annotations: t.Annotations,
			Variant: string(catalog.RequiredVariant(t.Annotations)), State: g.toolState(info, t.Name, e.Pin), Pin: e.Pin})
	}
	return out, nil
}

// lookup returns what this replica holds of server name now, or nil.
func (g *Gateway) lookup(name string) *serverInfo {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.servers[name]
}

// known returns what this replica holds of server name. A server just
// created through another path may not have reached this replica's listener
// yet: an unknown name re-reads the servers once before it is not found.
func (g *Gateway) known(ctx context.Context, name string) (*serverInfo, error) {
	for attempt := 0; ; attempt++ {
		if info := g.lookup(name); info != nil {
			return info, nil
		}
		if attempt > 0 {
			return nil, fmt.Errorf("server %q: %w", name, ErrNotFound)
		}
		if err := g.sync(ctx); err != nil {
			return nil, err
		}
	}
}

// currentTools returns the server's listing, starting a never-listed
// enabled server first. An OAuth server is started with userID's token
// (the shared one in shared mode); a per-user one that never listed is
// left alone when userID is 0.
func (g *Gateway) currentTools(ctx context.Context, info *serverInfo, userID int64) ([]catalog.Entry, error) {
	only := func(s string) bool { return s == info.Name }
	entries := g.cat.List(only)
	if len(entries) > 0 || !info.Enabled || info.Blocked != "" {
		return entries, nil
	}
	key := info.Name
	if g.opts.OAuth != nil && isRemote(info.Protocol, info.URL) {
		if info.OAuth == store.OAuthPerUser && userID == 0 {
			return entries, nil
		}
		name := info.Name
		var err error
		if key, info, err = g.oauthKey(ctx, &Caller{UserID: userID}, info); err != nil {
			return nil, fmt.Errorf("starting server %q: %w", name, err)
		}
		if entries = g.cat.List(only); len(entries) > 0 {
			return entries, nil
		}
	}
	inst, release, err := g.sup.Acquire(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("starting server %q: %w", info.Name, err)
	}
	defer release()
	if err := inst.WaitReady(ctx); err != nil {
		return nil, fmt.Errorf("listing tools of %q: %w", info.Name, err)
	}
	// The listing reaches the catalog from the instance's callback, which
	// has run by the time the instance reports ready.
	g.toolsChanged(key, inst.Tools())
	return g.cat.List(only), nil
}

// Logs returns up to tail of the server's last stderr lines on this replica.
func (g *Gateway) Logs(name string, tail int) []string {
	inst, ok := g.sup.Instance(name)
	if !ok {
		return []string{}
	}
	lines := inst.Logs(tail)
	if lines == nil {
		lines = []string{}
	}
	return lines
}

// Search ranks the tools of the servers allow accepts (nil: all), for
// GET /tools?q=. SearchAs applies the MCP visibility rules instead.
func (g *Gateway) Search(query string, limit int, allow func(server string) bool) []catalog.Result {
	return g.cat.Search(query, limit, allow)
}

// SearchAs ranks the tools c may see over MCP (see retrieve_tools).
func (g *Gateway) SearchAs(c Caller, query string, limit int) []catalog.Result {
	return g.cat.Search(query, limit, func(server string) bool {
		_, ok := g.visible(&c, server)
		return ok
	})
}

// Restart asks every replica to restart server name (recording who asked,
// as a server.restart activity), restarts it on this replica now and waits
// until it is ready; a stopped personal server is started. The REST
// restart route calls this instead of store.RecordServerAction, whose
// notification only makes replicas re-read their servers.
func (g *Gateway) Restart(ctx context.Context, a store.Actor, name string) error {
	info, err := g.known(ctx, name)
	if err != nil {
		return err
	}
	if !info.Enabled {
		return fmt.Errorf("server %q is disabled", name)
	}
	if info.Blocked != "" {
		return fmt.Errorf("server %q cannot run on this replica: %s", name, info.Blocked)
	}
	g.mu.Lock()
	g.restarted[name] = time.Now()
	g.mu.Unlock()
	if err := g.store.RequestRestart(ctx, a, name); err != nil {
		return fmt.Errorf("restarting %q: %w", name, err)
	}
	key := name
	if g.opts.OAuth != nil && isRemote(info.Protocol, info.URL) {
		if info.OAuth == store.OAuthPerUser {
			// The others'; the actor's is restarted and waited for below.
			g.restartUsers(name, userKey(name, a.UserID))
		}
		if key, _, err = g.oauthKey(ctx, &Caller{UserID: a.UserID}, info); err != nil {
			return fmt.Errorf("restarting %q: %w", name, err)
		}
	}
	if err := g.sup.Restart(ctx, key); err != nil {
		return fmt.Errorf("restarting %q: %w", name, err)
	}
	return nil
}

// Approve pins every tool server name offers now and lifts its quarantine,
// in one transaction; every replica reloads the pins on the notification.
// The caller checks that the actor may approve (MayManage). A server that
// is enabled but not running is started first, to list its tools.
func (g *Gateway) Approve(ctx context.Context, a store.Actor, name string) (store.Server, error) {
	info, err := g.known(ctx, name)
	if err != nil {
		return store.Server{}, err
	}
	entries, err := g.currentTools(ctx, info, a.UserID)
	if err != nil {
		return store.Server{}, fmt.Errorf("approving %q: %w", name, err)
	}
	pins := make(map[string]string, len(entries))
	for _, e := range entries {
		pins[e.Tool.Name] = e.Pin
	}
	srv, err := g.store.ApproveServer(ctx, a, store.Scope{All: true}, name, pins)
	if err != nil {
		return store.Server{}, fmt.Errorf("approving %q: %w", name, err)
	}
	// This replica need not wait for its own notification.
	g.mu.Lock()
	g.pins[name] = pins
	if cur := g.servers[name]; cur != nil {
		cp := *cur
		cp.Quarantined = false
		g.servers[name] = &cp
	}
	g.mu.Unlock()
	return srv, nil
}
