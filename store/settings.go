package store

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"
)

// GetSetting reads one runtime setting into v; ErrNotFound when unset.
func (s *Store) GetSetting(ctx context.Context, key string, v any) error {
	var raw []byte
	err := s.pool.QueryRow(ctx, `SELECT value FROM settings WHERE key = $1`, key).Scan(&raw)
	if err != nil {
		return notFound(err)
	}
	return json.Unmarshal(raw, v)
}

// InitSetting stores v under key unless a value exists; it reports whether
// it wrote. Replicas starting together agree on the first writer's value.
func (s *Store) InitSetting(ctx context.Context, key string, v any) (bool, error) {
	tag, err := s.pool.Exec(ctx, `INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT DO NOTHING`, key, v)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// UpdateSetting replaces a setting with what update makes of the current
// value, under a row lock, so concurrent PATCHes on two replicas serialise.
// It notifies every replica.
func (s *Store) UpdateSetting(ctx context.Context, a Actor, key string, update func(current []byte) (any, error)) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var cur []byte
		err := tx.QueryRow(ctx, `SELECT value FROM settings WHERE key = $1 FOR UPDATE`, key).Scan(&cur)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		next, err := update(cur)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO settings (key, value, updated_at) VALUES ($1, $2, now())
			ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = now()`, key, next); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_notify('mcpgate_settings', $1)`, key); err != nil {
			return err
		}
		return record(ctx, tx, a, "config.update", "config/"+key, nil)
	})
}
