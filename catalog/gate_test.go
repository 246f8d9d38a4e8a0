package catalog

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestRequiredVariant(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		name string
		ann  *mcp.ToolAnnotations
		want Variant
	}{
		{"no annotations", nil, VariantDestructive},
		{"empty annotations", &mcp.ToolAnnotations{}, VariantDestructive},
		{"readOnly", &mcp.ToolAnnotations{ReadOnlyHint: true}, VariantRead},
		{"readOnly, destructive true", &mcp.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &yes}, VariantRead},
		{"readOnly, destructive false", &mcp.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &no}, VariantRead},
		{"destructive false", &mcp.ToolAnnotations{DestructiveHint: &no}, VariantWrite},
		{"destructive true", &mcp.ToolAnnotations{DestructiveHint: &yes}, VariantDestructive},
		{"idempotent only", &mcp.ToolAnnotations{IdempotentHint: true}, VariantDestructive},
		{"closed world only", &mcp.ToolAnnotations{OpenWorldHint: &no}, VariantDestructive},
	}
	for _, tt := range tests {
		if got := RequiredVariant(tt.ann); got != tt.want {
			t.Errorf("%s: RequiredVariant = %s, want %s", tt.name, got, tt.want)
		}
	}
}

// TestCheckCall walks every annotation class × variant × scope set.
func TestCheckCall(t *testing.T) {
	yes, no := true, false
	classes := []struct {
		name string
		ann  *mcp.ToolAnnotations
		want Variant
	}{
		{"nil", nil, VariantDestructive},
		{"readOnly", &mcp.ToolAnnotations{ReadOnlyHint: true}, VariantRead},
		{"readOnly+destructive", &mcp.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &yes}, VariantRead},
		{"write", &mcp.ToolAnnotations{DestructiveHint: &no}, VariantWrite},
		{"destructive", &mcp.ToolAnnotations{DestructiveHint: &yes}, VariantDestructive},
		{"defaults", &mcp.ToolAnnotations{}, VariantDestructive},
	}
	scopeSets := []struct {
		scopes []string
		level  int // highest variant level covered
	}{
		{nil, 0},
		{[]string{}, 0},
		{[]string{"admin", "tools:call"}, 0}, // unknown scopes grant nothing
		{[]string{"read"}, 1},
		{[]string{"write"}, 2},
		{[]string{"read", "write"}, 2},
		{[]string{"destructive"}, 3},
		{[]string{"read", "destructive"}, 3},
		{[]string{"READ"}, 0}, // scopes are case-sensitive
	}
	for _, c := range classes {
		for _, used := range Variants {
			for _, s := range scopeSets {
				name := fmt.Sprintf("%s/%s/%v", c.name, used, s.scopes)
				err := CheckCall(used, c.ann, s.scopes)
				var ge *GateError
				switch {
				case s.level < c.want.level():
					if !errors.Is(err, ErrInsufficientScope) || !errors.As(err, &ge) {
						t.Errorf("%s: err = %v, want ErrInsufficientScope", name, err)
						continue
					}
					if !strings.Contains(err.Error(), fmt.Sprintf("%q scope", c.want)) {
						t.Errorf("%s: message %q does not name the %s scope", name, err, c.want)
					}
				case used != c.want:
					if !errors.Is(err, ErrWrongVariant) || !errors.As(err, &ge) {
						t.Errorf("%s: err = %v, want ErrWrongVariant", name, err)
						continue
					}
					if !strings.Contains(err.Error(), "call it with "+c.want.ToolName()) {
						t.Errorf("%s: message %q does not name %s", name, err, c.want.ToolName())
					}
				default:
					if err != nil {
						t.Errorf("%s: err = %v, want nil", name, err)
					}
					continue
				}
				if ge.Used != used || ge.Required != c.want {
					t.Errorf("%s: GateError{Used %s, Required %s}", name, ge.Used, ge.Required)
				}
			}
		}
	}
}

func TestCheckCallUnknownVariant(t *testing.T) {
	for _, v := range []Variant{"", "admin", "Read", "call_tool_read"} {
		err := CheckCall(v, &mcp.ToolAnnotations{ReadOnlyHint: true}, []string{"destructive"})
		if !errors.Is(err, ErrUnknownVariant) {
			t.Errorf("CheckCall(%q) = %v, want ErrUnknownVariant", v, err)
		}
		if v.Valid() || Covers([]string{"destructive"}, v) {
			t.Errorf("variant %q counted as valid", v)
		}
	}
	if got := VariantWrite.ToolName(); got != "call_tool_write" {
		t.Errorf("ToolName = %q", got)
	}
}
