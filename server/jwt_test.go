package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/mcpgate/mcpgate/isolation"
	"github.com/mcpgate/mcpgate/store"
)

func b64u(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// A1, A2: algorithms are pinned, exp is required, iss and aud are checked,
// and only a small leeway is allowed; session JWTs are short-lived (A3).
func TestJWT(t *testing.T) {
	_, sessionKey, _ := ed25519.GenerateKey(rand.Reader)
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{
			{"kty": "RSA", "kid": "r1", "n": b64u(rsaKey.N.Bytes()), "e": b64u(big.NewInt(int64(rsaKey.E)).Bytes())},
			{"kty": "EC", "kid": "e1", "crv": "P-256", "x": b64u(ecKey.X.FillBytes(make([]byte, 32))), "y": b64u(ecKey.Y.FillBytes(make([]byte, 32)))},
		}})
	}))
	defer jwks.Close()

	h := newHarness(t, isolation.Host{})
	st := store.New(testDB.Pool, testSealer(t))
	s, err := New(Options{Store: st, JWT: JWTOptions{SessionKey: sessionKey, Issuer: "https://idp.example.test",
		Audience: "mcpgate-api", JWKSURL: jwks.URL}})
	if err != nil {
		t.Fatal(err)
	}
	user, _ := h.user("member")
	ctx := context.Background()
	now := time.Now()
	ext := func(m jwt.MapClaims) jwt.MapClaims {
		out := jwt.MapClaims{"iss": "https://idp.example.test", "aud": "mcpgate-api", "email": user.Email,
			"exp": now.Add(5 * time.Minute).Unix(), "iat": now.Unix()}
		for k, v := range m {
			if v == nil {
				delete(out, k)
			} else {
				out[k] = v
			}
		}
		return out
	}
	sign := func(method jwt.SigningMethod, kid string, key any, claims jwt.MapClaims) string {
		tok := jwt.NewWithClaims(method, claims)
		if kid != "" {
			tok.Header["kid"] = kid
		}
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	session, err := IssueSession(sessionKey, user.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var sc jwt.RegisteredClaims
	jwt.NewParser().ParseUnverified(session, &sc)
	if life := sc.ExpiresAt.Sub(sc.IssuedAt.Time); life > MaxSessionTTL {
		t.Errorf("session JWT lives %v, more than %v", life, MaxSessionTTL)
	}
	unsignedNone, _ := jwt.NewWithClaims(jwt.SigningMethodNone, ext(nil)).SignedString(jwt.UnsafeAllowNoneSignatureType)
	pubDER := rsaKey.PublicKey.N.Bytes()

	tests := []struct {
		name  string
		token string
		ok    bool
	}{
		{"session", session, true},
		{"external RS256", sign(jwt.SigningMethodRS256, "r1", rsaKey, ext(nil)), true},
		{"external ES256", sign(jwt.SigningMethodES256, "e1", ecKey, ext(nil)), true},
		{"alg none", unsignedNone, false},
		{"HS256 with the public key as secret", sign(jwt.SigningMethodHS256, "r1", pubDER, ext(nil)), false},
		{"wrong key", sign(jwt.SigningMethodRS256, "r1", mustRSA(t), ext(nil)), false},
		{"unknown kid", sign(jwt.SigningMethodRS256, "zz", rsaKey, ext(nil)), false},
		{"expired", sign(jwt.SigningMethodRS256, "r1", rsaKey, ext(jwt.MapClaims{"exp": now.Add(-time.Minute).Unix()})), false},
		{"expired within leeway", sign(jwt.SigningMethodRS256, "r1", rsaKey, ext(jwt.MapClaims{"exp": now.Add(-10 * time.Second).Unix()})), true},
		{"not yet valid", sign(jwt.SigningMethodRS256, "r1", rsaKey, ext(jwt.MapClaims{"nbf": now.Add(time.Hour).Unix()})), false},
		{"missing exp", sign(jwt.SigningMethodRS256, "r1", rsaKey, ext(jwt.MapClaims{"exp": nil})), false},
		{"wrong iss", sign(jwt.SigningMethodRS256, "r1", rsaKey, ext(jwt.MapClaims{"iss": "https://evil.example.test"})), false},
		{"wrong aud", sign(jwt.SigningMethodRS256, "r1", rsaKey, ext(jwt.MapClaims{"aud": "other"})), false},
		{"unknown user", sign(jwt.SigningMethodRS256, "r1", rsaKey, ext(jwt.MapClaims{"email": "nobody@example.test"})), false},
		{"session signed by another key", mustSession(t, user.ID), false},
	}
	for _, tt := range tests {
		p, err := s.resolveBearer(ctx, "Bearer "+tt.token)
		switch {
		case tt.ok && (err != nil || p.User.ID != user.ID):
			t.Errorf("%s: refused: %v", tt.name, err)
		case !tt.ok && err == nil:
			t.Errorf("%s: accepted", tt.name)
		case !tt.ok && toProblem(err).Status != 401:
			t.Errorf("%s: status %d, want 401", tt.name, toProblem(err).Status)
		}
	}
}

func mustRSA(t *testing.T) *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustSession(t *testing.T, userID int64) string {
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	s, err := IssueSession(other, userID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
