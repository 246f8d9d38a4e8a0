package oauth

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/mcpgate/mcpgate/store"
)

// discovery is what Start learnt about a server's authorization server. It
// is stored sealed in server_oauth.discovery (the resource is the server URL,
// which may carry credentials).
type discovery struct {
	ServerURL        string   `json:"server_url"` // the URL it was made for
	Resource         string   `json:"resource"`   // RFC 8707 resource indicator
	Issuer           string   `json:"issuer"`
	AuthURL          string   `json:"authorization_endpoint"`
	TokenURL         string   `json:"token_endpoint"`
	RegistrationURL  string   `json:"registration_endpoint,omitempty"`
	RevocationURL    string   `json:"revocation_endpoint,omitempty"`
	IssSupported     bool     `json:"iss_supported,omitempty"`
	AuthMethods      []string `json:"token_endpoint_auth_methods,omitempty"`
	ServerScopes     []string `json:"server_scopes,omitempty"` // asked for by the 401 or the resource metadata
	OfflineSupported bool     `json:"offline_access,omitempty"`
}

// registration is a client registered by RFC 7591, stored sealed in
// server_oauth.registration. It is reused while the issuer and redirect URI
// stay the same, so flows started by different users share one client.
type registration struct {
	Issuer       string `json:"issuer"`
	RedirectURI  string `json:"redirect_uri"`
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret,omitempty"`
	AuthMethod   string `json:"token_endpoint_auth_method,omitempty"`
}

// client is the OAuth client a token request authenticates as.
type client struct {
	ID, Secret string
	AuthMethod string // client_secret_basic, client_secret_post or none
}

func isRemote(srv store.Server) bool {
	return (srv.Protocol == "streamable-http" || srv.Protocol == "sse") && srv.URL != ""
}

// discover finds the authorization server of the MCP server at serverURL:
// the 401 challenge's resource_metadata, else the well-known protected
// resource metadata URLs, else (2025-03-26 servers) the server's origin.
func (m *Manager) discover(ctx context.Context, serverURL string) (*discovery, error) {
	su, err := url.Parse(serverURL)
	if err != nil || (su.Scheme != "http" && su.Scheme != "https") || su.Host == "" {
		return nil, fmt.Errorf("%w: server URL is not an absolute http(s) URL", ErrDiscovery)
	}
	challenges := m.probe(ctx, serverURL)
	var metadataURL string
	var scopes []string
	for _, c := range challenges {
		if u := c.Params["resource_metadata"]; u != "" && metadataURL == "" {
			metadataURL = u
		}
		if c.Scheme == "bearer" && c.Params["scope"] != "" && scopes == nil {
			scopes = strings.Fields(c.Params["scope"])
		}
	}
	type candidate struct{ metadata, resource string }
	var cands []candidate
	if metadataURL != "" {
		cands = append(cands, candidate{metadataURL, serverURL})
	}
	wk := *su
	wk.RawQuery, wk.Fragment, wk.User = "", "", nil
	if p := strings.Trim(su.Path, "/"); p != "" {
		wk.Path = "/.well-known/oauth-protected-resource/" + p
		cands = append(cands, candidate{wk.String(), serverURL})
	}
	wk.Path = "/.well-known/oauth-protected-resource"
	root := *su
	root.Path, root.RawPath, root.RawQuery, root.Fragment, root.User = "", "", "", "", nil
	cands = append(cands, candidate{wk.String(), root.String()})

	var prm *oauthex.ProtectedResourceMetadata
	var lastErr error
	for _, c := range cands {
		p, err := oauthex.GetProtectedResourceMetadata(ctx, c.metadata, c.resource, m.hc)
		if err != nil {
			lastErr = err
			continue
		}
		if len(p.AuthorizationServers) == 0 {
			return nil, fmt.Errorf("%w: protected resource metadata names no authorization server", ErrDiscovery)
		}
		prm = p
		break
	}
	if prm == nil {
		if metadataURL != "" {
			// The server pointed at metadata we could not use: say why.
			return nil, fmt.Errorf("%w: %v", ErrDiscovery, lastErr)
		}
		prm = &oauthex.ProtectedResourceMetadata{Resource: serverURL, AuthorizationServers: []string{root.String()}}
	}
	if len(scopes) == 0 {
		scopes = prm.ScopesSupported
	}
	issuer := prm.AuthorizationServers[0]
	asm, err := auth.GetAuthServerMetadata(ctx, issuer, m.hc)
	if err != nil {
		return nil, fmt.Errorf("%w: authorization server metadata: %v", ErrDiscovery, err)
	}
	if asm == nil {
		// No metadata anywhere: the 2025-03-26 default endpoints.
		base := strings.TrimRight(issuer, "/")
		asm = &oauthex.AuthServerMeta{Issuer: issuer, AuthorizationEndpoint: base + "/authorize",
			TokenEndpoint: base + "/token", RegistrationEndpoint: base + "/register",
			CodeChallengeMethodsSupported: []string{"S256"}}
	}
	if !slices.Contains(asm.CodeChallengeMethodsSupported, "S256") {
		return nil, fmt.Errorf("%w: authorization server %s does not support PKCE S256", ErrDiscovery, asm.Issuer)
	}
	if asm.AuthorizationEndpoint == "" || asm.TokenEndpoint == "" {
		return nil, fmt.Errorf("%w: authorization server %s lacks an authorization or token endpoint", ErrDiscovery, asm.Issuer)
	}
	return &discovery{
		ServerURL: serverURL, Resource: prm.Resource, Issuer: asm.Issuer,
		AuthURL: asm.AuthorizationEndpoint, TokenURL: asm.TokenEndpoint, RegistrationURL: asm.RegistrationEndpoint,
		RevocationURL: asm.RevocationEndpoint,
		IssSupported:  asm.AuthorizationResponseIssParameterSupported, AuthMethods: asm.TokenEndpointAuthMethodsSupported,
		ServerScopes: scopes, OfflineSupported: slices.Contains(asm.ScopesSupported, "offline_access"),
	}, nil
}

