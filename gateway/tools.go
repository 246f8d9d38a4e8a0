package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/catalog"
	"github.com/mcpgate/mcpgate/store"
	"github.com/mcpgate/mcpgate/upstream"
)

// Tool approval states, as GET /servers/{name}/tools and retrieve_tools
// report them. Only approved tools can be called.
const (
	ToolApproved    = "approved"
	ToolPending     = "pending"     // no pin: new since the last approval
	ToolChanged     = "changed"     // the pin differs from the approved one
	ToolQuarantined = "quarantined" // the server is not approved
)

// Activity outcomes of tool calls.
const (
	OutcomeOK        = "ok"         // the upstream answered with a result
	OutcomeToolError = "tool_error" // the result has isError: true
	OutcomeRefused   = "refused"    // the gateway refused the call
	OutcomeError     = "error"      // the upstream failed or answered a JSON-RPC error
)

// mayApproveInfo reports whether c approves info's server: admins the shared
// servers, owners their personal ones.
func mayApproveInfo(c *Caller, info *serverInfo) bool {
	if info.Shared {
		return c.Admin
	}
	return info.OwnerID == c.UserID
}

// visible returns the server's info if c may use it over MCP: enabled,
// shared or c's own (a personal server serves its owner only, admins
// included, so no call reaches another user's credentials), and admitted by
// the token's server list. A quarantined server is visible to its
// approvers only.
func (g *Gateway) visible(c *Caller, server string) (*serverInfo, bool) {
	g.mu.RLock()
	info := g.servers[server]
	g.mu.RUnlock()
	if info == nil || !info.Enabled || info.Blocked != "" {
		return nil, false
	}
	if !info.Shared && info.OwnerID != c.UserID {
		return nil, false
	}
	if !c.AllowsServer(server) {
		return nil, false
	}
	if info.Quarantined && !mayApproveInfo(c, info) {
		return nil, false
	}
	return info, true
}

// toolState is the approval state of a tool with pin on server info.
func (g *Gateway) toolState(info *serverInfo, tool, pin string) string {
	if info.Quarantined {
		return ToolQuarantined
	}
	g.mu.RLock()
	approved, ok := g.pins[info.Name][tool]
	g.mu.RUnlock()
	switch {
	case !ok:
		return ToolPending
	case approved != pin:
		return ToolChanged
	}
	return ToolApproved
}

// warmPersonal starts c's personal servers that never listed their tools on
// this replica, so that a first search finds them: a personal server starts
// on first use, and looking for tools is a use. It waits for them to be
// ready within the request's deadline and a few seconds at most.
func (g *Gateway) warmPersonal(ctx context.Context, c *Caller) {
	g.mu.RLock()
	var cold []string
	var coldOAuth []*serverInfo
	for name, info := range g.servers {
		if !info.Enabled || info.Blocked != "" || !c.AllowsServer(name) {
			continue
		}
		if info.OAuth == "" && (info.Shared || info.OwnerID != c.UserID) {
			continue
		}
		if len(g.cat.List(func(s string) bool { return s == name })) > 0 {
			continue
		}
		if info.OAuth != "" {
			coldOAuth = append(coldOAuth, info)
			continue
		}
		cold = append(cold, name)
	}
	g.mu.RUnlock()
	for _, info := range coldOAuth {
		// Listed through the caller's session when they have a token.
		if _, vis := g.visible(c, info.Name); !vis {
			continue
		}
		if key, _, err := g.oauthKey(ctx, c, info); err == nil {
			cold = append(cold, key)
		}
	}
	if len(cold) == 0 {
		return
	}
	g.warm(ctx, cold)
}

// warm starts the lazy instances of keys that never ran here and waits, within
// ctx and a few seconds at most, for them to list their tools.
func (g *Gateway) warm(ctx context.Context, cold []string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, name := range cold {
		inst, ok := g.sup.Instance(name)
		if !ok || inst.Status().Starts > 0 || inst.State() == upstream.StateError {
			continue // tried already: do not make every search wait on a broken server
		}
		wg.Go(func() {
			inst, release, err := g.sup.Acquire(ctx, name)
			if err != nil {
				return
			}
			defer release()
			_ = inst.WaitReady(ctx)
		})
	}
	wg.Wait()
}

