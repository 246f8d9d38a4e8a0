package upstream

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// headerTransport adds a server's configured headers (often credentials) to
// requests for the configured endpoint's origin, and refuses every other
// origin: an SSE server names its own POST endpoint, and a hostile one must
// not be able to collect those headers or make the gateway call elsewhere.
type headerTransport struct {
	base    http.RoundTripper
	scheme  string
	host    string // host[:port] as in the configured URL
	headers map[string]string

	mu      sync.Mutex
	refusal error // the first refused request, which the SDK's error may hide
}

func newHeaderTransport(base http.RoundTripper, endpoint string, headers map[string]string) (*headerTransport, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("parsing upstream url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("upstream url %q: scheme must be http or https", u.Redacted())
	}
	if u.Host == "" {
		return nil, fmt.Errorf("upstream url %q has no host", u.Redacted())
	}
	if base == nil {
		base = http.DefaultTransport
	}
	return &headerTransport{base: base, scheme: u.Scheme, host: canonicalHost(u), headers: headers}, nil
}

func (t *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != t.scheme || canonicalHost(req.URL) != t.host {
		if req.Body != nil {
			req.Body.Close()
		}
		err := fmt.Errorf("upstream sent the client to %s://%s, outside its configured origin %s://%s",
			req.URL.Scheme, req.URL.Host, t.scheme, t.host)
		t.mu.Lock()
		if t.refusal == nil {
			t.refusal = err
		}
		t.mu.Unlock()
		return nil, err
	}
	if len(t.headers) == 0 {
		return t.base.RoundTrip(req)
	}
	req = req.Clone(req.Context()) // a RoundTripper must not modify its request
	for k, v := range t.headers {
		req.Header.Set(k, v)
	}
	return t.base.RoundTrip(req)
}

// canonicalHost lower-cases the host and spells out the default port, so
// that https://a.example and https://A.example:443 are one origin.
func canonicalHost(u *url.URL) string {
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

func (t *headerTransport) refused() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.refusal
}

// Auth authorizes a remote upstream's requests, for servers that sign in
// with OAuth. Instances with different IDs are different instances, so a
// change of credentials (another user, another mode) replaces the session.
type Auth struct {
	// ID names the credentials the hooks use, for comparing configurations:
	// the hooks themselves cannot be compared.
	ID string
	// Handler is the Streamable HTTP transport's OAuthHandler.
	Handler auth.OAuthHandler `json:"-"`
	// WrapTransport wraps the base transport of SSE sessions, whose SDK
	// transport has no OAuth hook; it runs once per session.
	WrapTransport func(base http.RoundTripper) (http.RoundTripper, error) `json:"-"`
}

// WithoutAuthorization drops a configured Authorization header: with OAuth
// on, the token is the only credential sent.
func WithoutAuthorization(h map[string]string) map[string]string {
	var out map[string]string
	for k, v := range h {
		if strings.EqualFold(k, "Authorization") {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(h))
		}
		out[k] = v
	}
	return out
}
