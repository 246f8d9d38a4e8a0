// Package keyring encrypts secrets at rest: a set of AES-256 keys with ids,
// one of them primary, and envelope sealing with AES-256-GCM bound to a
// caller-chosen context (AAD). It holds only the cryptography and the key
// file; the store decides what to seal and re-encrypts rows on rotation.
//
// # Key file
//
// A UTF-8 text file, mode 0600 (no group or other bits), one key per line:
//
//	# comment
//	<id> <state> <base64 of 32 random bytes>
//
// The id is 1 to 32 characters of [A-Za-z0-9_.-] starting with a letter or
// digit. The state is one of:
//
//   - primary: seals new values and opens old ones; exactly one key has it.
//   - active: opens values sealed under it, never seals. A key waits here
//     after it was primary, until the store has re-encrypted its values.
//   - retired: kept so that a value still sealed under it is recognised and
//     refused (ErrKeyRetired) rather than reported as unknown.
//
// Blank lines and lines starting with # are ignored. Generate writes a fresh
// file with one primary key "k1"; AddKey, SetPrimary, Retire and Save rotate.
//
// # Sealed values
//
//	v1:<key id>:<base64 nonce>:<base64 ciphertext and tag>
//
// with standard padded base64, a random 96-bit nonce per value, and as GCM
// additional data the bytes "v1:<key id>:" followed by the caller's AAD, so
// neither the header nor the value's place (say "servers/42/env/API_KEY")
// can change without Open failing.
package keyring

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// KeySize is the length in bytes of every key: AES-256.
const KeySize = 32

const (
	version   = "v1"
	nonceSize = 12
	tagSize   = 16
	// maxFileSize bounds what Load reads: a key line is about 60 bytes.
	maxFileSize = 1 << 20
)

// State is a key's role in the keyring.
type State string

// The key states; see the package documentation.
const (
	StatePrimary State = "primary"
	StateActive  State = "active"
	StateRetired State = "retired"
)

// Errors of Open. ErrMalformed covers anything that is not a well-formed v1
// value; ErrDecrypt covers a value that is well-formed but fails
// authentication (tampered, moved to another AAD, or sealed under another
// key with the same id).
var (
	ErrMalformed  = errors.New("keyring: malformed sealed value")
	ErrUnknownKey = errors.New("keyring: sealed under an unknown key")
	ErrKeyRetired = errors.New("keyring: sealed under a retired key")
	ErrDecrypt    = errors.New("keyring: decryption failed")
)

// Keyring is a set of keys, safe for concurrent use. Its String, GoString,
// Format and LogValue never show key material. Load and Generate make one;
// the zero value holds no keys (AddKey and SetPrimary give it one).
type Keyring struct {
	mu      sync.RWMutex
	keys    map[string]*key
	order   []string // ids in file order, for Save
	primary string
}

type key struct {
	state    State
	material secretBytes
	aead     cipher.AEAD
}

// key formats as a placeholder too: fmt cannot call the methods of an
// unexported field, so secretBytes alone does not protect a printed key.
func (k key) String() string               { return "key([redacted])" }
func (k key) GoString() string             { return k.String() }
func (k key) Format(f fmt.State, _ rune)   { io.WriteString(f, k.String()) }
func (k key) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// KeyInfo describes a key without its material.
type KeyInfo struct {
	ID    string
	State State
}

// secretBytes is key material. It formats as a fixed placeholder with every
// fmt verb, so a stray %v or %x of a struct holding it shows nothing.
type secretBytes []byte

func (secretBytes) String() string               { return "[redacted]" }
func (secretBytes) GoString() string             { return "[redacted]" }
func (secretBytes) Format(f fmt.State, _ rune)   { io.WriteString(f, "[redacted]") }
func (secretBytes) MarshalText() ([]byte, error) { return []byte("[redacted]"), nil }

func newKey(state State, material []byte) (*key, error) {
	block, err := aes.NewCipher(material)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &key{state: state, material: secretBytes(material), aead: aead}, nil
}