func textResult(v any) *mcp.CallToolResult {
	b, err := json.Marshal(v)
	if err != nil {
		return errorResult("encoding the reply: %v", err)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: v}
}

func errorResult(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

func (g *Gateway) newMCPServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcpgate", Version: g.opts.Version}, &mcp.ServerOptions{
		Logger: g.sdkLog,
		Instructions: "Find tools with retrieve_tools, read one with describe_tool, then call it with the " +
			"call_tool_* variant its \"call\" field names (read, write or destructive).",
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	ro, notDestructive := true, false
	s.AddTool(&mcp.Tool{
		Name:        "retrieve_tools",
		Description: "Search the tools of every MCP server you may use. Returns ranked tools with their server:tool name, description, annotations, input schema, approval state and the call_tool_* variant to call them with.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string","description":"what you want to do, in words"},"limit":{"type":"integer","minimum":1,"maximum":100,"description":"most results to return (default 10)"}},"required":["query"]}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: ro},
	}, g.retrieveTools)
	s.AddTool(&mcp.Tool{
		Name:        "describe_tool",
		Description: "Show the full definition of one tool: input and output schema, annotations, approval state and the call_tool_* variant to call it with.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string","description":"server:tool"}},"required":["name"]}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: ro},
	}, g.describeTool)
	callSchema := json.RawMessage(`{"type":"object","properties":{"name":{"type":"string","description":"server:tool, as retrieve_tools names it"},"args":{"type":"object","description":"the tool's arguments"}},"required":["name"]}`)
	s.AddTool(&mcp.Tool{
		Name:        "call_tool_read",
		Description: "Call a read-only tool (annotated readOnlyHint: true).",
		InputSchema: callSchema,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: ro},
	}, g.callVariant(catalog.VariantRead))
	s.AddTool(&mcp.Tool{
		Name:        "call_tool_write",
		Description: "Call a tool that changes something but is not destructive (destructiveHint: false).",
		InputSchema: callSchema,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &notDestructive},
	}, g.callVariant(catalog.VariantWrite))
	s.AddTool(&mcp.Tool{
		Name:        "call_tool_destructive",
		Description: "Call a tool that may destroy or overwrite data (any tool not annotated read-only or non-destructive).",
		InputSchema: callSchema,
	}, g.callVariant(catalog.VariantDestructive))
	s.AddTool(&mcp.Tool{
		Name: "upstream_servers",
		Description: "List the MCP servers you may use with their status; for users allowed to, add, patch, remove or restart one. " +
			"add takes server (the REST server object), patch takes name and server (a merge patch), remove and restart take name.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"action":{"type":"string","enum":["list","add","patch","remove","restart"]},"name":{"type":"string"},"server":{"type":"object"}},"required":["action"]}`),
	}, g.upstreamServers)
	return s
}

// toolHit is one tool in retrieve_tools and describe_tool replies.
type toolHit struct {
	Name         string               `json:"name"` // server:tool
	Server       string               `json:"server"`
	Tool         string               `json:"tool"`
	Title        string               `json:"title,omitempty"`
	Description  string               `json:"description,omitempty"`
	Annotations  *mcp.ToolAnnotations `json:"annotations,omitempty"`
	InputSchema  any                  `json:"inputSchema,omitempty"`
	OutputSchema any                  `json:"outputSchema,omitempty"`
	Call         string               `json:"call"`  // the call_tool_* variant to use
	State        string               `json:"state"` // approval state; only approved tools can be called
	Score        float64              `json:"score,omitempty"`
}

func decodeArgs(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		return nil
	}
	return json.Unmarshal(raw, v)
}

