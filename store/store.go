// Package store holds every SQL statement of mcpgate. It takes a pgxpool and
// gives back plain structs and sentinel errors; secret values are sealed on
// the way in and opened on the way out, so no caller sees ciphertext and no
// row holds plaintext.
package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

var (
	// ErrNotFound means no row matched, or the caller may not see it.
	ErrNotFound = errors.New("not found")
	// ErrConflict means a unique name or e-mail is taken.
	ErrConflict = errors.New("already exists")
	// ErrSecret means a stored secret could not be opened (wrong or retired
	// key, or a tampered or moved ciphertext). It never carries the value.
	ErrSecret = errors.New("stored secret cannot be decrypted")
)

// Sealer encrypts secret values at rest. aad binds a ciphertext to its row
// and column, so a value copied elsewhere does not open.
type Sealer interface {
	Seal(plaintext []byte, aad string) (string, error)
	Open(sealed string, aad string) ([]byte, error)
}

// Store is the database of one gateway; every replica has its own Store on
// the same database.
type Store struct {
	pool   *pgxpool.Pool
	sealer Sealer
}

// New wraps an open pool.
func New(pool *pgxpool.Pool, sealer Sealer) *Store {
	return &Store{pool: pool, sealer: sealer}
}

// Pool exposes the pool for health checks and migrations.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Actor is who made a change, for the activity log written in the same
// transaction as the change.
type Actor struct {
	UserID    int64
	TokenID   int64 // 0: not through a token
	RequestID string
}

func (a Actor) userArg() any {
	if a.UserID == 0 {
		return nil
	}
	return a.UserID
}

func (a Actor) tokenArg() any {
	if a.TokenID == 0 {
		return nil
	}
	return a.TokenID
}

func record(ctx context.Context, tx pgx.Tx, a Actor, action, target string, detail map[string]any) error {
	if detail == nil {
		detail = map[string]any{}
	}
	_, err := tx.Exec(ctx, `INSERT INTO activity (user_id, token_id, action, target, request_id, detail)
		VALUES ($1, $2, $3, $4, $5, $6)`, a.userArg(), a.tokenArg(), action, target, a.RequestID, detail)
	if err != nil {
		return fmt.Errorf("recording activity: %w", err)
	}
	return nil
}

func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// DurabilitySettings reports fsync and synchronous_commit, which must both be
// on for an acknowledged write to survive a crash.
func (s *Store) DurabilitySettings(ctx context.Context) (fsync, syncCommit string, err error) {
	if err = s.pool.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit')`).Scan(&fsync, &syncCommit); err != nil {
		return "", "", err
	}
	return fsync, syncCommit, nil
}
