package catalog

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// FuzzSearch feeds arbitrary text both as a tool (name, description,
// parameter) and as a query: nothing panics, tokens are well formed, results
// respect the limit, the filter and the order, and Remove leaves no postings.
func FuzzSearch(f *testing.F) {
	f.Add("list_directory", "Get a detailed listing of all files", "path", "show me files in a folder", 3)
	f.Add("getHTTPResponse2", "ÜBER straße 123abc", "fooBar_baz", "HTTP über", 1)
	f.Add("", "", "", "", 0)
	f.Add("a:b", "\xff\xfe", "\x00", "the of and", -1)
	f.Fuzz(func(t *testing.T, name, desc, param, query string, limit int) {
		for _, tok := range tokenize(name+" "+desc+" "+query, nil) {
			// A stemmed token may equal a stop word ("shes" → "she"):
			// stop words are dropped before stemming.
			if tok == "" {
				t.Fatalf("bad token %q", tok)
			}
			if utf8.ValidString(tok) && strings.ToLower(tok) != tok {
				t.Fatalf("token %q not lower-cased", tok)
			}
		}
		c := New()
		tool := &mcp.Tool{Name: name, Description: desc, InputSchema: map[string]any{
			"type": "object", "properties": map[string]any{param: map[string]any{"description": desc}}}}
		_ = c.Replace("srv", []*mcp.Tool{tool, {Name: "fixed", Description: query}})
		_ = c.Replace("other", []*mcp.Tool{{Name: "other_tool", Description: desc + " " + query}})
		checkIndex(t, c)
		_ = c.Replace("srv", []*mcp.Tool{{Name: "fixed", Description: desc}, {Name: param, Description: name}})
		checkIndex(t, c)
		limit = limit % 50
		got := c.Search(query, limit, func(s string) bool { return s != "other" })
		want := limit
		if want <= 0 {
			want = DefaultLimit
		}
		if len(got) > want {
			t.Fatalf("%d results for limit %d", len(got), limit)
		}
		for i, r := range got {
			if r.Server == "other" {
				t.Fatalf("result from a refused server: %v", r.Name)
			}
			if i > 0 && r.Score > got[i-1].Score {
				t.Fatalf("results out of order")
			}
		}
		c.Remove("srv")
		c.Remove("other")
		if c.Len() != 0 || len(c.postings) != 0 {
			t.Fatalf("after Remove: Len %d, %d terms", c.Len(), len(c.postings))
		}
	})
}