func (g *Gateway) retrieveTools(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	c := callerOf(req.Extra)
	var in struct {
		Query string `json:"query"`
		Limit int    `json:"limit"`
	}
	if err := decodeArgs(req.Params.Arguments, &in); err != nil {
		return errorResult("invalid arguments: %v", err), nil
	}
	if in.Limit <= 0 {
		in.Limit = 10
	}
	in.Limit = min(in.Limit, 100)
	g.warmPersonal(ctx, c)
	res := g.cat.Search(in.Query, in.Limit, func(server string) bool {
		_, ok := g.visible(c, server)
		return ok
	})
	hits := make([]toolHit, 0, len(res))
	for _, r := range res {
		e, ok := g.cat.Get(r.Server, r.Tool)
		info, vis := g.visible(c, r.Server)
		if !ok || !vis {
			continue
		}
		hits = append(hits, toolHit{Name: r.Name, Server: r.Server, Tool: r.Tool, Title: r.Title,
			Description: r.Description, Annotations: r.Annotations, InputSchema: r.InputSchema,
			Call: catalog.RequiredVariant(r.Annotations).ToolName(), State: g.toolState(info, r.Tool, e.Pin), Score: r.Score})
	}
	return textResult(map[string]any{"tools": hits}), nil
}

func (g *Gateway) describeTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	c := callerOf(req.Extra)
	var in struct {
		Name string `json:"name"`
	}
	if err := decodeArgs(req.Params.Arguments, &in); err != nil {
		return errorResult("invalid arguments: %v", err), nil
	}
	server, tool, ok := catalog.SplitName(in.Name)
	if !ok {
		return errorResult("name must be server:tool, as retrieve_tools returns it"), nil
	}
	info, vis := g.visible(c, server)
	e, found := g.cat.Get(server, tool)
	if !vis || !found {
		return errorResult("unknown tool %q: use retrieve_tools to find tools", in.Name), nil
	}
	t := e.Tool
	return textResult(toolHit{Name: in.Name, Server: server, Tool: tool, Title: t.Title, Description: t.Description,
		Annotations: t.Annotations, InputSchema: t.InputSchema, OutputSchema: t.OutputSchema,
		Call: catalog.RequiredVariant(t.Annotations).ToolName(), State: g.toolState(info, tool, e.Pin)}), nil
}

func (g *Gateway) callVariant(v catalog.Variant) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		c := callerOf(req.Extra)
		var in struct {
			Name string          `json:"name"`
			Args json.RawMessage `json:"args"`
		}
		if err := decodeArgs(req.Params.Arguments, &in); err != nil {
			return errorResult("invalid arguments: %v", err), nil
		}
		server, tool, ok := catalog.SplitName(in.Name)
		if !ok {
			return errorResult("name must be server:tool, as retrieve_tools returns it"), nil
		}
		return g.call(ctx, c, req.Extra, v, server, tool, in.Args)
	}
}

