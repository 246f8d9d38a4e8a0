package openapi

import (
	"net/http/httptest"
	"strings"
	"testing"
)

func TestLoadAndReadOnlyMessages(t *testing.T) {
	v, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		method, path, ctype, body string
		wantErr                   string // substring; "" = valid
	}{
		{"GET", "/api/v1/servers", "", "", ""},
		{"PATCH", "/api/v1/servers/a", "application/merge-patch+json", `{"isolation":{"enabled":true}}`, "isolation.enabled"},
		{"PATCH", "/api/v1/servers/a", "application/merge-patch+json", `{"isolation":{"mode_override":"vm"}}`, "docker"},
		{"PATCH", "/api/v1/servers/a", "application/json", `{"isolation":{"mode_override":null,"enabled_override":null}}`, ""},
		{"PATCH", "/api/v1/servers/a", "application/json", `{"owner":{"id":1}}`, "owner"},
		{"PATCH", "/api/v1/servers/a", "application/json", `{"bogus":1}`, "bogus"},
		{"POST", "/api/v1/servers", "application/json", `{"name":"Bad Name"}`, "name"},
		{"GET", "/api/v1/users/abc", "", "", "id"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
		if tt.ctype != "" {
			r.Header.Set("Content-Type", tt.ctype)
		}
		_, _, err := v.ValidateRequest(r)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s %s %s: unexpected error %v", tt.method, tt.path, tt.body, err)
		case tt.wantErr != "" && err == nil:
			t.Errorf("%s %s %s: accepted", tt.method, tt.path, tt.body)
		case tt.wantErr != "":
			if d := Describe(err); !strings.Contains(d, tt.wantErr) {
				t.Errorf("%s %s %s: detail %q lacks %q", tt.method, tt.path, tt.body, d, tt.wantErr)
			} else {
				t.Logf("%s → %s", tt.body, d)
			}
		}
	}
}
