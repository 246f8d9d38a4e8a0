package keyring

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

func newTestKeyring(t *testing.T) (*Keyring, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret.key")
	kr, err := Generate(path)
	if err != nil {
		t.Fatal(err)
	}
	return kr, path
}

func TestSealOpenRoundTrip(t *testing.T) {
	kr, _ := newTestKeyring(t)
	big := make([]byte, 1<<20)
	rand.Read(big)
	for _, tc := range []struct {
		name, aad string
		pt        []byte
	}{
		{"empty", "servers/1/env/A", []byte{}},
		{"short", "servers/42/env/API_KEY", []byte("s3cr3t")},
		{"binary with NULs", "oauth/7/refresh_token", []byte{0, 1, 2, 0, 255}},
		{"1 MiB", "blob", big},
		{"empty aad", "", []byte("x")},
		{"unicode aad", "servers/ü/env/ключ", []byte("value")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sealed, err := kr.Seal(tc.pt, tc.aad)
			if err != nil {
				t.Fatal(err)
			}
			got, err := kr.Open(sealed, tc.aad)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if !bytes.Equal(got, tc.pt) {
				t.Errorf("Open returned %d bytes, want the %d sealed", len(got), len(tc.pt))
			}
			if kr.NeedsRotation(sealed) {
				t.Error("a value sealed under the primary needs rotation")
			}
		})
	}
}

var sealedRE = regexp.MustCompile(`^v1:k1:[A-Za-z0-9+/]{16}:[A-Za-z0-9+/]+=*$`)

// TestSealFormat is C2: the stored form, and a fresh nonce per value.
func TestSealFormat(t *testing.T) {
	kr, _ := newTestKeyring(t)
	pt := []byte("hunter2-the-api-key")
	seen := map[string]bool{}
	nonces := map[string]bool{}
	for range 200 {
		s, err := kr.Seal(pt, "servers/42/env/API_KEY")
		if err != nil {
			t.Fatal(err)
		}
		if !sealedRE.MatchString(s) {
			t.Fatalf("sealed value %q does not match %s", s, sealedRE)
		}
		if strings.Contains(s, string(pt)) || strings.Contains(s, base64.StdEncoding.EncodeToString(pt)[:12]) {
			t.Fatalf("sealed value %q shows the plaintext", s)
		}
		parts := strings.Split(s, ":")
		if seen[s] || nonces[parts[2]] {
			t.Fatalf("value or nonce repeated after %d seals", len(seen))
		}
		seen[s], nonces[parts[2]] = true, true
		ct, _ := base64.StdEncoding.DecodeString(parts[3])
		if len(ct) != len(pt)+tagSize {
			t.Fatalf("ciphertext is %d bytes, want %d", len(ct), len(pt)+tagSize)
		}
	}
}

// TestOpenWrongAAD is C3: a value moved to another row or column fails.
func TestOpenWrongAAD(t *testing.T) {
	kr, _ := newTestKeyring(t)
	sealed, _ := kr.Seal([]byte("token"), "servers/42/env/API_KEY")
	for _, aad := range []string{"servers/43/env/API_KEY", "servers/42/env/API_KEY2", "servers/42/headers/API_KEY",
		"", "servers/42/env/api_key", "servers/42/env/API_KEY\x00"} {
		if _, err := kr.Open(sealed, aad); !errors.Is(err, ErrDecrypt) {
			t.Errorf("Open with aad %q: err = %v, want ErrDecrypt", aad, err)
		}
	}
}

