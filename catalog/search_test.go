package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// loadServers reads testdata/servers.json: server name → tools as an MCP
// tools/list reply spells them.
func loadServers(t testing.TB) map[string][]*mcp.Tool {
	t.Helper()
	b, err := os.ReadFile("testdata/servers.json")
	if err != nil {
		t.Fatal(err)
	}
	var servers map[string][]*mcp.Tool
	if err := json.Unmarshal(b, &servers); err != nil {
		t.Fatal(err)
	}
	return servers
}

func newTestCatalog(t testing.TB) *Catalog {
	t.Helper()
	c := New()
	for name, tools := range loadServers(t) {
		if err := c.Replace(name, tools); err != nil {
			t.Fatalf("Replace(%s): %v", name, err)
		}
	}
	return c
}

func names(rs []Result) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Name
	}
	return out
}

func TestSearchParaphrase(t *testing.T) {
	c := newTestCatalog(t)
	tests := []struct {
		query string
		want  string
		rank  int // want must rank at this position or better (1 = first)
	}{
		{"show me what files are in a folder", "filesystem:list_directory", 1},
		{"list_directory", "filesystem:list_directory", 1},
		{"filesystem:list_directory", "filesystem:list_directory", 1},
		{"open a ticket on a github repo", "github:create_issue", 2},
		{"send a message to a slack channel", "slack:slack_post_message", 1},
		{"run a read-only SQL query against postgres", "postgres:query", 1},
		{"download a web page as markdown", "fetch:fetch", 1},
		{"what time is it in Tokyo right now", "time:get_current_time", 1},
		{"take a screenshot of the browser page", "puppeteer:puppeteer_screenshot", 1},
		{"remove entities from the knowledge graph", "memory:delete_entities", 1},
		{"show changes in my working directory that are not staged", "git:git_diff_unstaged", 1},
		{"rename a file", "filesystem:move_file", 1},
		{"driving directions between two places", "google-maps:maps_directions", 1},
		{"find files whose names match a pattern", "filesystem:search_files", 1},
		{"make a new folder", "filesystem:create_directory", 1},
		{"search the internet for news", "brave-search:brave_web_search", 1},
		{"which tables exist in the sqlite db", "sqlite:list_tables", 2},
		{"merge a pull request", "github:merge_pull_request", 1},
		{"who are the people in our slack workspace", "slack:slack_get_users", 1},
		{"how big is this file and when was it modified", "filesystem:get_file_info", 2},
		{"commit history of a branch", "github:list_commits", 3},
		{"delete rows from a table", "sqlite:write_query", 5},
		{"restaurants near me", "brave-search:brave_local_search", 1},
		{"overwrite a file with new content", "filesystem:write_file", 1},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			got := c.Search(tt.query, 5, nil)
			i := slices.Index(names(got), tt.want)
			if i < 0 || i+1 > tt.rank {
				t.Errorf("Search(%q) = %v; want %s at rank %d or better", tt.query, names(got), tt.want, tt.rank)
			}
			for j := 1; j < len(got); j++ {
				if got[j].Score > got[j-1].Score {
					t.Errorf("results out of order: %v (%v) before %v (%v)", got[j-1].Name, got[j-1].Score, got[j].Name, got[j].Score)
				}
			}
		})
	}
}