// validID reports whether id may name a key: it appears in every sealed
// value and in a text file, so no colons and no whitespace.
func validID(id string) bool {
	if len(id) == 0 || len(id) > 32 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// Load reads the key file at path. It refuses a file that does not exist, is
// not a regular file, can be read or written by group or others, or is not
// in the documented format, with a message that says which and never shows
// key material.
func Load(path string) (*Keyring, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening key file: %w", err)
	}
	defer f.Close()
	// Stat the open file, not the path, so the checked file is the read one.
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("checking key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("key file %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("key file %s has mode %04o: it must not be accessible to group or others (chmod 600 %s)",
			path, perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading key file: %w", err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("key file %s is larger than %d bytes", path, maxFileSize)
	}
	kr, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return kr, nil
}

// parse reads the key file format. Its errors name line numbers, never
// line contents, since a line holds a key.
func parse(data []byte) (*Keyring, error) {
	kr := &Keyring{keys: map[string]*key{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxFileSize)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 {
			return nil, fmt.Errorf("line %d: want \"<id> <state> <base64 key>\", found %d fields", n, len(fields))
		}
		id, state, encoded := fields[0], State(fields[1]), fields[2]
		if !validID(id) {
			return nil, fmt.Errorf("line %d: invalid key id %q: use 1 to 32 of A-Z a-z 0-9 _ . - starting with a letter or digit", n, id)
		}
		if _, dup := kr.keys[id]; dup {
			return nil, fmt.Errorf("line %d: key id %q appears twice", n, id)
		}
		switch state {
		case StatePrimary, StateActive, StateRetired:
		default:
			return nil, fmt.Errorf("line %d: key %s has unknown state %q: use primary, active or retired", n, id, state)
		}
		material, err := base64.StdEncoding.Strict().DecodeString(encoded)
		if err != nil {
			return nil, fmt.Errorf("line %d: key %s is not valid base64", n, id)
		}
		if len(material) != KeySize {
			return nil, fmt.Errorf("line %d: key %s is %d bytes, want %d (AES-256)", n, id, len(material), KeySize)
		}
		k, err := newKey(state, material)
		if err != nil {
			return nil, fmt.Errorf("line %d: key %s: %w", n, id, err)
		}
		if state == StatePrimary {
			if kr.primary != "" {
				return nil, fmt.Errorf("line %d: key %s is a second primary key (%s is one)", n, id, kr.primary)
			}
			kr.primary = id
		}
		kr.keys[id] = k
		kr.order = append(kr.order, id)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading lines: %w", err)
	}
	if len(kr.keys) == 0 {
		return nil, errors.New("no keys")
	}
	if kr.primary == "" {
		return nil, errors.New("no primary key")
	}
	return kr, nil
}

// Generate creates a key file at path holding one new primary key "k1",
// with mode 0600, and returns its keyring. It never overwrites: an existing
// file is an error.
func Generate(path string) (*Keyring, error) {
	material := make([]byte, KeySize)
	rand.Read(material) // never fails; panics if the OS has no randomness
	k, err := newKey(StatePrimary, material)
	if err != nil {
		return nil, err
	}
	kr := &Keyring{keys: map[string]*key{"k1": k}, order: []string{"k1"}, primary: "k1"}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("creating key file: %w", err)
	}
	if err := writeAndSync(f, kr.marshal()); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("writing key file: %w", err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("writing key file: %w", err)
	}
	return kr, nil
}

// Save writes the keyring to path atomically (a temporary file in the same
// directory, synced, then renamed over path), with mode 0600.
func (kr *Keyring) Save(path string) error {
	kr.mu.RLock()
	data := kr.marshal()
	kr.mu.RUnlock()
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("saving key file: %w", err)
	}
	tmp := f.Name()
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("saving key file: %w", err)
	}
	if err := writeAndSync(f, data); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("saving key file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("saving key file: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("saving key file: %w", err)
	}
	return nil
}

func writeAndSync(f *os.File, data []byte) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncDir makes a created or renamed file's directory entry durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// marshal renders the key file; the caller holds kr.mu.
func (kr *Keyring) marshal() []byte {
	var b bytes.Buffer
	b.WriteString("# mcpgate keyring: <id> <primary|active|retired> <base64 AES-256 key>\n")
	b.WriteString("# Keep this file secret and backed up: without it, stored secrets are lost.\n")
	for _, id := range kr.order {
		k := kr.keys[id]
		fmt.Fprintf(&b, "%s %s %s\n", id, k.state, base64.StdEncoding.EncodeToString(k.material))
	}
	return b.Bytes()
}