// call gates and forwards one tool call, and records it. used is the
// variant the client chose; "" means "the tool's own" (/mcp/all).
func (g *Gateway) call(ctx context.Context, c *Caller, extra *mcp.RequestExtra, used catalog.Variant, server, tool string, args json.RawMessage) (res *mcp.CallToolResult, err error) {
	start := time.Now()
	outcome := OutcomeRefused
	defer func() {
		rec := store.ToolCall{At: start, UserID: c.UserID, TokenID: c.TokenID, Server: server, Tool: tool,
			Variant: string(used), Outcome: outcome, RequestID: g.requestID(ctx, extra), Duration: time.Since(start)}
		g.mu.RLock()
		keep := g.cfg.Activity.StoreArguments
		g.mu.RUnlock()
		if keep && json.Valid(args) {
			// Only when an admin turned activity.store_arguments on.
			rec.Detail = map[string]any{"arguments": json.RawMessage(args)}
		}
		g.rec.add(rec)
		if g.toolCalls != nil {
			label := rec.Server
			if g.lookup(label) == nil {
				label = "(unknown)" // client-chosen names must not grow the series
			}
			g.toolCalls.Inc(label, rec.Variant, rec.Outcome)
		}
	}()
	name := server + ":" + tool
	info, vis := g.visible(c, server)
	key := server
	if vis && g.opts.OAuth != nil && isRemote(info.Protocol, info.URL) {
		// The caller's own session (per-user) or the service account's,
		// and only with a token: no token, no instance.
		var err error
		if key, info, err = g.oauthKey(ctx, c, info); err != nil {
			var ae *authError
			if errors.As(err, &ae) {
				return errorResult("%v", ae), nil
			}
			if errors.Is(err, ErrNotFound) {
				return errorResult("unknown tool %q: use retrieve_tools to find tools", name), nil
			}
			outcome = OutcomeError
			return errorResult("server %q: %v", server, err), nil
		}
		info, vis = g.visible(c, server) // the re-read may have changed it
	}
	e, found := g.cat.Get(server, tool)
	if vis && !found && (!info.Shared || info.OAuth != "") {
		// A personal or OAuth server that never ran here (after a restart
		// of the gateway, say) lists its tools on first use: this call.
		g.warm(ctx, []string{key})
		e, found = g.cat.Get(server, tool)
	}
	if !vis || !found {
		return errorResult("unknown tool %q: use retrieve_tools to find tools", name), nil
	}
	switch g.toolState(info, tool, e.Pin) {
	case ToolQuarantined:
		return errorResult("server %q is quarantined: its tools cannot be called until it is approved (%s)", server, approverText(info)), nil
	case ToolPending:
		return errorResult("tool %q is new since server %q was approved and is pending approval: it cannot be called until the server is approved again (%s)", name, server, approverText(info)), nil
	case ToolChanged:
		return errorResult("tool %q changed since it was approved (its description, schema or annotations differ) and is blocked until server %q is approved again (%s)", name, server, approverText(info)), nil
	}
	if used == "" {
		used = catalog.RequiredVariant(e.Tool.Annotations)
	}
	if err := catalog.CheckCall(used, e.Tool.Annotations, c.EffectiveScopes()); err != nil {
		return errorResult("tool %q refused: %v", name, err), nil
	}
	g.inflight.Add(1)
	res, err = g.sup.Call(ctx, key, tool, args)
	g.inflight.Add(-1)
	if err == nil {
		outcome = OutcomeOK
		if res.IsError {
			outcome = OutcomeToolError
		}
		return res, nil
	}
	outcome = OutcomeError
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) {
		return nil, rpcErr // the upstream's code, message and data, unchanged
	}
	switch {
	case errors.Is(err, upstream.ErrOwnerLimit):
		return errorResult("server %q cannot start: %v; try again when one of your other servers is idle", server, err), nil
	case info.OAuth != "" && needsAuthorization(err):
		return errorResult("%v", &authError{server: server, shared: info.OAuth == store.OAuthShared, cause: err}), nil
	case errors.Is(err, context.DeadlineExceeded):
		return errorResult("server %q did not answer %s in time: %v", server, tool, err), nil
	}
	return errorResult("server %q failed during %s: %v", server, tool, err), nil
}

func approverText(info *serverInfo) string {
	if info.Shared {
		return "an admin approves shared servers"
	}
	return "its owner approves it"
}

// serverSummary is one server in upstream_servers list replies: no
// command, URL, environment or headers, so nothing secret.
type serverSummary struct {
	Name        string `json:"name"`
	Protocol    string `json:"protocol"`
	Shared      bool   `json:"shared"`
	Enabled     bool   `json:"enabled"`
	Quarantined bool   `json:"quarantined"`
	Owner       string `json:"owner,omitempty"`
	Status      Status `json:"status"`
}

