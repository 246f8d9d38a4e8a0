package gateway

import (
	"context"
	"sort"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/catalog"
)

// allSeparator joins server and tool in /mcp/all tool names: MCP tool names
// allow neither ':' nor '/', but '_' is fine.
const allSeparator = "__"

// newAllServer returns the /mcp/all server. It registers no tools: a
// receiving middleware answers tools/list and tools/call from the catalog
// for the caller at hand, so one server serves every user and no tool is
// ever registered for the wrong one.
func (g *Gateway) newAllServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcpgate-all", Version: g.opts.Version}, &mcp.ServerOptions{
		Logger:       g.sdkLog,
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch method {
			case "tools/list":
				c := callerOf(req.GetExtra())
				if c == nil {
					break
				}
				return g.listAll(ctx, c), nil
			case "tools/call":
				c := callerOf(req.GetExtra())
				r, ok := req.(*mcp.CallToolRequest)
				if c == nil || !ok {
					break
				}
				server, tool, found := g.splitAllName(r.Params.Name)
				if !found {
					return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "unknown tool " + r.Params.Name}
				}
				res, err := g.call(ctx, c, r.Extra, "", server, tool, r.Params.Arguments)
				if err != nil {
					return nil, err
				}
				if res.Content == nil {
					cp := *res
					cp.Content = []mcp.Content{}
					res = &cp
				}
				return res, nil
			}
			return next(ctx, method, req)
		}
	})
	return s
}

// listAll returns the tools c may call, named server__tool.
func (g *Gateway) listAll(ctx context.Context, c *Caller) *mcp.ListToolsResult {
	g.warmPersonal(ctx, c)
	scopes := c.EffectiveScopes()
	entries := g.cat.List(func(server string) bool {
		_, ok := g.visible(c, server)
		return ok
	})
	tools := make([]*mcp.Tool, 0, len(entries))
	for _, e := range entries {
		info, ok := g.visible(c, e.Server)
		if !ok || g.toolState(info, e.Tool.Name, e.Pin) != ToolApproved {
			continue
		}
		if !catalog.Covers(scopes, catalog.RequiredVariant(e.Tool.Annotations)) {
			continue
		}
		t := *e.Tool
		t.Name = e.Server + allSeparator + e.Tool.Name
		if t.InputSchema == nil {
			t.InputSchema = map[string]any{"type": "object"}
		}
		tools = append(tools, &t)
	}
	sort.Slice(tools, func(i, j int) bool { return tools[i].Name < tools[j].Name })
	return &mcp.ListToolsResult{Tools: tools}
}