// TestOpenTamper is C4: one bit flipped anywhere in the stored string, or in
// the bytes it encodes, and the value no longer opens.
func TestOpenTamper(t *testing.T) {
	kr, _ := newTestKeyring(t)
	const aad = "servers/42/env/API_KEY"
	sealed, _ := kr.Seal([]byte("a secret worth protecting"), aad)
	for i := range len(sealed) {
		for bit := range 8 {
			b := []byte(sealed)
			b[i] ^= 1 << bit
			if pt, err := kr.Open(string(b), aad); err == nil {
				t.Errorf("flipping bit %d of byte %d (%q) still opens: %q", bit, i, b, pt)
			}
		}
	}
	parts := strings.Split(sealed, ":")
	for _, idx := range []int{2, 3} {
		raw, _ := base64.StdEncoding.DecodeString(parts[idx])
		for i := range len(raw) {
			for bit := range 8 {
				r := bytes.Clone(raw)
				r[i] ^= 1 << bit
				p := append([]string(nil), parts...)
				p[idx] = base64.StdEncoding.EncodeToString(r)
				if _, err := kr.Open(strings.Join(p, ":"), aad); !errors.Is(err, ErrDecrypt) {
					t.Errorf("part %d byte %d bit %d: err = %v, want ErrDecrypt", idx, i, bit, err)
				}
			}
		}
	}
	for n := range len(sealed) {
		if _, err := kr.Open(sealed[:n], aad); err == nil {
			t.Errorf("a %d-byte prefix opens", n)
		}
	}
	for _, extra := range []string{"A", "=", ":", "\n", " ", "AAAA"} {
		if _, err := kr.Open(sealed+extra, aad); err == nil {
			t.Errorf("value with %q appended opens", extra)
		}
	}
	if _, err := kr.Open(strings.Replace(sealed, "v1:", "v2:", 1), aad); !errors.Is(err, ErrMalformed) {
		t.Errorf("v2 prefix: err = %v, want ErrMalformed", err)
	}
}

// TestRotation is C5: add a primary, old values still open, retire, then
// they fail closed; the file round-trips the states.
func TestRotation(t *testing.T) {
	kr, path := newTestKeyring(t)
	const aad = "oauth/3/client_secret"
	old, _ := kr.Seal([]byte("old secret"), aad)

	id, err := kr.AddKey()
	if err != nil || id != "k2" {
		t.Fatalf("AddKey = %q, %v; want k2", id, err)
	}
	if kr.Primary() != "k1" {
		t.Errorf("AddKey changed the primary to %s", kr.Primary())
	}
	if err := kr.SetPrimary("k2"); err != nil {
		t.Fatal(err)
	}
	if err := kr.Save(path); err != nil {
		t.Fatal(err)
	}
	fresh, _ := kr.Seal([]byte("new secret"), aad)
	if !strings.HasPrefix(fresh, "v1:k2:") {
		t.Errorf("new value %q not under k2", fresh)
	}
	if !kr.NeedsRotation(old) || kr.NeedsRotation(fresh) {
		t.Errorf("NeedsRotation(old) = %v, (fresh) = %v", kr.NeedsRotation(old), kr.NeedsRotation(fresh))
	}
	if pt, err := kr.Open(old, aad); err != nil || string(pt) != "old secret" {
		t.Errorf("old value under active k1: %q, %v", pt, err)
	}

	// Moving a k2 value's header to k1 fails: the key id is authenticated.
	swapped := strings.Replace(fresh, "v1:k2:", "v1:k1:", 1)
	if _, err := kr.Open(swapped, aad); !errors.Is(err, ErrDecrypt) {
		t.Errorf("key id swapped: err = %v, want ErrDecrypt", err)
	}

	if err := kr.Retire("k2"); err == nil {
		t.Error("retiring the primary succeeded")
	}
	if err := kr.Retire("k9"); err == nil {
		t.Error("retiring an unknown key succeeded")
	}
	if err := kr.Retire("k1"); err != nil {
		t.Fatal(err)
	}
	if _, err := kr.Open(old, aad); !errors.Is(err, ErrKeyRetired) {
		t.Errorf("retired key: err = %v, want ErrKeyRetired", err)
	}
	if err := kr.SetPrimary("k1"); err == nil {
		t.Error("a retired key became primary")
	}
	if err := kr.SetPrimary("nope"); err == nil {
		t.Error("an unknown key became primary")
	}
	if err := kr.Save(path); err != nil {
		t.Fatal(err)
	}

	loaded, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []KeyInfo{{"k1", StateRetired}, {"k2", StatePrimary}}
	if got := loaded.Keys(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Keys after Load = %v, want %v", got, want)
	}
	if pt, err := loaded.Open(fresh, aad); err != nil || string(pt) != "new secret" {
		t.Errorf("reloaded keyring: %q, %v", pt, err)
	}
	if _, err := loaded.Open(old, aad); !errors.Is(err, ErrKeyRetired) {
		t.Errorf("reloaded keyring, retired key: err = %v", err)
	}
	if id, _ := loaded.AddKey(); id != "k3" {
		t.Errorf("third AddKey = %q, want k3", id)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("saved file mode = %v, %v; want 0600", fi.Mode(), err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("directory holds %d entries after Save, want only the key file", len(ents))
	}
}

func TestUnknownKey(t *testing.T) {
	a, _ := newTestKeyring(t)
	b, _ := newTestKeyring(t)
	sealed, _ := a.Seal([]byte("x"), "aad")
	// Same id k1, different key material.
	if _, err := b.Open(sealed, "aad"); !errors.Is(err, ErrDecrypt) {
		t.Errorf("other keyring's k1: err = %v, want ErrDecrypt", err)
	}
	other := strings.Replace(sealed, "v1:k1:", "v1:k7:", 1)
	if _, err := a.Open(other, "aad"); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("unknown id: err = %v, want ErrUnknownKey", err)
	}
	if !a.NeedsRotation(other) || !a.NeedsRotation("garbage") {
		t.Error("NeedsRotation false for a value not under the primary")
	}
}

