package apikey

import (
	"regexp"
	"testing"
)

// A4: shape, uniqueness, checksum, and refusal of one flipped character.
func TestA4TokenFormat(t *testing.T) {
	shape := regexp.MustCompile(`^mcp_(agt|pat)_[0-9A-Za-z]{43}[0-9A-Za-z]{6}$`)
	seen := map[string]bool{}
	for i := range 20000 {
		kind := Agent
		if i%2 == 1 {
			kind = Personal
		}
		k, err := New(kind)
		if err != nil {
			t.Fatal(err)
		}
		if !shape.MatchString(k.Plain) {
			t.Fatalf("token %q does not match the documented shape", k.Plain)
		}
		if seen[k.Plain] {
			t.Fatalf("duplicate token after %d", i)
		}
		seen[k.Plain] = true
		gotKind, hash, ok := Parse(k.Plain)
		if !ok || gotKind != kind || hash != k.Hash {
			t.Fatalf("Parse(%q) = %q, ok=%v", k.Plain, gotKind, ok)
		}
		if i < 200 {
			for pos := 8; pos < len(k.Plain); pos++ {
				b := []byte(k.Plain)
				if b[pos] == 'a' {
					b[pos] = 'b'
				} else {
					b[pos] = 'a'
				}
				if _, _, ok := Parse(string(b)); ok {
					t.Fatalf("token with position %d changed still parses", pos)
				}
			}
		}
	}
}

func TestParseRejectsMalformed(t *testing.T) {
	for _, s := range []string{"", "mcp_agt_", "mcp_agt_short", "Bearer x", "mcp_xyz_" + string(make([]byte, 49)), "mcp_agt_!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"} {
		if _, _, ok := Parse(s); ok {
			t.Errorf("Parse(%q) accepted", s)
		}
	}
}

func FuzzParse(f *testing.F) {
	k, _ := New(Agent)
	f.Add(k.Plain)
	f.Add("mcp_pat_abc")
	f.Fuzz(func(t *testing.T, s string) {
		kind, _, ok := Parse(s)
		if ok && kind != Agent && kind != Personal {
			t.Fatalf("unknown kind %q", kind)
		}
	})
}
