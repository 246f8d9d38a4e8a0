package metrics

import (
	"strings"
	"testing"
)

func TestExposition(t *testing.T) {
	r := NewRegistry()
	c := r.NewCounter("mcpgate_things_total", "Things.", "kind")
	c.Inc("a")
	c.Add(2, "a")
	c.Inc(`b"q`)
	r.NewGaugeFunc("mcpgate_up", "Up.", nil, func() []Sample { return []Sample{{Value: 1}} })
	h := r.NewHistogram("mcpgate_seconds", "Time.", []float64{0.1, 1}, "route")
	h.Observe(0.05, "/x")
	h.Observe(0.5, "/x")
	var b strings.Builder
	r.Write(&b)
	want := `# HELP mcpgate_things_total Things.
# TYPE mcpgate_things_total counter
mcpgate_things_total{kind="a"} 3
mcpgate_things_total{kind="b\"q"} 1
# HELP mcpgate_up Up.
# TYPE mcpgate_up gauge
mcpgate_up 1
# HELP mcpgate_seconds Time.
# TYPE mcpgate_seconds histogram
mcpgate_seconds_bucket{route="/x",le="0.1"} 1
mcpgate_seconds_bucket{route="/x",le="1"} 2
mcpgate_seconds_bucket{route="/x",le="+Inf"} 2
mcpgate_seconds_sum{route="/x"} 0.55
mcpgate_seconds_count{route="/x"} 2
`
	if b.String() != want {
		t.Errorf("exposition:\n%s\nwant:\n%s", b.String(), want)
	}
}