func TestSearchResultFields(t *testing.T) {
	c := newTestCatalog(t)
	got := c.Search("list directory", 1, nil)
	if len(got) != 1 {
		t.Fatalf("Search returned %d results, want 1", len(got))
	}
	r := got[0]
	if r.Name != "filesystem:list_directory" || r.Server != "filesystem" || r.Tool != "list_directory" {
		t.Errorf("result names = %q %q %q", r.Name, r.Server, r.Tool)
	}
	if !strings.HasPrefix(r.Description, "Get a detailed listing") {
		t.Errorf("Description = %q", r.Description)
	}
	if r.Annotations == nil || !r.Annotations.ReadOnlyHint {
		t.Errorf("Annotations = %+v, want readOnlyHint", r.Annotations)
	}
	schema, _ := r.InputSchema.(map[string]any)
	if props, _ := schema["properties"].(map[string]any); props["path"] == nil {
		t.Errorf("InputSchema = %v, want a path property", r.InputSchema)
	}
	if r.Score <= 0 {
		t.Errorf("Score = %v, want > 0", r.Score)
	}
	// The result marshals the way retrieve_tools sends it.
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"name":"filesystem:list_directory"`, `"inputSchema":{`, `"readOnlyHint":true`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("JSON %s lacks %s", b, key)
		}
	}
}

func TestSearchEdgeCases(t *testing.T) {
	c := newTestCatalog(t)
	if got := c.Search("the of and is", 10, nil); len(got) != 0 {
		t.Errorf("stop-word query found %v", names(got))
	}
	if got := c.Search("", 10, nil); len(got) != 0 {
		t.Errorf("empty query found %v", names(got))
	}
	if got := c.Search("xylophone zebra", 10, nil); len(got) != 0 {
		t.Errorf("unknown words found %v", names(got))
	}
	if got := c.Search("file", 0, nil); len(got) != DefaultLimit {
		t.Errorf("limit 0 returned %d results, want %d", len(got), DefaultLimit)
	}
	if got := c.Search("file", 3, nil); len(got) != 3 {
		t.Errorf("limit 3 returned %d results", len(got))
	}
	// Equal scores rank the same way every time.
	first := names(c.Search("repository", 20, nil))
	for range 20 {
		if again := names(c.Search("repository", 20, nil)); !slices.Equal(first, again) {
			t.Fatalf("ranking changed between runs: %v then %v", first, again)
		}
	}
	if got := New().Search("file", 10, nil); got != nil {
		t.Errorf("empty catalog found %v", names(got))
	}
}

func TestSearchAllow(t *testing.T) {
	c := newTestCatalog(t)
	calls := map[string]int{}
	allow := func(s string) bool {
		calls[s]++
		return s == "github" || s == "git"
	}
	got := c.Search("list files in a repository branch", 50, allow)
	if len(got) == 0 {
		t.Fatal("no results from the allowed servers")
	}
	for _, r := range got {
		if r.Server != "github" && r.Server != "git" {
			t.Errorf("result %s from a server allow refused", r.Name)
		}
	}
	for s, n := range calls {
		if n != 1 {
			t.Errorf("allow(%q) called %d times in one search, want once", s, n)
		}
	}
	if got := c.Search("file", 10, func(string) bool { return false }); len(got) != 0 {
		t.Errorf("allow-nothing search found %v", names(got))
	}

	list := c.List(allow)
	for _, e := range list {
		if e.Server != "github" && e.Server != "git" {
			t.Errorf("List returned %s", e.QualifiedName())
		}
	}
	if want := len(loadServers(t)["github"]) + len(loadServers(t)["git"]); len(list) != want {
		t.Errorf("List(allow) has %d entries, want %d", len(list), want)
	}
	if !slices.IsSortedFunc(list, func(a, b Entry) int {
		return strings.Compare(a.QualifiedName(), b.QualifiedName())
	}) {
		t.Errorf("List not sorted: %v", list)
	}
	if all := c.List(nil); len(all) != c.Len() || c.Len() != 53 {
		t.Errorf("List(nil) has %d entries, Len() = %d, want 53", len(all), c.Len())
	}
}

func TestSearchFunc(t *testing.T) {
	c := newTestCatalog(t)
	calls := map[string]int{}
	// Hide write tools and one named tool, as a tool policy would.
	allow := func(e Entry) bool {
		calls[e.QualifiedName()]++
		return e.Tool.Annotations != nil && e.Tool.Annotations.ReadOnlyHint && e.Tool.Name != "list_directory"
	}
	got := c.SearchFunc("list files in a directory and create or write them", 50, allow)
	if len(got) == 0 {
		t.Fatal("no results")
	}
	for _, r := range got {
		if r.Annotations == nil || !r.Annotations.ReadOnlyHint || r.Tool == "list_directory" {
			t.Errorf("result %s passed a filter that refuses it", r.Name)
		}
	}
	for name, n := range calls {
		if n != 1 {
			t.Errorf("allow(%s) called %d times in one search, want once", name, n)
		}
	}
	if calls["filesystem:write_file"] != 1 || calls["filesystem:list_directory"] != 1 {
		t.Errorf("refused tools were not offered to allow: %v", calls)
	}
	// Refusals leave no trace in the next search.
	if got := names(c.Search("show me what files are in a folder", 1, nil)); !slices.Equal(got, []string{"filesystem:list_directory"}) {
		t.Errorf("search after a filtered search = %v", got)
	}
}

func TestGetLookup(t *testing.T) {
	c := newTestCatalog(t)
	e, ok := c.Get("github", "create_issue")
	if !ok || e.Server != "github" || e.Tool.Name != "create_issue" || e.QualifiedName() != "github:create_issue" {
		t.Fatalf("Get = %+v, %v", e, ok)
	}
	if e.Pin != Pin(e.Tool) || len(e.Pin) != 64 {
		t.Errorf("Entry.Pin = %q, want Pin(tool) = %q", e.Pin, Pin(e.Tool))
	}
	if l, ok := c.Lookup("github:create_issue"); !ok || l.Pin != e.Pin {
		t.Errorf("Lookup = %+v, %v", l, ok)
	}
	for _, name := range []string{"github", "github:", ":create_issue", "github:nope", "nope:create_issue", ""} {
		if _, ok := c.Lookup(name); ok {
			t.Errorf("Lookup(%q) found a tool", name)
		}
	}
	if _, ok := c.Get("github", "nope"); ok {
		t.Error("Get of a missing tool succeeded")
	}
	if s, tool, ok := SplitName("srv:a:b"); !ok || s != "srv" || tool != "a:b" {
		t.Errorf("SplitName(srv:a:b) = %q %q %v", s, tool, ok)
	}
}

func TestReplaceIsIncremental(t *testing.T) {
	c := newTestCatalog(t)
	before := c.Len()
	docSlots := len(c.docs)
	widget := &mcp.Tool{Name: "frobnicate_widget", Description: "Frobnicates a zorblax widget",
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{"quuxCount": map[string]any{"type": "integer"}}}}
	if err := c.Replace("acme", []*mcp.Tool{widget}); err != nil {
		t.Fatal(err)
	}
	if got := names(c.Search("zorblax", 5, nil)); !slices.Equal(got, []string{"acme:frobnicate_widget"}) {
		t.Fatalf("Search(zorblax) = %v", got)
	}
	if got := names(c.Search("quux count", 5, nil)); len(got) == 0 || got[0] != "acme:frobnicate_widget" {
		t.Fatalf("Search by parameter name = %v", got)
	}
	gadget := &mcp.Tool{Name: "polish_gadget", Description: "Polishes a gadget",
		InputSchema: map[string]any{"type": "object"}}
	for range 10 { // repeated replaces reuse slots rather than grow
		if err := c.Replace("acme", []*mcp.Tool{gadget}); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{"zorblax", "frobnicate", "widget", "quux"} {
		if got := c.Search(q, 5, nil); len(got) != 0 {
			t.Errorf("after Replace, Search(%q) still finds %v", q, names(got))
		}
		if n := len(c.postings[stem(q)]); n != 0 {
			t.Errorf("after Replace, %d postings remain for %q", n, q)
		}
	}
	if _, ok := c.Get("acme", "frobnicate_widget"); ok {
		t.Error("old tool still in Get")
	}
	if got := names(c.Search("polish gadget", 5, nil)); len(got) == 0 || got[0] != "acme:polish_gadget" {
		t.Errorf("Search(polish gadget) = %v", got)
	}
	if c.Len() != before+1 {
		t.Errorf("Len = %d, want %d", c.Len(), before+1)
	}
	if len(c.docs) > docSlots+1 {
		t.Errorf("doc slots grew to %d from %d over repeated replaces", len(c.docs), docSlots)
	}
	// Other servers are untouched.
	if got := names(c.Search("show me what files are in a folder", 1, nil)); !slices.Equal(got, []string{"filesystem:list_directory"}) {
		t.Errorf("other server's search changed: %v", got)
	}

	c.Remove("acme")
	c.Remove("acme") // twice is fine
	if got := c.Search("polish gadget", 5, nil); len(got) != 0 {
		t.Errorf("after Remove, found %v", names(got))
	}
	if c.Len() != before {
		t.Errorf("after Remove, Len = %d, want %d", c.Len(), before)
	}
	if err := c.Replace("acme", nil); err != nil || c.Len() != before {
		t.Errorf("Replace with no tools: err %v, Len %d", err, c.Len())
	}

	// Removing everything leaves an index with no postings at all.
	for name := range loadServers(t) {
		c.Remove(name)
	}
	if c.Len() != 0 || len(c.postings) != 0 || c.lenSum != [numFields]int{} {
		t.Errorf("empty catalog keeps state: Len %d, %d terms, lenSum %v", c.Len(), len(c.postings), c.lenSum)
	}
}

func TestReplaceRejects(t *testing.T) {
	c := New()
	for _, bad := range []string{"", "a:b"} {
		if err := c.Replace(bad, []*mcp.Tool{{Name: "x"}}); err == nil {
			t.Errorf("Replace(%q) accepted", bad)
		}
	}
	good := &mcp.Tool{Name: "good", InputSchema: map[string]any{"type": "object"}}
	err := c.Replace("srv", []*mcp.Tool{
		nil,
		{Name: ""},
		good,
		{Name: "good", Description: "a second tool with the same name"},
		{Name: "unencodable", InputSchema: map[string]any{"type": "object", "x": make(chan int)}},
		{Name: "also_good", InputSchema: json.RawMessage(`{"type":"object"}`)},
	})
	if err == nil {
		t.Fatal("Replace with bad tools returned no error")
	}
	for _, want := range []string{"#0", "#1", "srv:good: listed twice", "srv:unencodable"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	got := c.List(nil)
	if len(got) != 2 || got[0].Tool.Name != "also_good" || got[1].Tool.Name != "good" {
		t.Errorf("kept %v, want also_good and good", got)
	}
	if e, _ := c.Get("srv", "also_good"); e.Tool.InputSchema.(map[string]any)["type"] != "object" {
		t.Errorf("RawMessage schema not decoded: %#v", e.Tool.InputSchema)
	}
}

func TestReplaceCopiesTools(t *testing.T) {
	c := New()
	ro := true
	schema := map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}}
	tool := &mcp.Tool{Name: "t", Description: "original", InputSchema: schema,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: ro}}
	if err := c.Replace("s", []*mcp.Tool{tool}); err != nil {
		t.Fatal(err)
	}
	tool.Description = "changed"
	tool.Annotations.ReadOnlyHint = false
	schema["properties"].(map[string]any)["evil"] = map[string]any{"type": "string"}
	e, _ := c.Get("s", "t")
	if e.Tool.Description != "original" || !e.Tool.Annotations.ReadOnlyHint {
		t.Errorf("catalog entry follows the caller's changes: %+v", e.Tool)
	}
	if props := e.Tool.InputSchema.(map[string]any)["properties"].(map[string]any); props["evil"] != nil {
		t.Error("catalog schema shares the caller's map")
	}
}

// TestConcurrentSearchAndReplace runs under -race: readers see a stable
// server whole while another server churns.
func TestConcurrentSearchAndReplace(t *testing.T) {
	c := newTestCatalog(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for r := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				got := c.Search("show me what files are in a folder", 3, nil)
				if len(got) == 0 || got[0].Name != "filesystem:list_directory" {
					errc <- fmt.Errorf("reader %d: search %d = %v", r, i, names(got))
					return
				}
				if _, ok := c.Get("github", "create_issue"); !ok {
					errc <- errors.New("stable tool vanished")
					return
				}
			}
		})
	}
	for i := range 300 {
		tools := []*mcp.Tool{{Name: fmt.Sprintf("churn_%d", i), Description: "A churning tool about widgets",
			InputSchema: map[string]any{"type": "object"}}}
		if i%3 == 2 {
			c.Remove("churn")
		} else if err := c.Replace("churn", tools); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}
