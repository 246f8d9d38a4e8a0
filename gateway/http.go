package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const sessionHeader = "Mcp-Session-Id"

// callerKey is where the verifier leaves the Caller in TokenInfo.Extra.
const callerKey = "mcpgate.caller"

func (g *Gateway) newHandler() http.Handler {
	opts := &mcp.StreamableHTTPOptions{
		// Stateless: any replica answers any request, no sticky sessions.
		Stateless:                  true,
		Logger:                     g.sdkLog,
		MaxRequestBodyBytes:        8 << 20,
		DisableLocalhostProtection: g.opts.DisableLocalhostProtection,
	}
	protect := auth.RequireBearerToken(g.verify, &auth.RequireBearerTokenOptions{
		ResourceMetadataURL: g.opts.ResourceMetadataURL,
		// Callers carry no expiry: AuthenticateFunc judges it.
		AllowMissingExpiration: true,
	})
	mux := http.NewServeMux()
	mux.Handle("/mcp", protect(g.bindSession(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return g.mcpSrv }, opts))))
	mux.Handle("/mcp/all", protect(g.bindSession(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return g.allSrv }, opts))))
	return mux
}

func (g *Gateway) verify(ctx context.Context, bearer string, _ *http.Request) (*auth.TokenInfo, error) {
	c, ok := g.auth.get(bearer)
	if !ok {
		var err error
		if c, err = g.opts.AuthenticateFunc(ctx, bearer); err != nil {
			return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
		}
		g.auth.put(bearer, c)
	}
	return &auth.TokenInfo{
		UserID: strconv.FormatInt(c.UserID, 10),
		Scopes: c.EffectiveScopes(),
		Extra:  map[string]any{callerKey: &c},
	}, nil
}

// callerOf returns the caller of an MCP request; nil only if the handler
// was reached without the bearer middleware, which Handler never allows.
func callerOf(extra *mcp.RequestExtra) *Caller {
	if extra == nil || extra.TokenInfo == nil {
		return nil
	}
	c, _ := extra.TokenInfo.Extra[callerKey].(*Caller)
	return c
}

// bindSession gives stateless MCP sessions an id bound to their user. The
// SDK's stateless handler neither issues nor reads Mcp-Session-Id, so this
// layer does: a request without one gets a fresh id, an HMAC over the user
// id and a random part, which any replica can check; a request presenting
// an id that was not issued to its own user is answered 404, as for an
// unknown session, and never reaches the MCP server.
func (g *Gateway) bindSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ti := auth.TokenInfoFromContext(r.Context())
		if ti == nil {
			http.Error(w, "unauthenticated", http.StatusUnauthorized)
			return
		}
		sid := r.Header.Get(sessionHeader)
		switch {
		case sid != "":
			if !g.sessionValid(sid, ti.UserID) {
				g.log.InfoContext(r.Context(), "session id refused", "user_id", ti.UserID)
				http.Error(w, "session not found", http.StatusNotFound)
				return
			}
			if r.Method == http.MethodDelete {
				// Nothing is kept per session: ending one is a no-op.
				w.WriteHeader(http.StatusNoContent)
				return
			}
		case r.Method == http.MethodPost:
			w.Header().Set(sessionHeader, g.newSessionID(ti.UserID))
		}
		next.ServeHTTP(w, r)
	})
}

const sessionRandLen, sessionMACLen = 16, 16

func (g *Gateway) sessionMAC(random []byte, userID string) []byte {
	m := hmac.New(sha256.New, g.key)
	m.Write([]byte("mcpgate-session/v1\x00"))
	m.Write([]byte(userID))
	m.Write([]byte{0})
	m.Write(random)
	return m.Sum(nil)[:sessionMACLen]
}

func (g *Gateway) newSessionID(userID string) string {
	b := make([]byte, sessionRandLen, sessionRandLen+sessionMACLen)
	_, _ = rand.Read(b)
	b = append(b, g.sessionMAC(b, userID)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (g *Gateway) sessionValid(sid, userID string) bool {
	b, err := base64.RawURLEncoding.DecodeString(sid)
	if err != nil || len(b) != sessionRandLen+sessionMACLen {
		return false
	}
	return hmac.Equal(b[sessionRandLen:], g.sessionMAC(b[:sessionRandLen], userID))
}

func (g *Gateway) requestID(ctx context.Context, extra *mcp.RequestExtra) string {
	var h http.Header
	if extra != nil {
		h = extra.Header
	}
	if f := g.opts.RequestIDFunc; f != nil {
		if id := f(ctx, h); id != "" {
			return id
		}
	}
	if id := h.Get("X-Request-Id"); id != "" && len(id) <= 128 {
		return id
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// authCacheMax bounds the cache; past it, the cache starts over.
const authCacheMax = 10000

// authCache remembers recent successful authentications (see
// Options.AuthCacheTTL). Failures are never cached.
type authCache struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[[32]byte]authEntry
}

type authEntry struct {
	c     Caller
	until time.Time
}

func (a *authCache) get(bearer string) (Caller, bool) {
	if a.ttl <= 0 {
		return Caller{}, false
	}
	k := sha256.Sum256([]byte(bearer))
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.m[k]
	if !ok || time.Now().After(e.until) {
		return Caller{}, false
	}
	return e.c, true
}

func (a *authCache) put(bearer string, c Caller) {
	if a.ttl <= 0 {
		return
	}
	k := sha256.Sum256([]byte(bearer))
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil || len(a.m) >= authCacheMax {
		a.m = make(map[[32]byte]authEntry)
	}
	a.m[k] = authEntry{c: c, until: time.Now().Add(a.ttl)}
}
