package gateway

import (
	"sort"

	"github.com/mcpgate/mcpgate/metrics"
)

func (g *Gateway) registerMetrics(reg *metrics.Registry) {
	g.toolCalls = reg.NewCounter("mcpgate_tool_calls_total", "Tool calls through /mcp and /mcp/all by server, variant and outcome.",
		"server", "variant", "outcome")
	reg.NewGaugeFunc("mcpgate_upstream_up", "1 for each server in its current state on this replica.", []string{"server", "state"},
		func() []metrics.Sample {
			var out []metrics.Sample
			for _, name := range g.serverNames() {
				out = append(out, metrics.Sample{Labels: []string{name, g.Status(name).State}, Value: 1})
			}
			return out
		})
	reg.NewGaugeFunc("mcpgate_upstream_starts", "Sessions started per server on this replica since it began (restarts + 1).",
		[]string{"server"}, func() []metrics.Sample {
			var out []metrics.Sample
			for _, name := range g.serverNames() {
				if n, ok := g.starts(name); ok {
					out = append(out, metrics.Sample{Labels: []string{name}, Value: float64(n)})
				}
			}
			return out
		})
}

func (g *Gateway) serverNames() []string {
	g.mu.RLock()
	names := make([]string, 0, len(g.servers))
	for n := range g.servers {
		names = append(names, n)
	}
	g.mu.RUnlock()
	sort.Strings(names)
	return names
}