// probe makes an unauthenticated MCP request and returns the challenges of a
// 401 or 403; anything else (a server reachable without a token, an error)
// leaves discovery to the well-known URLs.
func (m *Manager) probe(ctx context.Context, serverURL string) []oauthex.Challenge {
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, serverURL, bytes.NewReader(body))
	if err != nil {
		return nil
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := m.hc.Do(req)
	if err != nil {
		m.log.DebugContext(ctx, "oauth probe failed", "err", err)
		return nil
	}
	defer drain(resp.Body)
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		return nil
	}
	cs, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	if err != nil {
		return nil
	}
	return cs
}

// resolveClient returns the client to use: the configured one, else the
// stored registration when it still fits, else a new registration (and
// whether it is new, so the caller stores it).
func (m *Manager) resolveClient(ctx context.Context, cfg store.ServerOAuth, d *discovery) (client, *registration, error) {
	if cfg.ClientID != "" {
		return configuredClient(cfg, d), nil, nil
	}
	if len(cfg.Registration) > 0 {
		var r registration
		if err := json.Unmarshal(cfg.Registration, &r); err == nil && r.ClientID != "" &&
			r.Issuer == d.Issuer && r.RedirectURI == m.redirectURI {
			return r.client(), nil, nil
		}
	}
	if d.RegistrationURL == "" {
		return client{}, nil, fmt.Errorf("%w: no client id is configured and %s offers no dynamic registration", ErrDiscovery, d.Issuer)
	}
	method := "client_secret_basic"
	if len(d.AuthMethods) > 0 && !slices.Contains(d.AuthMethods, method) && slices.Contains(d.AuthMethods, "client_secret_post") {
		method = "client_secret_post"
	}
	resp, err := oauthex.RegisterClient(ctx, d.RegistrationURL, &oauthex.ClientRegistrationMetadata{
		RedirectURIs:            []string{m.redirectURI},
		TokenEndpointAuthMethod: method,
		GrantTypes:              []string{"authorization_code", "refresh_token"},
		ResponseTypes:           []string{"code"},
		ClientName:              m.clientName,
		Scope:                   strings.Join(cfg.Scopes, " "),
	}, m.hc)
	if err != nil {
		var regErr *oauthex.ClientRegistrationError
		if errors.As(err, &regErr) {
			return client{}, nil, fmt.Errorf("registering a client at %s: %s", d.RegistrationURL, regErr.ErrorCode)
		}
		// Other failures may quote the response body, which could hold a
		// freshly issued secret: keep only that it failed.
		return client{}, nil, fmt.Errorf("registering a client at %s: unexpected response or network error", d.RegistrationURL)
	}
	r := &registration{Issuer: d.Issuer, RedirectURI: m.redirectURI, ClientID: resp.ClientID,
		ClientSecret: resp.ClientSecret, AuthMethod: resp.TokenEndpointAuthMethod}
	if r.AuthMethod == "" {
		r.AuthMethod = method
	}
	return r.client(), r, nil
}

// configuredClient is the operator's pre-registered client, authenticating
// as the authorization server prefers.
func configuredClient(cfg store.ServerOAuth, d *discovery) client {
	method := "none"
	if cfg.ClientSecret != "" {
		method = "client_secret_basic"
		if len(d.AuthMethods) > 0 && !slices.Contains(d.AuthMethods, method) && slices.Contains(d.AuthMethods, "client_secret_post") {
			method = "client_secret_post"
		}
	}
	return client{ID: cfg.ClientID, Secret: cfg.ClientSecret, AuthMethod: method}
}

func (r registration) client() client {
	method := r.AuthMethod
	if r.ClientSecret == "" {
		method = "none"
	}
	return client{ID: r.ClientID, Secret: r.ClientSecret, AuthMethod: method}
}

// stored returns the discovery and client saved by the last Start.
func stored(cfg store.ServerOAuth) (*discovery, client, error) {
	if len(cfg.Discovery) == 0 {
		return nil, client{}, ErrNoToken
	}
	var d discovery
	if err := json.Unmarshal(cfg.Discovery, &d); err != nil {
		return nil, client{}, fmt.Errorf("reading stored discovery: %w", err)
	}
	if cfg.ClientID != "" {
		return &d, configuredClient(cfg, &d), nil
	}
	var r registration
	if err := json.Unmarshal(cfg.Registration, &r); err != nil || r.ClientID == "" {
		return nil, client{}, errors.New("no stored client registration; authorize again")
	}
	return &d, r.client(), nil
}