func TestGenerate(t *testing.T) {
	kr, path := newTestKeyring(t)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("generated file mode %04o, want 0600", fi.Mode().Perm())
	}
	before, _ := os.ReadFile(path)
	if _, err := Generate(path); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Generate over an existing file: err = %v, want fs.ErrExist", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("Generate changed an existing key file")
	}
	if _, err := Generate(filepath.Join(t.TempDir(), "missing", "key")); err == nil {
		t.Error("Generate into a missing directory succeeded")
	}
	sealed, _ := kr.Seal([]byte("v"), "a")
	loaded, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if pt, err := loaded.Open(sealed, "a"); err != nil || string(pt) != "v" {
		t.Errorf("loaded keyring opens %q, %v", pt, err)
	}
	if got := loaded.Keys(); len(got) != 1 || got[0] != (KeyInfo{"k1", StatePrimary}) {
		t.Errorf("Keys = %v", got)
	}
}

func writeKeyFile(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // WriteFile is subject to umask
		t.Fatal(err)
	}
	return path
}

func b64(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// TestLoad is C6: a missing, exposed, malformed or wrong-length key stops
// the server with a clear message that shows no key.
func TestLoad(t *testing.T) {
	good, good2 := b64(32), b64(32)
	ok := "# comment\n\n  k1 retired " + good2 + "\r\nk2 primary " + good + "\n"
	if kr, err := Load(writeKeyFile(t, ok, 0o600)); err != nil || kr.Primary() != "k2" {
		t.Fatalf("Load of a valid file: %v, %v", kr, err)
	}
	if _, err := Load(writeKeyFile(t, ok, 0o400)); err != nil {
		t.Errorf("Load of a 0400 file: %v", err)
	}

	tests := []struct {
		name    string
		content string
		mode    os.FileMode
		want    string
	}{
		{"group readable", ok, 0o640, "chmod 600"},
		{"other readable", ok, 0o604, "chmod 600"},
		{"group writable", ok, 0o620, "chmod 600"},
		{"empty", "", 0o600, "no keys"},
		{"comments only", "# nothing\n", 0o600, "no keys"},
		{"no primary", "k1 active " + good + "\n", 0o600, "no primary"},
		{"two primaries", "k1 primary " + good + "\nk2 primary " + good2 + "\n", 0o600, "second primary"},
		{"unknown state", "k1 main " + good + "\n", 0o600, `unknown state "main"`},
		{"bad id", "k:1 primary " + good + "\n", 0o600, "invalid key id"},
		{"duplicate id", "k1 primary " + good + "\nk1 active " + good2 + "\n", 0o600, "appears twice"},
		{"31 bytes", "k1 primary " + b64(31) + "\n", 0o600, "31 bytes, want 32"},
		{"33 bytes", "k1 primary " + b64(33) + "\n", 0o600, "33 bytes, want 32"},
		{"AES-128 key", "k1 primary " + b64(16) + "\n", 0o600, "16 bytes, want 32"},
		{"not base64", "k1 primary " + strings.Repeat("*", 44) + "\n", 0o600, "not valid base64"},
		{"unpadded", "k1 primary " + strings.TrimRight(good, "=") + "\n", 0o600, "not valid base64"},
		{"key only", good + "\n", 0o600, "found 1 fields"},
		{"four fields", "k1 primary " + good + " extra\n", 0o600, "found 4 fields"},
		{"line number", "# c\nk1 primary " + good + "\nk2 bogus " + good2 + "\n", 0o600, "line 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(writeKeyFile(t, tt.content, tt.mode))
			if err == nil {
				t.Fatal("Load succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
			for _, line := range strings.Split(tt.content, "\n") {
				for _, f := range strings.Fields(line) {
					if len(f) >= 20 && strings.Contains(err.Error(), f) {
						t.Errorf("error %q shows key material", err)
					}
				}
			}
		})
	}

	if _, err := Load(filepath.Join(t.TempDir(), "absent")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: err = %v, want fs.ErrNotExist", err)
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: err = %v", err)
	}
	big := writeKeyFile(t, strings.Repeat("#", maxFileSize+1), 0o600)
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("oversized file: err = %v", err)
	}
}

// TestNoKeyMaterialInOutput is C6: formatting or logging a keyring shows no
// key, whatever the verb or handler.
func TestNoKeyMaterialInOutput(t *testing.T) {
	kr, path := newTestKeyring(t)
	if _, err := kr.AddKey(); err != nil {
		t.Fatal(err)
	}
	if err := kr.Save(path); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	var secrets []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 3 && !strings.HasPrefix(line, "#") {
			raw, _ := base64.StdEncoding.DecodeString(f[2])
			secrets = append(secrets, f[2], hex.EncodeToString(raw), strings.ToUpper(hex.EncodeToString(raw)),
				string(raw[:8]), fmt.Sprint(raw[:4])[1:8])
		}
	}
	if len(secrets) != 10 {
		t.Fatalf("found %d keys in the file, want 2", len(secrets)/5)
	}

	var out bytes.Buffer
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T"} {
		fmt.Fprintf(&out, verb+"\n", kr)
		for _, k := range kr.keys {
			fmt.Fprintf(&out, verb+"\n", k)
			fmt.Fprintf(&out, verb+"\n", *k)
			fmt.Fprintf(&out, verb+"\n", k.material)
		}
	}
	slog.New(slog.NewJSONHandler(&out, nil)).Info("loaded", "keyring", kr)
	slog.New(slog.NewTextHandler(&out, nil)).Info("loaded", "keyring", kr, "key", kr.keys["k1"])
	for _, s := range secrets {
		if strings.Contains(out.String(), s) {
			t.Fatalf("output shows key material %q:\n%s", s, out.String())
		}
	}
	if !strings.Contains(out.String(), "keyring(k1=primary,k2=active)") || !strings.Contains(out.String(), `"primary":"k1"`) {
		t.Errorf("output lacks the key ids:\n%s", out.String())
	}
}