func (g *Gateway) upstreamServers(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	c := callerOf(req.Extra)
	var in struct {
		Action string          `json:"action"`
		Name   string          `json:"name"`
		Server json.RawMessage `json:"server"`
	}
	if err := decodeArgs(req.Params.Arguments, &in); err != nil {
		return errorResult("invalid arguments: %v", err), nil
	}
	if in.Action != "list" && c.Agent {
		return errorResult("agent tokens cannot %s servers; use a personal access token or sign in", in.Action), nil
	}
	needName := func() *mcp.CallToolResult {
		if in.Name == "" {
			return errorResult("%s needs name", in.Action)
		}
		return nil
	}
	switch in.Action {
	case "list":
		rows, err := g.store.ListServers(ctx, store.Scope{UserID: c.UserID, All: c.Admin})
		if err != nil {
			return nil, fmt.Errorf("listing servers: %w", err)
		}
		out := make([]serverSummary, 0, len(rows))
		for _, r := range rows {
			if !c.AllowsServer(r.Name) {
				continue
			}
			out = append(out, serverSummary{Name: r.Name, Protocol: r.Protocol, Shared: r.Shared, Enabled: r.Enabled,
				Quarantined: r.Quarantined, Owner: r.OwnerEmail, Status: g.Status(r.Name)})
		}
		return textResult(map[string]any{"servers": out}), nil
	case "add", "patch", "remove":
		if g.opts.Admin == nil {
			return errorResult("changing servers over MCP is not enabled on this gateway; use the REST API"), nil
		}
		var (
			body []byte
			err  error
		)
		switch in.Action {
		case "add":
			if len(in.Server) == 0 {
				return errorResult("add needs server, the server object as POST /api/v1/servers takes it"), nil
			}
			body, err = g.opts.Admin.CreateServer(ctx, *c, in.Server)
		case "patch":
			if r := needName(); r != nil {
				return r, nil
			}
			if len(in.Server) == 0 {
				return errorResult("patch needs server, a merge patch as PATCH /api/v1/servers/{name} takes it"), nil
			}
			body, err = g.opts.Admin.PatchServer(ctx, *c, in.Name, in.Server)
		case "remove":
			if r := needName(); r != nil {
				return r, nil
			}
			if err = g.opts.Admin.DeleteServer(ctx, *c, in.Name); err == nil {
				body, _ = json.Marshal(map[string]string{"removed": in.Name})
			}
		}
		if err != nil {
			return errorResult("%s: %v", in.Action, err), nil
		}
		var v any
		if json.Unmarshal(body, &v) != nil {
			v = map[string]any{}
		}
		return textResult(v), nil
	case "restart":
		if r := needName(); r != nil {
			return r, nil
		}
		srv, err := g.store.GetServer(ctx, store.Scope{UserID: c.UserID, All: c.Admin}, in.Name)
		if errors.Is(err, store.ErrNotFound) || (err == nil && !c.AllowsServer(in.Name)) {
			return errorResult("unknown server %q", in.Name), nil
		} else if err != nil {
			return nil, fmt.Errorf("loading server: %w", err)
		}
		if !MayManage(*c, srv) {
			return errorResult("server %q is shared: only admins restart it", in.Name), nil
		}
		a := store.Actor{UserID: c.UserID, TokenID: c.TokenID, RequestID: g.requestID(ctx, req.Extra)}
		if err := g.Restart(ctx, a, srv.Name); err != nil {
			return errorResult("restarting %q: %v", in.Name, err), nil
		}
		return textResult(map[string]any{"restarted": in.Name, "status": g.Status(in.Name)}), nil
	}
	return errorResult("unknown action %q: use list, add, patch, remove or restart", in.Action), nil
}

// MayManage reports whether c may change, restart or approve srv by the REST
// rules: admins any server, members their own personal servers; never
// through an agent token.
func MayManage(c Caller, srv store.Server) bool {
	if c.Agent {
		return false
	}
	return c.Admin || (!srv.Shared && srv.OwnerID == c.UserID)
}

// splitAllName maps a /mcp/all tool name "server__tool" back to its parts.
// Server names may hold "__" themselves, so every split is tried and the
// one naming a known tool wins.
func (g *Gateway) splitAllName(name string) (server, tool string, ok bool) {
	for i := 0; i+2 < len(name); {
		j := strings.Index(name[i:], "__")
		if j < 0 {
			break
		}
		k := i + j
		if k > 0 {
			if _, found := g.cat.Get(name[:k], name[k+2:]); found {
				return name[:k], name[k+2:], true
			}
		}
		i = k + 1
	}
	return "", "", false
}
