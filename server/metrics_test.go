package server

import (
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/isolation"
)

func TestMetrics(t *testing.T) {
	h := newHarness(t, isolation.Host{})
	_, adminPAT := h.user("admin")
	_, memberPAT := h.user("member")
	h.do("GET", "/api/v1/status", memberPAT, nil)
	h.do("GET", "/api/v1/servers/nope", memberPAT, nil)
	if r := h.do("GET", "/metrics", memberPAT, nil); r.Status != 403 {
		t.Fatalf("member /metrics = %d, want 403", r.Status)
	}
	r := h.do("GET", "/metrics", adminPAT, nil)
	body := string(r.Body)
	for _, want := range []string{
		`mcpgate_http_requests_total{method="GET",route="/api/v1/status",status="200"}`,
		`mcpgate_http_requests_total{method="GET",route="/api/v1/servers/{name}",status="404"}`,
		`mcpgate_http_request_duration_seconds_bucket{route="/api/v1/status",le="+Inf"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s\n%s", want, body)
		}
	}
	if strings.Contains(body, adminToken) || strings.Contains(body, adminPAT) {
		t.Error("/metrics holds a token")
	}
}
