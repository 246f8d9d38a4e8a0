package gateway

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/catalog"
)

func TestSplitAllName(t *testing.T) {
	g := &Gateway{cat: catalog.New()}
	obj := map[string]any{"type": "object"}
	for server, tools := range map[string][]string{
		"a":     {"b", "_c"},
		"a_":    {"c"},
		"x__y":  {"z"},
		"plain": {"with__inner"},
	} {
		var ts []*mcp.Tool
		for _, n := range tools {
			ts = append(ts, &mcp.Tool{Name: n, InputSchema: obj})
		}
		if err := g.cat.Replace(server, ts); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct{ name, server, tool string }{
		{"a__b", "a", "b"},
		{"a___c", "a", "_c"}, // "a_" has "c" too: the first split that names a tool wins
		{"x__y__z", "x__y", "z"},
		{"plain__with__inner", "plain", "with__inner"},
		{"nope__b", "", ""},
		{"a__", "", ""},
		{"__b", "", ""},
	}
	for _, tt := range tests {
		s, tool, ok := g.splitAllName(tt.name)
		if s != tt.server || tool != tt.tool || ok != (tt.server != "") {
			t.Errorf("splitAllName(%q) = %q, %q, %v; want %q, %q", tt.name, s, tool, ok, tt.server, tt.tool)
		}
	}
}

func TestSessionIDs(t *testing.T) {
	g := &Gateway{key: []byte("0123456789abcdef0123456789abcdef")}
	other := &Gateway{key: []byte("fedcba9876543210fedcba9876543210")}
	id := g.newSessionID("42")
	if !g.sessionValid(id, "42") {
		t.Fatal("a fresh id does not verify for its user")
	}
	if g.newSessionID("42") == id {
		t.Error("two sessions of one user got the same id")
	}
	for _, tc := range []struct {
		name, id, user string
		gw             *Gateway
	}{
		{"other user", id, "43", g},
		{"prefix user", id, "4", g},
		{"other key", id, "42", other},
		{"truncated", id[:len(id)-1], "42", g},
		{"not base64", "!!" + id[2:], "42", g},
		{"empty", "", "42", g},
	} {
		if tc.gw.sessionValid(tc.id, tc.user) {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}
