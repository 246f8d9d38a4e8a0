// Package catalog holds the tools of every upstream server in memory: a ranked
// search index over them, their pins (a hash that changes when a tool does)
// and the rules that decide which call_tool variant and token scope a call
// needs. It does no I/O, so the gateway core can rebuild it from whatever the
// upstreams report.
package catalog

import (
	"cmp"
	"container/heap"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Entry is one upstream tool as the catalog holds it.
type Entry struct {
	// Server is the upstream server's name.
	Server string
	// Tool is the catalog's own copy of the upstream's tool, with the input
	// and output schemas decoded into plain JSON values (maps, slices,
	// float64...). It is shared by every reader: treat it as read-only.
	Tool *mcp.Tool
	// Pin is Pin(Tool), computed once when the tool was added.
	Pin string
}

// QualifiedName returns "server:tool", the name clients pass to call_tool_*.
func (e Entry) QualifiedName() string { return e.Server + ":" + e.Tool.Name }

// SplitName splits a "server:tool" name at its first colon: server names
// cannot contain one, tool names in theory can.
func SplitName(name string) (server, tool string, ok bool) {
	server, tool, ok = strings.Cut(name, ":")
	if !ok || server == "" || tool == "" {
		return "", "", false
	}
	return server, tool, true
}

// Result is one search hit, shaped for the retrieve_tools reply.
type Result struct {
	Name        string               `json:"name"` // "server:tool"
	Server      string               `json:"server"`
	Tool        string               `json:"tool"`
	Title       string               `json:"title,omitempty"`
	Description string               `json:"description,omitempty"`
	Annotations *mcp.ToolAnnotations `json:"annotations,omitempty"`
	// InputSchema is shared with the catalog: read-only.
	InputSchema any     `json:"inputSchema,omitempty"`
	Score       float64 `json:"score"`
}

// Fields of a document, each with its own weight and length normalisation
// (BM25F). The name is short and says what the tool does, so it weighs most.
const (
	fieldName = iota
	fieldServer
	fieldDescription
	fieldParamName
	fieldParamDescription
	numFields
)

var (
	fieldWeight = [numFields]float64{3.0, 1.5, 1.0, 1.2, 0.5}
	// fieldB is BM25's length normalisation per field: descriptions vary a
	// lot in length, names and server names hardly.
	fieldB = [numFields]float64{0.3, 0.2, 0.75, 0.5, 0.75}
)

// k1 is BM25's term-frequency saturation.
const k1 = 1.2

// DefaultLimit is the number of results Search returns when asked for 0.
const DefaultLimit = 10

// Catalog is a concurrency-safe, incrementally updated index of upstream
// tools. The zero value is not usable; call New.
type Catalog struct {
	mu       sync.RWMutex
	servers  map[string]*serverDocs
	slots    []*serverDocs // by serverDocs.slot; nil = free
	docs     []*doc        // by doc id; nil = free
	freeDocs []uint32
	postings map[string][]posting
	lenSum   [numFields]int
	ndocs    int

	scratch sync.Pool // *queryScratch
}

type serverDocs struct {
	name  string
	slot  int
	tools map[string]uint32 // tool name → doc id
}

type doc struct {
	entry  Entry
	server *serverDocs
	lens   [numFields]uint16
	terms  []string            // distinct terms, sorted
	pos    []int32             // by terms index: where this doc's posting sits in the term's list
	tfs    [][numFields]uint16 // by terms index, until the postings take them
}

type posting struct {
	doc uint32
	tf  [numFields]uint16
}

// New returns an empty catalog.
func New() *Catalog {
	return &Catalog{
		servers:  map[string]*serverDocs{},
		postings: map[string][]posting{},
	}
}

// Replace sets the tools of server to tools, replacing whatever it had; only
// that server's postings change. Tools the catalog cannot hold (nil, no
// name, a repeated name, a schema that does not encode as JSON) are left
// out, and the returned error names each of them; the others are indexed all
// the same, so one bad tool does not hide a server's good ones. An empty
// server name or one containing ':' is refused outright.
func (c *Catalog) Replace(server string, tools []*mcp.Tool) error {
	if server == "" || strings.Contains(server, ":") {
		return fmt.Errorf("replacing tools: invalid server name %q", server)
	}
	var errs []error
	prepared := make([]*doc, 0, len(tools))
	seen := make(map[string]bool, len(tools))
	for i, t := range tools {
		if t == nil {
			errs = append(errs, fmt.Errorf("tool #%d of %s: nil", i, server))
			continue
		}
		if t.Name == "" {
			errs = append(errs, fmt.Errorf("tool #%d of %s: no name", i, server))
			continue
		}
		if seen[t.Name] {
			errs = append(errs, fmt.Errorf("tool %s:%s: listed twice", server, t.Name))
			continue
		}
		d, err := newDoc(server, t)
		if err != nil {
			errs = append(errs, fmt.Errorf("tool %s:%s: %w", server, t.Name, err))
			continue
		}
		seen[t.Name] = true
		prepared = append(prepared, d)
	}

	c.mu.Lock()
	c.installLocked(server, prepared)
	c.mu.Unlock()
	return errors.Join(errs...)
}

// installLocked makes docs the whole of server's tools.
func (c *Catalog) installLocked(server string, docs []*doc) {
	c.removeLocked(server)
	if len(docs) == 0 {
		return
	}
	sd := &serverDocs{name: server, tools: make(map[string]uint32, len(docs))}
	sd.slot = slices.Index(c.slots, nil)
	if sd.slot < 0 {
		sd.slot = len(c.slots)
		c.slots = append(c.slots, nil)
	}
	c.slots[sd.slot] = sd
	c.servers[server] = sd
	for _, d := range docs {
		d.server = sd
		sd.tools[d.entry.Tool.Name] = c.addLocked(d)
	}
}

// Remove drops every tool of server.
func (c *Catalog) Remove(server string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(server)
}

func (c *Catalog) removeLocked(server string) {
	sd := c.servers[server]
	if sd == nil {
		return
	}
	for _, id := range sd.tools {
		d := c.docs[id]
		// Each posting leaves by a swap with its list's last one, so a
		// removal costs the doc's term count, not the lists' lengths:
		// common terms have thousands of postings.
		for i, t := range d.terms {
			list := c.postings[t]
			at, last := d.pos[i], int32(len(list)-1)
			if at != last {
				moved := list[last]
				list[at] = moved
				md := c.docs[moved.doc]
				j, _ := slices.BinarySearch(md.terms, t)
				md.pos[j] = at
			}
			if last == 0 {
				delete(c.postings, t)
			} else {
				c.postings[t] = list[:last]
			}
		}
		for f := range numFields {
			c.lenSum[f] -= int(d.lens[f])
		}
		c.docs[id] = nil
		c.freeDocs = append(c.freeDocs, id)
		c.ndocs--
	}
	delete(c.servers, server)
	c.slots[sd.slot] = nil
}

// addLocked stores d and its postings and returns its id.
func (c *Catalog) addLocked(d *doc) uint32 {
	var id uint32
	if n := len(c.freeDocs); n > 0 {
		id = c.freeDocs[n-1]
		c.freeDocs = c.freeDocs[:n-1]
		c.docs[id] = d
	} else {
		id = uint32(len(c.docs))
		c.docs = append(c.docs, d)
	}
	c.ndocs++
	for f := range numFields {
		c.lenSum[f] += int(d.lens[f])
	}
	d.pos = make([]int32, len(d.terms))
	for i, t := range d.terms {
		d.pos[i] = int32(len(c.postings[t]))
		c.postings[t] = append(c.postings[t], posting{doc: id, tf: d.tfs[i]})
	}
	d.tfs = nil // the postings hold them now
	return id
}

// analyze counts d's terms per field, outside the catalog's lock.
func (d *doc) analyze() {
	index := map[string]int{}
	var buf []string
	for f, text := range d.fieldTexts() {
		var n int
		for _, s := range text {
			buf = tokenize(s, buf[:0])
			for _, t := range buf {
				i, ok := index[t]
				if !ok {
					i = len(d.terms)
					index[t] = i
					d.terms = append(d.terms, t)
					d.tfs = append(d.tfs, [numFields]uint16{})
				}
				if d.tfs[i][f] < math.MaxUint16 {
					d.tfs[i][f]++
				}
				n++
			}
		}
		d.lens[f] = uint16(min(n, math.MaxUint16))
	}
	// Sorted terms let a removal find a term's slot by binary search.
	perm := make([]int, len(d.terms))
	for i := range perm {
		perm[i] = i
	}
	slices.SortFunc(perm, func(a, b int) int { return strings.Compare(d.terms[a], d.terms[b]) })
	terms := make([]string, len(perm))
	tfs := make([][numFields]uint16, len(perm))
	for i, j := range perm {
		terms[i], tfs[i] = d.terms[j], d.tfs[j]
	}
	d.terms, d.tfs = terms, tfs
}

// fieldTexts returns the text of each field of d.
func (d *doc) fieldTexts() [numFields][]string {
	var ft [numFields][]string
	t := d.entry.Tool
	ft[fieldName] = []string{t.Name, t.Title}
	if t.Annotations != nil && t.Annotations.Title != "" {
		ft[fieldName] = append(ft[fieldName], t.Annotations.Title)
	}
	ft[fieldServer] = []string{d.entry.Server}
	ft[fieldDescription] = []string{t.Description}
	if schema, ok := t.InputSchema.(map[string]any); ok {
		props, _ := schema["properties"].(map[string]any)
		for _, name := range slices.Sorted(maps.Keys(props)) {
			ft[fieldParamName] = append(ft[fieldParamName], name)
			if p, ok := props[name].(map[string]any); ok {
				if desc, ok := p["description"].(string); ok {
					ft[fieldParamDescription] = append(ft[fieldParamDescription], desc)
				}
			}
		}
	}
	return ft
}

// newDoc copies t so that later changes by the caller cannot reach the
// index, and decodes its schemas into plain JSON values.
func newDoc(server string, t *mcp.Tool) (*doc, error) {
	cp := *t
	if t.Annotations != nil {
		a := *t.Annotations
		cp.Annotations = &a
	}
	var err error
	if cp.InputSchema, err = plainJSON(t.InputSchema); err != nil {
		return nil, fmt.Errorf("encoding input schema: %w", err)
	}
	if cp.OutputSchema, err = plainJSON(t.OutputSchema); err != nil {
		return nil, fmt.Errorf("encoding output schema: %w", err)
	}
	cp.Icons = slices.Clone(t.Icons)
	pin, err := pinPlain(&cp, cp.InputSchema, cp.OutputSchema)
	if err != nil {
		return nil, err
	}
	d := &doc{entry: Entry{Server: server, Tool: &cp, Pin: pin}}
	d.analyze()
	return d, nil
}

// plainJSON turns any JSON-encodable value (a map, json.RawMessage, a
// *jsonschema.Schema) into a fresh tree of maps, slices and scalars.
func plainJSON(v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Get returns the tool named tool of server.
func (c *Catalog) Get(server, tool string) (Entry, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	sd := c.servers[server]
	if sd == nil {
		return Entry{}, false
	}
	id, ok := sd.tools[tool]
	if !ok {
		return Entry{}, false
	}
	return c.docs[id].entry, true
}

// Lookup returns the tool with the qualified name "server:tool".
func (c *Catalog) Lookup(name string) (Entry, bool) {
	server, tool, ok := SplitName(name)
	if !ok {
		return Entry{}, false
	}
	return c.Get(server, tool)
}

// List returns the tools of every server allow accepts (nil accepts all),
// ordered by server, then tool name. allow runs under the catalog's read
// lock: it must not call back into the catalog.
func (c *Catalog) List(allow func(server string) bool) []Entry {
	c.mu.RLock()
	var out []Entry
	for name, sd := range c.servers {
		if allow != nil && !allow(name) {
			continue
		}
		for _, id := range sd.tools {
			out = append(out, c.docs[id].entry)
		}
	}
	c.mu.RUnlock()
	slices.SortFunc(out, func(a, b Entry) int {
		return cmp.Or(strings.Compare(a.Server, b.Server), strings.Compare(a.Tool.Name, b.Tool.Name))
	})
	return out
}

// Len returns the number of tools held.
func (c *Catalog) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.ndocs
}

type queryScratch struct {
	acc     []float64
	touched []uint32
	allowed []int8 // by server slot: 0 unknown, 1 allowed, -1 not
}

// Search ranks the tools of the servers allow accepts (nil accepts all)
// against query and returns at most limit of them (DefaultLimit when
// limit <= 0), best first. A query made only of stop words finds nothing.
// allow is called at most once per server and search, under the catalog's
// read lock: it must not call back into the catalog.
func (c *Catalog) Search(query string, limit int, allow func(server string) bool) []Result {
	return c.search(query, limit, allow, nil)
}

// SearchFunc is Search with a per-tool filter, for rules finer than a
// server (a tool policy, an unapproved or changed pin). allow is called at
// most once per matching tool and search, under the catalog's read lock: it
// must not call back into the catalog.
func (c *Catalog) SearchFunc(query string, limit int, allow func(Entry) bool) []Result {
	return c.search(query, limit, nil, allow)
}

func (c *Catalog) search(query string, limit int, allow func(server string) bool, allowEntry func(Entry) bool) []Result {
	if limit <= 0 {
		limit = DefaultLimit
	}
	terms := analyzeQuery(query)
	if len(terms) == 0 {
		return nil
	}

	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ndocs == 0 {
		return nil
	}
	sc, _ := c.scratch.Get().(*queryScratch)
	if sc == nil {
		sc = &queryScratch{}
	}
	defer c.scratch.Put(sc)
	if cap(sc.acc) < len(c.docs) {
		sc.acc = make([]float64, len(c.docs))
	}
	acc := sc.acc[:len(c.docs)]
	touched := sc.touched[:0]
	if cap(sc.allowed) < len(c.slots) {
		sc.allowed = make([]int8, len(c.slots))
	}
	allowed := sc.allowed[:len(c.slots)]
	clear(allowed)
	var refused []uint32 // docs allowEntry refused, marked in acc with -1

	var norm [numFields]float64 // 1/avg field length
	for f := range numFields {
		if c.lenSum[f] > 0 {
			norm[f] = float64(c.ndocs) / float64(c.lenSum[f])
		}
	}
	n := float64(c.ndocs)
	for _, qt := range terms {
		list := c.postings[qt.term]
		if len(list) == 0 {
			continue
		}
		df := float64(len(list))
		idf := qt.weight * math.Log(1+(n-df+0.5)/(df+0.5))
		for _, p := range list {
			d := c.docs[p.doc]
			slot := d.server.slot
			if allowed[slot] == 0 {
				allowed[slot] = -1
				if allow == nil || allow(d.server.name) {
					allowed[slot] = 1
				}
			}
			if allowed[slot] < 0 {
				continue
			}
			if allowEntry != nil && acc[p.doc] == 0 {
				if !allowEntry(d.entry) {
					acc[p.doc] = -1
					refused = append(refused, p.doc)
				}
			}
			if acc[p.doc] < 0 {
				continue
			}
			var tf float64
			for f := range numFields {
				if p.tf[f] == 0 {
					continue
				}
				tf += fieldWeight[f] * float64(p.tf[f]) / (1 - fieldB[f] + fieldB[f]*float64(d.lens[f])*norm[f])
			}
			if acc[p.doc] == 0 {
				touched = append(touched, p.doc)
			}
			acc[p.doc] += idf * tf * (k1 + 1) / (tf + k1)
		}
	}

	h := &resultHeap{}
	for _, id := range touched {
		s := acc[id]
		acc[id] = 0
		e := c.docs[id].entry
		if h.Len() < limit {
			heap.Push(h, hit{s, e})
		} else if better(hit{s, e}, (*h)[0]) {
			(*h)[0] = hit{s, e}
			heap.Fix(h, 0)
		}
	}
	for _, id := range refused {
		acc[id] = 0
	}
	sc.touched, sc.allowed = touched, allowed

	out := make([]Result, h.Len())
	for i := len(out) - 1; i >= 0; i-- {
		x := heap.Pop(h).(hit)
		t := x.entry.Tool
		var ann *mcp.ToolAnnotations
		if t.Annotations != nil {
			a := *t.Annotations
			ann = &a
		}
		out[i] = Result{
			Name:        x.entry.QualifiedName(),
			Server:      x.entry.Server,
			Tool:        t.Name,
			Title:       t.Title,
			Description: t.Description,
			Annotations: ann,
			InputSchema: t.InputSchema,
			Score:       x.score,
		}
	}
	return out
}

type hit struct {
	score float64
	entry Entry
}

// better orders hits by score, then by name so equal scores rank the same
// way every time.
func better(a, b hit) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	if a.entry.Server != b.entry.Server {
		return a.entry.Server < b.entry.Server
	}
	return a.entry.Tool.Name < b.entry.Tool.Name
}

// resultHeap is a min-heap on better: its root is the worst kept hit.
type resultHeap []hit

func (h resultHeap) Len() int           { return len(h) }
func (h resultHeap) Less(i, j int) bool { return better(h[j], h[i]) }
func (h resultHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *resultHeap) Push(x any)        { *h = append(*h, x.(hit)) }
func (h *resultHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
