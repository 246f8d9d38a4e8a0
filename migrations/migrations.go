// Package migrations holds the database schema as numbered SQL files and
// applies them. Files are append-only: a mistake is fixed by a new file.
package migrations

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
)

//go:embed *.sql
var files embed.FS

// Names lists the migration files in apply order (lexical: 0001_, 0002_, …).
func Names() ([]string, error) {
	return fs.Glob(files, "*.sql")
}

// Fingerprint is a hash of every migration, so test templates built from an
// older set of files are never reused.
func Fingerprint() (string, error) {
	names, err := Names()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// Beginner is what Up needs of a pool or a connection.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Up applies every file not yet recorded in schema_migrations, all in one
// transaction under an advisory lock, so replicas starting at the same time
// queue up and each file is applied exactly once. It returns the names it
// applied.
func Up(ctx context.Context, db Beginner) ([]string, error) {
	names, err := Names()
	if err != nil {
		return nil, err
	}
	var applied []string
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('mcpgate.migrations'))`); err != nil {
			return fmt.Errorf("locking: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		for _, name := range names {
			tag, err := tx.Exec(ctx, `INSERT INTO schema_migrations (name) VALUES ($1) ON CONFLICT DO NOTHING`, name)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				continue
			}
			sql, err := files.ReadFile(name)
			if err != nil {
				return err
			}
			// No arguments: the simple protocol runs a multi-statement file.
			if _, err := tx.Exec(ctx, string(sql)); err != nil {
				return fmt.Errorf("applying %s: %w", name, err)
			}
			applied = append(applied, name)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}

// Pending reports the files not yet applied; /readyz and doctor use it.
func Pending(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) ([]string, error) {
	names, err := Names()
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT name FROM schema_migrations`)
	if err != nil {
		return names, err
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return names, err
	}
	seen := make(map[string]bool, len(done))
	for _, n := range done {
		seen[n] = true
	}
	var pending []string
	for _, n := range names {
		if !seen[n] {
			pending = append(pending, n)
		}
	}
	return pending, nil
}
