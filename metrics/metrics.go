// Package metrics keeps counters, gauges and histograms and writes them in
// the Prometheus text exposition format. It is deliberately small: the
// gateway needs a handful of series, not a client library.
package metrics

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"sync"
)

// Registry holds every metric of a process.
type Registry struct {
	mu      sync.Mutex
	metrics []writer
}

type writer interface {
	write(w io.Writer)
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{} }

func (r *Registry) add(m writer) {
	r.mu.Lock()
	r.metrics = append(r.metrics, m)
	r.mu.Unlock()
}

// Write writes every metric, in registration order.
func (r *Registry) Write(w io.Writer) {
	r.mu.Lock()
	ms := append([]writer(nil), r.metrics...)
	r.mu.Unlock()
	for _, m := range ms {
		m.write(w)
	}
}

type series struct {
	name, help, kind string
	labels           []string
	mu               sync.Mutex
	values           map[string]float64 // joined label values → value
}

func (s *series) key(values []string) string {
	if len(values) != len(s.labels) {
		panic(fmt.Sprintf("metrics: %s takes %d labels, got %d", s.name, len(s.labels), len(values)))
	}
	return strings.Join(values, "\x00")
}

func (s *series) write(w io.Writer) {
	s.mu.Lock()
	keys := make([]string, 0, len(s.values))
	for k := range s.values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", s.name, s.help, s.name, s.kind)
	for _, k := range keys {
		fmt.Fprintf(w, "%s%s %s\n", s.name, labelString(s.labels, splitKey(k, len(s.labels))), formatFloat(s.values[k]))
	}
	s.mu.Unlock()
}

func splitKey(k string, n int) []string {
	if n == 0 {
		return nil
	}
	return strings.Split(k, "\x00")
}

func labelString(names, values []string, extra ...string) string {
	if len(names) == 0 && len(extra) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", n, values[i])
	}
	for i := 0; i+1 < len(extra); i += 2 {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", extra[i], extra[i+1])
	}
	b.WriteByte('}')
	return b.String()
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%g", v)
}

// Counter is a monotonically increasing series per label set.
type Counter struct{ s *series }

// NewCounter registers a counter.
func (r *Registry) NewCounter(name, help string, labels ...string) *Counter {
	c := &Counter{&series{name: name, help: help, kind: "counter", labels: labels, values: map[string]float64{}}}
	r.add(c.s)
	return c
}

// Add adds v (≥ 0) to the series with these label values.
func (c *Counter) Add(v float64, labelValues ...string) {
	k := c.s.key(labelValues)
	c.s.mu.Lock()
	c.s.values[k] += v
	c.s.mu.Unlock()
}

// Inc adds one.
func (c *Counter) Inc(labelValues ...string) { c.Add(1, labelValues...) }

// Value returns the current value, for tests.
func (c *Counter) Value(labelValues ...string) float64 {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.s.values[c.s.key(labelValues)]
}

// Sample is one gauge value with its label values.
type Sample struct {
	Labels []string
	Value  float64
}

type gaugeFunc struct {
	name, help string
	labels     []string
	fn         func() []Sample
}

// NewGaugeFunc registers a gauge read at scrape time.
func (r *Registry) NewGaugeFunc(name, help string, labels []string, fn func() []Sample) {
	r.add(&gaugeFunc{name, help, labels, fn})
}

func (g *gaugeFunc) write(w io.Writer) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", g.name, g.help, g.name)
	for _, s := range g.fn() {
		fmt.Fprintf(w, "%s%s %s\n", g.name, labelString(g.labels, s.Labels), formatFloat(s.Value))
	}
}

// Histogram counts observations into fixed buckets per label set.
type Histogram struct {
	name, help string
	labels     []string
	buckets    []float64
	mu         sync.Mutex
	data       map[string]*histData
}

type histData struct {
	counts []uint64
	sum    float64
	count  uint64
}

// NewHistogram registers a histogram with upper bounds buckets (ascending).
func (r *Registry) NewHistogram(name, help string, buckets []float64, labels ...string) *Histogram {
	h := &Histogram{name: name, help: help, labels: labels, buckets: buckets, data: map[string]*histData{}}
	r.add(h)
	return h
}

// Observe records v.
func (h *Histogram) Observe(v float64, labelValues ...string) {
	k := strings.Join(labelValues, "\x00")
	h.mu.Lock()
	d := h.data[k]
	if d == nil {
		d = &histData{counts: make([]uint64, len(h.buckets))}
		h.data[k] = d
	}
	for i, b := range h.buckets {
		if v <= b {
			d.counts[i]++
		}
	}
	d.sum += v
	d.count++
	h.mu.Unlock()
}

func (h *Histogram) write(w io.Writer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	keys := make([]string, 0, len(h.data))
	for k := range h.data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", h.name, h.help, h.name)
	for _, k := range keys {
		d, lv := h.data[k], splitKey(k, len(h.labels))
		for i, b := range h.buckets {
			fmt.Fprintf(w, "%s_bucket%s %d\n", h.name, labelString(h.labels, lv, "le", formatFloat(b)), d.counts[i])
		}
		fmt.Fprintf(w, "%s_bucket%s %d\n", h.name, labelString(h.labels, lv, "le", "+Inf"), d.count)
		fmt.Fprintf(w, "%s_sum%s %g\n", h.name, labelString(h.labels, lv), d.sum)
		fmt.Fprintf(w, "%s_count%s %d\n", h.name, labelString(h.labels, lv), d.count)
	}
}
