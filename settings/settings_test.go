package settings

import (
	"reflect"
	"strings"
	"testing"
)

func TestApply(t *testing.T) {
	def := Defaults("sandbox")
	cur := def
	cur.Isolation.GlobalMode = "docker"
	cur.Docker.DefaultImages = map[string]string{"node": "local/node:22", "python": "local/uv"}
	cur.Upstreams.CallTimeoutSeconds = 30

	tests := []struct {
		name, patch string
		check       func(Config) bool
		err         string
	}{
		{"absent keeps", `{}`, func(c Config) bool { return reflect.DeepEqual(c, cur) }, ""},
		{"null resets one", `{"isolation":{"global_mode":null}}`, func(c Config) bool {
			return c.Isolation.GlobalMode == "sandbox" && c.Upstreams.CallTimeoutSeconds == 30
		}, ""},
		{"null resets a section", `{"upstreams":null}`, func(c Config) bool {
			return c.Upstreams == def.Upstreams && c.Isolation.GlobalMode == "docker"
		}, ""},
		{"value sets", `{"activity":{"store_arguments":true}}`, func(c Config) bool { return c.Activity.StoreArguments }, ""},
		{"images merge key by key", `{"docker":{"default_images":{"node":null,"go":"local/go"}}}`, func(c Config) bool {
			return reflect.DeepEqual(c.Docker.DefaultImages, map[string]string{"python": "local/uv", "go": "local/go"})
		}, ""},
		{"unknown section", `{"bogus":{}}`, nil, "bogus"},
		{"unknown key", `{"isolation":{"mode":"x"}}`, nil, "isolation.mode"},
		{"wrong type", `{"upstreams":{"call_timeout_seconds":"soon"}}`, nil, "invalid"},
		{"not an object", `[1]`, nil, "object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Apply(cur, def, []byte(tt.patch))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one mentioning %q", err, tt.err)
				}
				return
			}
			if err != nil || !tt.check(got) {
				t.Fatalf("Apply(%s) = %+v, %v", tt.patch, got, err)
			}
		})
	}
	if cur.Docker.DefaultImages["node"] != "local/node:22" {
		t.Error("Apply changed its input")
	}
}