// Primary returns the id of the key that seals new values.
func (kr *Keyring) Primary() string {
	kr.mu.RLock()
	defer kr.mu.RUnlock()
	return kr.primary
}

// Keys lists the keys in file order, without their material.
func (kr *Keyring) Keys() []KeyInfo {
	kr.mu.RLock()
	defer kr.mu.RUnlock()
	out := make([]KeyInfo, len(kr.order))
	for i, id := range kr.order {
		out[i] = KeyInfo{ID: id, State: kr.keys[id].state}
	}
	return out
}

// AddKey adds a new random key in state active and returns its id, "k<n>"
// with n one more than the highest such id in use. Make it primary with
// SetPrimary, and Save before sealing with it: a value sealed under a key
// that never reached the file is lost with the process.
func (kr *Keyring) AddKey() (string, error) {
	material := make([]byte, KeySize)
	rand.Read(material)
	k, err := newKey(StateActive, material)
	if err != nil {
		return "", err
	}
	kr.mu.Lock()
	defer kr.mu.Unlock()
	next := 1
	for _, id := range kr.order {
		if n, err := strconv.Atoi(strings.TrimPrefix(id, "k")); err == nil && strings.HasPrefix(id, "k") && n >= next {
			next = n + 1
		}
	}
	id := "k" + strconv.Itoa(next)
	if kr.keys == nil {
		kr.keys = map[string]*key{}
	}
	kr.keys[id] = k
	kr.order = append(kr.order, id)
	return id, nil
}

// SetPrimary makes key id the one that seals; the previous primary becomes
// active, so values sealed under it still open. A retired key cannot become
// primary again.
func (kr *Keyring) SetPrimary(id string) error {
	kr.mu.Lock()
	defer kr.mu.Unlock()
	k := kr.keys[id]
	switch {
	case k == nil:
		return fmt.Errorf("setting primary key: no key %q", id)
	case k.state == StateRetired:
		return fmt.Errorf("setting primary key: key %q is retired", id)
	}
	if old := kr.keys[kr.primary]; old != nil && kr.primary != id {
		old.state = StateActive
	}
	k.state = StatePrimary
	kr.primary = id
	return nil
}

// Retire marks key id retired: values sealed under it no longer open. The
// primary key cannot be retired; make another key primary first.
func (kr *Keyring) Retire(id string) error {
	kr.mu.Lock()
	defer kr.mu.Unlock()
	k := kr.keys[id]
	switch {
	case k == nil:
		return fmt.Errorf("retiring key: no key %q", id)
	case k.state == StatePrimary:
		return fmt.Errorf("retiring key: %q is the primary key", id)
	}
	k.state = StateRetired
	return nil
}

func additionalData(id, aad string) []byte {
	b := make([]byte, 0, len(version)+len(id)+2+len(aad))
	b = append(b, version...)
	b = append(b, ':')
	b = append(b, id...)
	b = append(b, ':')
	return append(b, aad...)
}

// Seal encrypts plaintext under the primary key, bound to aad, and returns
// "v1:<key id>:<nonce>:<ciphertext+tag>". The same plaintext sealed twice
// gives different values. aad should name where the value lives (table, row,
// column, map key), so a copy of it elsewhere does not open.
func (kr *Keyring) Seal(plaintext []byte, aad string) (string, error) {
	kr.mu.RLock()
	id := kr.primary
	k := kr.keys[id]
	kr.mu.RUnlock()
	if k == nil {
		return "", errors.New("sealing: keyring has no primary key")
	}
	nonce := make([]byte, nonceSize)
	rand.Read(nonce)
	return sealWith(k, id, nonce, plaintext, aad), nil
}

