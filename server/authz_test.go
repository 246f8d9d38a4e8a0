package server

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mcpgate/mcpgate/apikey"
	"github.com/mcpgate/mcpgate/isolation"
	"github.com/mcpgate/mcpgate/store"
)

// The principals of the authorization matrix (B1).
const (
	anon = iota
	expired
	revoked
	agentRead
	agentWrite
	agentDestructive
	member
	otherMember
	admin
	nPrincipals
)

var principalNames = [...]string{"anonymous", "expired", "revoked", "agent:read", "agent:write", "agent:destructive", "member", "other-member", "admin"}

// Objects: the principal's own, another user's, or one that does not exist.
const (
	own = iota
	others
	missing
)

var objectNames = [...]string{"own", "another user's", "missing"}

// expect gives a status per principal class: [agent, member, admin]. The
// three invalid-credential principals always get 401.
type expect [3]int

type cell map[int]expect // object → statuses; collection routes use own only

func all(status int) expect { return expect{status, status, status} }

// matrix is the expected status of every route, written out by hand.
var matrix = map[string]cell{
	"* /mcp":                                     {own: all(200)},
	"* /mcp/all":                                 {own: all(200)},
	"GET /metrics":                               {own: {403, 403, 200}},
	"GET /api/v1/status":                         {own: all(200)},
	"GET /api/v1/me":                             {own: all(200)},
	"GET /api/v1/users":                          {own: {403, 403, 200}},
	"POST /api/v1/users":                         {own: {403, 403, 201}},
	"GET /api/v1/users/{id}":                     {own: {403, 403, 200}, others: {403, 403, 200}, missing: {403, 403, 404}},
	"PATCH /api/v1/users/{id}":                   {own: {403, 403, 200}, others: {403, 403, 200}, missing: {403, 403, 404}},
	"DELETE /api/v1/users/{id}":                  {own: {403, 403, 400}, others: {403, 403, 204}, missing: {403, 403, 404}},
	"GET /api/v1/tokens":                         {own: {403, 200, 200}},
	"POST /api/v1/tokens":                        {own: {403, 201, 201}},
	"GET /api/v1/tokens/{id}":                    {own: {403, 200, 200}, others: {403, 404, 200}, missing: {403, 404, 404}},
	"DELETE /api/v1/tokens/{id}":                 {own: {403, 204, 204}, others: {403, 404, 204}, missing: {403, 404, 404}},
	"GET /api/v1/servers":                        {own: all(200)},
	"POST /api/v1/servers":                       {own: {403, 201, 201}},
	"GET /api/v1/servers/{name}":                 {own: all(200), others: {404, 404, 200}, missing: all(404)},
	"PATCH /api/v1/servers/{name}":               {own: {403, 200, 200}, others: {403, 404, 200}, missing: {403, 404, 404}},
	"DELETE /api/v1/servers/{name}":              {own: {403, 204, 204}, others: {403, 404, 204}, missing: {403, 404, 404}},
	"POST /api/v1/servers/{name}/restart":        {own: {403, 202, 202}, others: {403, 404, 202}, missing: {403, 404, 404}},
	"POST /api/v1/servers/{name}/approve":        {own: {403, 200, 200}, others: {403, 404, 200}, missing: {403, 404, 404}},
	"POST /api/v1/servers/{name}/quarantine":     {own: {403, 200, 200}, others: {403, 404, 200}, missing: {403, 404, 404}},
	"GET /api/v1/servers/{name}/tools":           {own: all(200), others: {404, 404, 200}, missing: all(404)},
	"GET /api/v1/servers/{name}/logs":            {own: {403, 200, 200}, others: {403, 404, 200}, missing: {403, 404, 404}},
	"POST /api/v1/servers/{name}/oauth/start":    {own: {403, 400, 400}, others: {403, 404, 400}, missing: {403, 404, 404}},
	"DELETE /api/v1/servers/{name}/oauth":        {own: {403, 400, 400}, others: {403, 404, 400}, missing: {403, 404, 404}},
	"PUT /api/v1/servers/{name}/oauth/config":    {own: {403, 400, 400}, others: {403, 404, 400}, missing: {403, 404, 404}},
	"DELETE /api/v1/servers/{name}/oauth/config": {own: {403, 204, 204}, others: {403, 404, 204}, missing: {403, 404, 404}},
	"GET /api/v1/tools":                          {own: all(200)},
	"GET /api/v1/config":                         {own: {403, 403, 200}},
	"PATCH /api/v1/config":                       {own: {403, 403, 200}},
	"GET /api/v1/activity":                       {own: {403, 200, 200}},
	"GET /api/v1/doctor":                         {own: {403, 403, 200}},
}

// Routes that answer everyone, credentials or not.
var public = map[string]bool{"GET /healthz": true, "GET /readyz": true, "GET /api/v1/openapi.yaml": true}

// The OAuth callback is public too, but a request without a flow's state is
// refused; it is tested in the OAuth tests.
var publicRefusing = map[string]bool{"GET /oauth/callback": true}

