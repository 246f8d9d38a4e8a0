package keyring

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
)

// fuzzKeyring has fixed keys so that the committed corpus stays meaningful.
func fuzzKeyring(tb testing.TB) *Keyring {
	tb.Helper()
	kr, err := parse([]byte("k1 active " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32)) +
		"\nk2 primary " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32)) +
		"\nk3 retired " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, 32)) + "\n"))
	if err != nil {
		tb.Fatal(err)
	}
	return kr
}

// FuzzOpen is J6: random input never panics and never opens. The only
// inputs that may open are the genuine values seeded below, with their own
// AAD and plaintext: GCM forgeries are beyond a fuzzer. The seeds use fixed
// nonces because every fuzz worker process builds them anew and must agree
// with the coordinator (and the committed corpus) on which values are genuine.
func FuzzOpen(f *testing.F) {
	kr := fuzzKeyring(f)
	type genuine struct{ aad, plaintext string }
	legit := map[string]genuine{}
	for i, g := range []genuine{{"servers/42/env/API_KEY", "s3cr3t"}, {"", ""}, {"oauth/1/token", strings.Repeat("x", 100)}} {
		nonce := bytes.Repeat([]byte{byte(i + 1)}, nonceSize)
		s := sealWith(kr.keys["k2"], "k2", nonce, []byte(g.plaintext), g.aad)
		legit[s] = g
		f.Add(s, g.aad)
		f.Add(s, g.aad+"x")
		f.Add(strings.Replace(s, "v1:k2:", "v1:k1:", 1), g.aad)
		f.Add(strings.Replace(s, "v1:k2:", "v1:k3:", 1), g.aad)
		f.Add(s[:len(s)-2], g.aad)
		f.Add(s+"\n", g.aad)
	}
	f.Add("", "")
	f.Add("v1:k2::", "")
	f.Add("v1:k2:AAAAAAAAAAAAAAAA:AAAAAAAAAAAAAAAAAAAAAA==", "")
	f.Add("v1:k9:AAAAAAAAAAAAAAAA:AAAAAAAAAAAAAAAAAAAAAA==", "")
	f.Add("v1:::::::", "a")
	f.Fuzz(func(t *testing.T, sealed, aad string) {
		pt, err := kr.Open(sealed, aad)
		_ = kr.NeedsRotation(sealed)
		if err != nil {
			if pt != nil {
				t.Fatalf("Open(%q) returned plaintext with error %v", sealed, err)
			}
			return
		}
		g, ok := legit[sealed]
		if !ok || g.aad != aad || string(pt) != g.plaintext {
			t.Fatalf("Open(%q, %q) decrypted a value that was never sealed: %q", sealed, aad, pt)
		}
	})
}
