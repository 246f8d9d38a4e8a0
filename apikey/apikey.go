// Package apikey makes and checks mcpgate's bearer tokens: agent tokens
// (mcp_agt_…) and personal access tokens (mcp_pat_…). A token is a prefix,
// 43 random base62 characters (256 bits) and a 6-character checksum, so a
// mistyped or made-up token is refused before any database look-up. Only its
// SHA-256 is ever stored.
package apikey

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"hash/crc32"
	"math/big"
	"strings"
)

// Kinds of token.
const (
	Agent    = "agent"
	Personal = "personal"
)

const (
	alphabet  = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	randomLen = 43
	sumLen    = 6
)

var prefixes = map[string]string{Agent: "mcp_agt_", Personal: "mcp_pat_"}

// Key is a freshly made token. Plain is shown once and then forgotten.
type Key struct {
	Plain   string
	Hash    [32]byte
	Display string // the prefix and the first random characters, for listings
	Last4   string
}

// New makes a token of the given kind.
func New(kind string) (Key, error) {
	prefix, ok := prefixes[kind]
	if !ok {
		panic("apikey: unknown kind " + kind)
	}
	var b strings.Builder
	max := big.NewInt(int64(len(alphabet)))
	for range randomLen {
		n, err := rand.Int(rand.Reader, max)
		if err != nil {
			return Key{}, err
		}
		b.WriteByte(alphabet[n.Int64()])
	}
	body := prefix + b.String()
	plain := body + checksum(body)
	return Key{Plain: plain, Hash: sha256.Sum256([]byte(plain)), Display: plain[:len(prefix)+4], Last4: plain[len(plain)-4:]}, nil
}

// Parse checks a token's shape and checksum and returns its kind and hash.
// ok is false for anything that is not a well-formed mcpgate token.
func Parse(s string) (kind string, hash [32]byte, ok bool) {
	for k, p := range prefixes {
		if !strings.HasPrefix(s, p) {
			continue
		}
		if len(s) != len(p)+randomLen+sumLen {
			return "", hash, false
		}
		for i := len(p); i < len(s); i++ {
			if strings.IndexByte(alphabet, s[i]) < 0 {
				return "", hash, false
			}
		}
		body, sum := s[:len(s)-sumLen], s[len(s)-sumLen:]
		if subtle.ConstantTimeCompare([]byte(checksum(body)), []byte(sum)) != 1 {
			return "", hash, false
		}
		return k, sha256.Sum256([]byte(s)), true
	}
	return "", hash, false
}

// Looks reports whether s claims to be one of our tokens, well-formed or not.
func Looks(s string) bool {
	return strings.HasPrefix(s, prefixes[Agent]) || strings.HasPrefix(s, prefixes[Personal])
}

// Equal compares two hashes in constant time.
func Equal(a, b []byte) bool { return subtle.ConstantTimeCompare(a, b) == 1 }

func checksum(body string) string {
	n := crc32.ChecksumIEEE([]byte(body))
	out := make([]byte, sumLen)
	for i := sumLen - 1; i >= 0; i-- {
		out[i] = alphabet[n%uint32(len(alphabet))]
		n /= uint32(len(alphabet))
	}
	return string(out)
}