// TestConcurrentUse runs under -race: seals and opens while the key set
// rotates.
func TestConcurrentUse(t *testing.T) {
	kr, path := newTestKeyring(t)
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for g := range 4 {
		wg.Go(func() {
			aad := fmt.Sprintf("servers/%d/env/K", g)
			for i := range 300 {
				s, err := kr.Seal([]byte{byte(i)}, aad)
				if err == nil {
					var pt []byte
					pt, err = kr.Open(s, aad)
					if err == nil && (len(pt) != 1 || pt[0] != byte(i)) {
						err = fmt.Errorf("opened %v, want [%d]", pt, byte(i))
					}
				}
				if err != nil {
					errc <- err
					return
				}
				_ = kr.String()
			}
		})
	}
	for range 5 {
		id, err := kr.AddKey()
		if err != nil {
			t.Fatal(err)
		}
		if err := kr.SetPrimary(id); err != nil {
			t.Fatal(err)
		}
		if err := kr.Save(path); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

func TestZeroKeyring(t *testing.T) {
	var kr Keyring
	if _, err := kr.Seal([]byte("x"), "a"); err == nil {
		t.Error("a keyring without keys sealed")
	}
	if _, err := kr.Open("v1:k1:AAAAAAAAAAAAAAAA:AAAAAAAAAAAAAAAAAAAAAA==", "a"); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("Open on an empty keyring: %v, want ErrUnknownKey", err)
	}
	id, err := kr.AddKey()
	if err != nil || id != "k1" {
		t.Fatalf("AddKey = %q, %v", id, err)
	}
	if err := kr.SetPrimary(id); err != nil {
		t.Fatal(err)
	}
	s, err := kr.Seal([]byte("x"), "a")
	if err != nil {
		t.Fatal(err)
	}
	if pt, err := kr.Open(s, "a"); err != nil || string(pt) != "x" {
		t.Errorf("Open = %q, %v", pt, err)
	}
	path := filepath.Join(t.TempDir(), "k")
	if err := kr.Save(path); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err != nil {
		t.Errorf("Load of a saved zero-value keyring: %v", err)
	}
}
