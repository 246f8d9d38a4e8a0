package server

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/config"
	"github.com/mcpgate/mcpgate/keyring"
	"github.com/mcpgate/mcpgate/store"
)

// LoadSecretKey opens the keyring that seals secrets at rest. With
// MCPGATE_SECRET_KEY_FILE unset, a key is generated into the data dir on
// first start; a named file that is missing stops the start, since a new
// key could not open what the old one sealed.
func LoadSecretKey(cfg config.Config, log *slog.Logger) (*Keyfile, error) {
	path := cfg.SecretKeyFile
	k, err := keyring.Load(path)
	if err == nil {
		return newKeyfile(path, k, log), nil
	}
	if !errors.Is(err, os.ErrNotExist) || cfg.SecretKeyFileSet {
		return nil, fmt.Errorf("MCPGATE_SECRET_KEY_FILE: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("MCPGATE_SECRET_KEY_FILE: %w", err)
	}
	k, err = keyring.Generate(path)
	if err != nil {
		return nil, fmt.Errorf("MCPGATE_SECRET_KEY_FILE: generating: %w", err)
	}
	log.Info("generated the secret key; back it up: secrets stored in the database cannot be read without it", "path", path)
	return newKeyfile(path, k, log), nil
}

// Keyfile is the keyring of a key file that another process (`mcpgate
// secrets add-key`) may rewrite while the gateway runs: it picks up a new
// primary within a few seconds, and at once when a value names a key it
// does not know yet.
type Keyfile struct {
	path string
	log  *slog.Logger

	mu      sync.Mutex
	kr      *keyring.Keyring
	modTime time.Time
	checked time.Time
}

func newKeyfile(path string, kr *keyring.Keyring, log *slog.Logger) *Keyfile {
	f := &Keyfile{path: path, kr: kr, log: log}
	if st, err := os.Stat(path); err == nil {
		f.modTime = st.ModTime()
	}
	return f
}

// Keyring returns the current keyring.
func (f *Keyfile) Keyring() *keyring.Keyring {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refresh(false)
	return f.kr
}

// refresh reloads the file when it changed; force skips the rate limit.
// A file that no longer loads keeps the keyring in memory: refusing every
// secret because of a half-edited file would be worse.
func (f *Keyfile) refresh(force bool) {
	if !force && time.Since(f.checked) < 5*time.Second {
		return
	}
	f.checked = time.Now()
	st, err := os.Stat(f.path)
	if err != nil || st.ModTime().Equal(f.modTime) {
		return
	}
	kr, err := keyring.Load(f.path)
	if err != nil {
		f.log.Error("secret key file changed but does not load; keeping the keys in memory", "err", err.Error())
		return
	}
	f.kr, f.modTime = kr, st.ModTime()
	f.log.Info("secret key file reloaded", "primary", kr.Primary())
}

// Seal implements store.Sealer.
func (f *Keyfile) Seal(plaintext []byte, aad string) (string, error) {
	return f.Keyring().Seal(plaintext, aad)
}

// Open implements store.Sealer.
func (f *Keyfile) Open(sealed, aad string) ([]byte, error) {
	pt, err := f.Keyring().Open(sealed, aad)
	if errors.Is(err, keyring.ErrUnknownKey) {
		f.mu.Lock()
		f.refresh(true)
		kr := f.kr
		f.mu.Unlock()
		return kr.Open(sealed, aad)
	}
	return pt, err
}

// NeedsRotation implements store.RotatingSealer.
func (f *Keyfile) NeedsRotation(sealed string) bool { return f.Keyring().NeedsRotation(sealed) }

var _ store.RotatingSealer = (*Keyfile)(nil)
