package server

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/mcpgate/mcpgate/store"
)

// Session JWTs are short-lived (A3) and signed by the gateway with Ed25519.
const (
	sessionIssuer   = "mcpgate"
	sessionAudience = "mcpgate"
	// MaxSessionTTL bounds what IssueSession hands out.
	MaxSessionTTL = 15 * time.Minute
	jwtLeeway     = 30 * time.Second
)

// JWTOptions configures which JWTs the gateway accepts.
type JWTOptions struct {
	SessionKey ed25519.PrivateKey // the gateway's own signing key; nil: no session JWTs
	Issuer     string             // external issuer; "" to accept only session JWTs
	Audience   string
	JWKSURL    string
	HTTPClient *http.Client
}

type jwtVerifier struct {
	opts  JWTOptions
	store *store.Store

	mu      sync.Mutex
	keys    map[string]crypto.PublicKey
	fetched time.Time
}

func newJWTVerifier(opts JWTOptions, st *store.Store) *jwtVerifier {
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	return &jwtVerifier{opts: opts, store: st}
}

// IssueSession signs a session JWT for a user.
func IssueSession(key ed25519.PrivateKey, userID int64, ttl time.Duration) (string, error) {
	if ttl <= 0 || ttl > MaxSessionTTL {
		ttl = MaxSessionTTL
	}
	now := time.Now()
	claims := jwt.RegisteredClaims{
		Issuer: sessionIssuer, Audience: jwt.ClaimStrings{sessionAudience}, Subject: strconv.FormatInt(userID, 10),
		IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}
	return jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims).SignedString(key)
}

type externalClaims struct {
	jwt.RegisteredClaims
	Email string `json:"email"`
}

func (v *jwtVerifier) verify(ctx context.Context, raw string) (store.User, error) {
	// The issuer decides which key and algorithms apply, so read it first
	// (unverified), then verify with the key set it allows and nothing else.
	var peek jwt.RegisteredClaims
	if _, _, err := jwt.NewParser().ParseUnverified(raw, &peek); err != nil {
		return store.User{}, err
	}
	switch {
	case peek.Issuer == sessionIssuer && v.opts.SessionKey != nil:
		var c jwt.RegisteredClaims
		_, err := jwt.ParseWithClaims(raw, &c, func(*jwt.Token) (any, error) { return v.opts.SessionKey.Public(), nil },
			jwt.WithValidMethods([]string{"EdDSA"}), jwt.WithIssuer(sessionIssuer), jwt.WithAudience(sessionAudience),
			jwt.WithExpirationRequired(), jwt.WithLeeway(jwtLeeway))
		if err != nil {
			return store.User{}, err
		}
		id, err := strconv.ParseInt(c.Subject, 10, 64)
		if err != nil {
			return store.User{}, fmt.Errorf("session subject %q is not a user id", c.Subject)
		}
		return v.store.GetUser(ctx, id)
	case v.opts.Issuer != "" && peek.Issuer == v.opts.Issuer:
		var c externalClaims
		opts := []jwt.ParserOption{jwt.WithValidMethods([]string{"RS256", "ES256", "EdDSA"}), jwt.WithIssuer(v.opts.Issuer),
			jwt.WithExpirationRequired(), jwt.WithLeeway(jwtLeeway)}
		if v.opts.Audience != "" {
			opts = append(opts, jwt.WithAudience(v.opts.Audience))
		}
		_, err := jwt.ParseWithClaims(raw, &c, func(t *jwt.Token) (any, error) {
			kid, _ := t.Header["kid"].(string)
			return v.key(ctx, kid)
		}, opts...)
		if err != nil {
			return store.User{}, err
		}
		if c.Email == "" {
			return store.User{}, errors.New("external JWT has no email claim")
		}
		return v.store.GetUserByEmail(ctx, c.Email)
	}
	return store.User{}, fmt.Errorf("issuer %q is not accepted", peek.Issuer)
}

// key returns the issuer's key with that id, refetching the JWKS at most
// once a minute when the id is unknown (key rotation).
func (v *jwtVerifier) key(ctx context.Context, kid string) (crypto.PublicKey, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if k, ok := v.keys[kid]; ok {
		return k, nil
	}
	if time.Since(v.fetched) < time.Minute && v.keys != nil {
		return nil, fmt.Errorf("unknown key id %q", kid)
	}
	keys, err := fetchJWKS(ctx, v.opts.HTTPClient, v.opts.JWKSURL)
	v.fetched = time.Now()
	if err != nil {
		return nil, err
	}
	v.keys = keys
	if k, ok := keys[kid]; ok {
		return k, nil
	}
	return nil, fmt.Errorf("unknown key id %q", kid)
}

type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Crv string `json:"crv"`
	N   string `json:"n"`
	E   string `json:"e"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

func fetchJWKS(ctx context.Context, hc *http.Client, url string) (map[string]crypto.PublicKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching JWKS: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching JWKS: status %d", resp.StatusCode)
	}
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<20)).Decode(&set); err != nil {
		return nil, fmt.Errorf("decoding JWKS: %w", err)
	}
	out := map[string]crypto.PublicKey{}
	for _, k := range set.Keys {
		if pk, err := k.public(); err == nil {
			out[k.Kid] = pk
		}
	}
	return out, nil
}

func b64(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }

func (k jwk) public() (crypto.PublicKey, error) {
	switch k.Kty {
	case "RSA":
		n, err := b64(k.N)
		if err != nil {
			return nil, err
		}
		e, err := b64(k.E)
		if err != nil {
			return nil, err
		}
		return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}, nil
	case "EC":
		if k.Crv != "P-256" {
			return nil, fmt.Errorf("curve %s not supported", k.Crv)
		}
		x, err := b64(k.X)
		if err != nil {
			return nil, err
		}
		y, err := b64(k.Y)
		if err != nil {
			return nil, err
		}
		pub := &ecdsa.PublicKey{Curve: elliptic.P256(), X: new(big.Int).SetBytes(x), Y: new(big.Int).SetBytes(y)}
		if !pub.Curve.IsOnCurve(pub.X, pub.Y) {
			return nil, errors.New("point not on curve")
		}
		return pub, nil
	case "OKP":
		x, err := b64(k.X)
		if err != nil || k.Crv != "Ed25519" || len(x) != ed25519.PublicKeySize {
			return nil, errors.New("bad Ed25519 key")
		}
		return ed25519.PublicKey(x), nil
	}
	return nil, fmt.Errorf("key type %q not supported", k.Kty)
}
