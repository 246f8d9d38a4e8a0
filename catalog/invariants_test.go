package catalog

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// checkIndex verifies that postings and docs agree: every posting points at
// a live doc whose pos entry points back at it, every live doc has exactly
// its terms' postings, and the length sums match.
func checkIndex(t testing.TB, c *Catalog) {
	t.Helper()
	c.mu.RLock()
	defer c.mu.RUnlock()
	var lenSum [numFields]int
	live := 0
	for id, d := range c.docs {
		if d == nil {
			continue
		}
		live++
		for f := range numFields {
			lenSum[f] += int(d.lens[f])
		}
		if !slices.IsSorted(d.terms) || len(d.pos) != len(d.terms) {
			t.Fatalf("doc %d: terms unsorted or pos of %d for %d terms", id, len(d.pos), len(d.terms))
		}
		for i, term := range d.terms {
			list := c.postings[term]
			if int(d.pos[i]) >= len(list) || list[d.pos[i]].doc != uint32(id) {
				t.Fatalf("doc %d term %q: pos %d does not hold its posting", id, term, d.pos[i])
			}
		}
		if sd := c.servers[d.entry.Server]; sd != d.server || sd.tools[d.entry.Tool.Name] != uint32(id) {
			t.Fatalf("doc %d not registered under its server", id)
		}
	}
	for term, list := range c.postings {
		if len(list) == 0 {
			t.Fatalf("term %q has an empty list", term)
		}
		for _, p := range list {
			d := c.docs[p.doc]
			if d == nil {
				t.Fatalf("term %q: posting for removed doc %d", term, p.doc)
			}
			if _, ok := slices.BinarySearch(d.terms, term); !ok {
				t.Fatalf("term %q: doc %d does not have it", term, p.doc)
			}
		}
	}
	if live != c.ndocs || lenSum != c.lenSum {
		t.Fatalf("ndocs %d vs %d live; lenSum %v vs %v", c.ndocs, live, c.lenSum, lenSum)
	}
}

// TestIndexInvariants replaces and removes random servers many times and
// checks the postings after each step, then compares the ranking with a
// catalog built from scratch with the same final content.
func TestIndexInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	pool := genTools(rng, 12, 30)
	servers := slices.Sorted(maps.Keys(pool))
	c := New()
	current := map[string]int{} // server → number of its tools held
	for step := range 400 {
		s := servers[rng.IntN(len(servers))]
		if rng.IntN(4) == 0 {
			c.Remove(s)
			delete(current, s)
		} else {
			tools := pool[s]
			lo := rng.IntN(len(tools))
			hi := lo + rng.IntN(len(tools)-lo+1)
			if err := c.Replace(s, tools[lo:hi]); err != nil {
				t.Fatal(err)
			}
			current[s] = hi - lo
			if hi == lo {
				delete(current, s)
			}
		}
		checkIndex(t, c)
		want := 0
		for _, n := range current {
			want += n
		}
		if c.Len() != want {
			t.Fatalf("step %d: Len %d, want %d", step, c.Len(), want)
		}
	}

	fresh := New()
	for s := range current {
		var tools []*mcp.Tool
		for _, e := range c.List(func(x string) bool { return x == s }) {
			tools = append(tools, e.Tool)
		}
		if err := fresh.Replace(s, tools); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range benchQueries {
		a, b := c.Search(q, 10, nil), fresh.Search(q, 10, nil)
		if scored(a) != scored(b) {
			t.Errorf("query %q: churned index ranks %v, fresh index %v", q, names(a), names(b))
		}
	}
}

func scored(rs []Result) string {
	var out string
	for _, r := range rs {
		out += fmt.Sprintf("%s=%v ", r.Name, r.Score)
	}
	return out
}
