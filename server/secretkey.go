package server

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/mcpgate/mcpgate/config"
	"github.com/mcpgate/mcpgate/keyring"
	"github.com/mcpgate/mcpgate/store"
)

// LoadSecretKey opens the keyring that seals secrets at rest. With
// MCPGATE_SECRET_KEY_FILE unset, a key is generated into the data dir on
// first start; a named file that is missing stops the start, since a new
// key could not open what the old one sealed.
func LoadSecretKey(cfg config.Config, log *slog.Logger) (store.Sealer, error) {
	path := cfg.SecretKeyFile
	k, err := keyring.Load(path)
	if err == nil {
		return k, nil
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
	return k, nil
}