type matrixFixture struct {
	h      *harness
	users  [nPrincipals]store.User
	tokens [nPrincipals]string
	// for "another user's" objects: a user other than the principal's
	stranger store.User
}

func (f *matrixFixture) class(p int) int {
	switch p {
	case agentRead, agentWrite, agentDestructive:
		return 0
	case member, otherMember:
		return 1
	}
	return 2
}

// object makes a fresh object of the kind the route takes, owned as asked.
func (f *matrixFixture) path(t *testing.T, route string, p, obj int) (string, any) {
	owner := f.users[p]
	if obj == others {
		owner = f.stranger
		if p == otherMember || p == admin {
			owner = f.users[member]
		}
	}
	ctx := context.Background()
	method, tmpl, _ := strings.Cut(route, " ")
	path := tmpl
	switch {
	case strings.Contains(tmpl, "{id}") && strings.Contains(tmpl, "/users/"):
		id := owner.ID
		if obj == others {
			u, _ := f.h.user("member") // fresh, since DELETE consumes it
			id = u.ID
		}
		if obj == missing {
			id = 987654321
		}
		path = strings.Replace(tmpl, "{id}", fmt.Sprint(id), 1)
	case strings.Contains(tmpl, "{id}") && strings.Contains(tmpl, "/tokens/"):
		var id int64 = 987654321
		if obj != missing {
			key, _ := apikey.New(apikey.Agent)
			tok, err := f.h.store.CreateToken(ctx, store.Actor{}, store.NewToken{UserID: owner.ID, Name: "m", Kind: apikey.Agent,
				Prefix: key.Display, Last4: key.Last4, Hash: key.Hash[:], Scopes: []string{"read"}, Servers: []string{"*"},
				ExpiresAt: time.Now().Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			id = tok.ID
		}
		path = strings.Replace(tmpl, "{id}", fmt.Sprint(id), 1)
	case strings.Contains(tmpl, "{name}"):
		name := "no-such-server"
		if obj != missing {
			name = f.h.server(owner.ID, false)
		}
		path = strings.Replace(tmpl, "{name}", name, 1)
	}
	var body any
	switch route {
	case "* /mcp", "* /mcp/all":
		path = strings.TrimPrefix(tmpl, "* ")
		body = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"matrix","version":"1"}}}`
	case "POST /api/v1/users":
		body = map[string]any{"email": unique("new") + "@example.test"}
	case "PATCH /api/v1/users/{id}":
		body = map[string]any{"name": "Renamed"}
	case "POST /api/v1/tokens":
		body = map[string]any{"name": "matrix"}
	case "POST /api/v1/servers":
		body = map[string]any{"name": unique("new"), "url": "https://mcp.example.test/mcp"}
	case "PATCH /api/v1/servers/{name}":
		body = map[string]any{"enabled": false}
	case "PATCH /api/v1/config":
		body = map[string]any{}
	case "PUT /api/v1/servers/{name}/oauth/config":
		body = map[string]any{"mode": "per-user"}
	}
	_ = method
	return path, body
}

// TestB1AuthorizationMatrix checks every route × principal × object.
func TestB1AuthorizationMatrix(t *testing.T) {
	h := newHarness(t, isolation.Host{LandlockABI: 7})
	f := &matrixFixture{h: h}
	ctx := context.Background()

	memberUser, memberPAT := h.user("member")
	otherUser, otherPAT := h.user("member")
	adminUser, adminPAT := h.user("admin")
	f.stranger, _ = h.user("member")
	for p := range nPrincipals {
		f.users[p] = memberUser
	}
	f.users[otherMember], f.users[admin] = otherUser, adminUser
	f.tokens[member], f.tokens[otherMember], f.tokens[admin] = memberPAT, otherPAT, adminPAT
	f.tokens[agentRead] = h.token(memberUser.ID, apikey.Agent, []string{"read"}, time.Hour)
	f.tokens[agentWrite] = h.token(memberUser.ID, apikey.Agent, []string{"read", "write"}, time.Hour)
	f.tokens[agentDestructive] = h.token(memberUser.ID, apikey.Agent, []string{"read", "write", "destructive"}, time.Hour)
	f.tokens[expired] = h.token(memberUser.ID, apikey.Personal, nil, -time.Minute)
	f.tokens[revoked] = h.token(memberUser.ID, apikey.Personal, nil, time.Hour)
	toks, _ := h.store.ListTokens(ctx, memberUser.ID)
	if err := h.store.RevokeToken(ctx, store.Actor{}, toks[len(toks)-1].ID); err != nil {
		t.Fatal(err)
	}

	// Inventory: every route the router serves is in the matrix.
	var missingRoutes []string
	for _, r := range h.srv.Routes() {
		if _, ok := matrix[r]; !ok && !public[r] && !publicRefusing[r] {
			missingRoutes = append(missingRoutes, r)
		}
	}
	sort.Strings(missingRoutes)
	if len(missingRoutes) > 0 {
		t.Fatalf("routes missing from the authorization matrix: %v", missingRoutes)
	}

	for route := range public {
		method, path, _ := strings.Cut(route, " ")
		for p := range nPrincipals {
			if got := h.do(method, path, f.tokens[p], nil).Status; got != 200 {
				t.Errorf("%s as %s = %d, want 200", route, principalNames[p], got)
			}
		}
	}

	routes := make([]string, 0, len(matrix))
	for r := range matrix {
		routes = append(routes, r)
	}
	sort.Strings(routes)
	for _, route := range routes {
		method, _, _ := strings.Cut(route, " ")
		if method == "*" {
			method = "POST"
		}
		for obj := own; obj <= missing; obj++ {
			want, ok := matrix[route][obj]
			if !ok {
				continue
			}
			for p := range nPrincipals {
				path, body := f.path(t, route, p, obj)
				wantStatus := 401
				if p >= agentRead {
					wantStatus = want[f.class(p)]
				}
				resp := h.do(method, path, f.tokens[p], body)
				if resp.Status != wantStatus {
					t.Errorf("%s [%s object] as %s = %d, want %d: %s", route, objectNames[obj], principalNames[p], resp.Status, wantStatus, resp.Body)
				}
				if resp.Status == 401 && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%s as %s: 401 without WWW-Authenticate: Bearer", route, principalNames[p])
				}
			}
		}
	}
}

// A member may see a shared server but not change it.
func TestSharedServerIsAdminsToChange(t *testing.T) {
	h := newHarness(t, isolation.Host{LandlockABI: 7})
	adminUser, adminPAT := h.user("admin")
	_, memberPAT := h.user("member")
	name := h.server(adminUser.ID, true)
	if got := h.do("GET", "/api/v1/servers/"+name, memberPAT, nil).Status; got != 200 {
		t.Fatalf("member GET shared = %d, want 200", got)
	}
	for _, req := range []struct {
		method, path string
		body         any
	}{
		{"PATCH", "/api/v1/servers/" + name, map[string]any{"enabled": false}},
		{"DELETE", "/api/v1/servers/" + name, nil},
		{"POST", "/api/v1/servers/" + name + "/approve", nil},
	} {
		if got := h.do(req.method, req.path, memberPAT, req.body).Status; got != 403 {
			t.Errorf("member %s %s on a shared server = %d, want 403", req.method, req.path, got)
		}
	}
	if got := h.do("POST", "/api/v1/servers/"+name+"/approve", adminPAT, nil).Status; got != 200 {
		t.Errorf("admin approve = %d", got)
	}
}

// Agent tokens see only the servers their list names.
func TestAgentTokenServerList(t *testing.T) {
	h := newHarness(t, isolation.Host{LandlockABI: 7})
	u, _ := h.user("member")
	a, b := h.server(u.ID, false), h.server(u.ID, false)
	key, _ := apikey.New(apikey.Agent)
	if _, err := h.store.CreateToken(context.Background(), store.Actor{}, store.NewToken{UserID: u.ID, Name: "one", Kind: apikey.Agent,
		Prefix: key.Display, Last4: key.Last4, Hash: key.Hash[:], Scopes: []string{"read"}, Servers: []string{a},
		ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if got := h.do("GET", "/api/v1/servers/"+a, key.Plain, nil).Status; got != 200 {
		t.Errorf("listed server = %d, want 200", got)
	}
	if got := h.do("GET", "/api/v1/servers/"+b, key.Plain, nil).Status; got != 404 {
		t.Errorf("unlisted server = %d, want 404", got)
	}
	resp := h.do("GET", "/api/v1/servers", key.Plain, nil)
	list, _ := resp.JSON(t)["servers"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["name"] != a {
		t.Errorf("list = %s, want only %s", resp.Body, a)
	}
}

// A malformed token is refused without a database look-up: the check
// happens on the checksum, which the store never sees.
func TestMalformedTokenRefusedBeforeLookup(t *testing.T) {
	h := newHarness(t, isolation.Host{})
	_, pat := h.user("member")
	bad := []byte(pat)
	bad[12] ^= 1
	if _, _, ok := apikey.Parse(string(bad)); ok {
		t.Fatal("corrupted token still parses")
	}
	// Close the pool underneath a second store: a look-up would fail with
	// 503, a refusal before the look-up stays 401.
	ctx := context.Background()
	// A pool whose server does not exist: any look-up fails with 503.
	pool, err := pgxpool.New(ctx, "postgres://nobody:x@/none?host=/nonexistent-socket-dir&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s2, _ := New(Options{Store: store.New(pool, testSealer(t))})
	_, err = s2.resolveBearer(ctx, "Bearer "+pat)
	if p := toProblem(err); p.Status != 503 {
		t.Fatalf("control: a well-formed token with the database down gave %v, want a 503 from the look-up", err)
	}
	_, err = s2.resolveBearer(ctx, "Bearer "+string(bad))
	if p := toProblem(err); p.Status != 401 {
		t.Fatalf("malformed token: %v, want 401 without a look-up", err)
	}
}