// sealWith seals under key k with id and the given nonce, which must never
// repeat for k: only Seal's random nonces and fixed test vectors use it.
func sealWith(k *key, id string, nonce, plaintext []byte, aad string) string {
	ct := k.aead.Seal(nil, nonce, plaintext, additionalData(id, aad))
	enc := base64.StdEncoding
	var b strings.Builder
	b.Grow(len(version) + len(id) + 3 + enc.EncodedLen(nonceSize) + enc.EncodedLen(len(ct)))
	b.WriteString(version)
	b.WriteByte(':')
	b.WriteString(id)
	b.WriteByte(':')
	b.WriteString(enc.EncodeToString(nonce))
	b.WriteByte(':')
	b.WriteString(enc.EncodeToString(ct))
	return b.String()
}

// sealedParts splits a v1 value into its key id, nonce and ciphertext.
func sealedParts(sealed string) (id string, nonce, ct []byte, err error) {
	parts := strings.Split(sealed, ":")
	if len(parts) != 4 || parts[0] != version || !validID(parts[1]) {
		return "", nil, nil, ErrMalformed
	}
	nonce, err = decodeStrict(parts[2])
	if err != nil || len(nonce) != nonceSize {
		return "", nil, nil, ErrMalformed
	}
	ct, err = decodeStrict(parts[3])
	if err != nil || len(ct) < tagSize {
		return "", nil, nil, ErrMalformed
	}
	return parts[1], nonce, ct, nil
}

// decodeStrict decodes canonical padded base64 only: the standard decoder
// skips CR and LF, and Strict alone still accepts them, so two spellings
// could open to one value.
func decodeStrict(s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '=') {
			return nil, ErrMalformed
		}
	}
	return base64.StdEncoding.Strict().DecodeString(s)
}

// Open decrypts a value made by Seal with the same aad. It fails closed:
// ErrMalformed for anything that is not a v1 value, ErrUnknownKey or
// ErrKeyRetired for a key that cannot be used, ErrDecrypt when
// authentication fails (tampering, another aad, another key).
func (kr *Keyring) Open(sealed, aad string) ([]byte, error) {
	id, nonce, ct, err := sealedParts(sealed)
	if err != nil {
		return nil, err
	}
	kr.mu.RLock()
	k := kr.keys[id]
	var state State
	if k != nil {
		state = k.state
	}
	kr.mu.RUnlock()
	switch {
	case k == nil:
		return nil, fmt.Errorf("%w %q", ErrUnknownKey, id)
	case state == StateRetired:
		return nil, fmt.Errorf("%w %q", ErrKeyRetired, id)
	}
	pt, err := k.aead.Open(nil, nonce, ct, additionalData(id, aad))
	if err != nil {
		return nil, ErrDecrypt
	}
	return pt, nil
}

// NeedsRotation reports whether sealed is not under the primary key and so
// should be re-encrypted. It is true for values it cannot parse too, so a
// rotation pass surfaces them (Open then says what is wrong) instead of
// skipping them.
func (kr *Keyring) NeedsRotation(sealed string) bool {
	id, _, _, err := sealedParts(sealed)
	if err != nil {
		return true
	}
	return id != kr.Primary()
}

// String describes the keyring without key material.
func (kr *Keyring) String() string {
	if kr == nil {
		return "keyring(nil)"
	}
	kr.mu.RLock()
	defer kr.mu.RUnlock()
	ids := slices.Clone(kr.order)
	for i, id := range ids {
		ids[i] = id + "=" + string(kr.keys[id].state)
	}
	return "keyring(" + strings.Join(ids, ",") + ")"
}

// GoString is String, so %#v shows no key material either.
func (kr *Keyring) GoString() string { return kr.String() }

// Format prints String for every verb, so no verb (%x, %d, %+v) reaches the
// fields.
func (kr *Keyring) Format(f fmt.State, _ rune) { io.WriteString(f, kr.String()) }

// LogValue logs the key ids and states only.
func (kr *Keyring) LogValue() slog.Value {
	if kr == nil {
		return slog.StringValue("keyring(nil)")
	}
	kr.mu.RLock()
	defer kr.mu.RUnlock()
	return slog.GroupValue(slog.String("primary", kr.primary), slog.Int("keys", len(kr.keys)))
}
