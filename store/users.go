package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// User is a person (or the built-in bootstrap admin).
type User struct {
	ID        int64     `db:"id"`
	Email     string    `db:"email"`
	Name      string    `db:"name"`
	Role      string    `db:"role"`
	Disabled  bool      `db:"disabled"`
	Builtin   bool      `db:"builtin"`
	CreatedAt time.Time `db:"created_at"`
}

const userCols = `id, email, name, role, disabled, builtin, created_at`

// UserPatch holds the fields a PATCH sets; nil leaves a field alone.
type UserPatch struct {
	Name     *string
	Role     *string
	Disabled *bool
}

// CreateUser adds a user; a taken e-mail (case-insensitive) is ErrConflict.
func (s *Store) CreateUser(ctx context.Context, a Actor, email, name, role string) (User, error) {
	var u User
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, `INSERT INTO users (email, name, role) VALUES ($1, $2, $3) RETURNING `+userCols, email, name, role)
		var err error
		if u, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[User]); err != nil {
			return err
		}
		return record(ctx, tx, a, "user.create", userTarget(u.ID), map[string]any{"email": u.Email, "role": u.Role})
	})
	if isUniqueViolation(err) {
		return User{}, fmt.Errorf("user %q: %w", email, ErrConflict)
	}
	return u, err
}

func userTarget(id int64) string { return "user/" + strconv.FormatInt(id, 10) }

// EnsureBuiltinAdmin returns the bootstrap admin, creating it on first use.
func (s *Store) EnsureBuiltinAdmin(ctx context.Context) (User, error) {
	rows, _ := s.pool.Query(ctx, `
		WITH ins AS (
			INSERT INTO users (email, name, role, builtin) VALUES ('admin@mcpgate.invalid', 'Built-in admin', 'admin', true)
			ON CONFLICT DO NOTHING RETURNING `+userCols+`)
		SELECT `+userCols+` FROM ins
		UNION ALL SELECT `+userCols+` FROM users WHERE builtin
		LIMIT 1`)
	return pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[User])
}

// GetUser returns one user.
func (s *Store) GetUser(ctx context.Context, id int64) (User, error) {
	rows, _ := s.pool.Query(ctx, `SELECT `+userCols+` FROM users WHERE id = $1`, id)
	u, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[User])
	return u, notFound(err)
}

// GetUserByEmail returns the user with that e-mail, compared case-insensitively.
func (s *Store) GetUserByEmail(ctx context.Context, email string) (User, error) {
	rows, _ := s.pool.Query(ctx, `SELECT `+userCols+` FROM users WHERE lower(email) = lower($1)`, email)
	u, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[User])
	return u, notFound(err)
}

// ListUsers returns every user, oldest first.
func (s *Store) ListUsers(ctx context.Context) ([]User, error) {
	rows, _ := s.pool.Query(ctx, `SELECT `+userCols+` FROM users ORDER BY id`)
	return pgx.CollectRows(rows, pgx.RowToStructByName[User])
}

// UpdateUser applies a patch.
func (s *Store) UpdateUser(ctx context.Context, a Actor, id int64, p UserPatch) (User, error) {
	var u User
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, `UPDATE users SET
				name = coalesce($2, name), role = coalesce($3, role), disabled = coalesce($4, disabled)
			WHERE id = $1 RETURNING `+userCols, id, p.Name, p.Role, p.Disabled)
		var err error
		if u, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[User]); err != nil {
			return notFound(err)
		}
		return record(ctx, tx, a, "user.update", userTarget(id), nil)
	})
	return u, err
}

// DeleteUser removes a user with their tokens and personal servers.
func (s *Store) DeleteUser(ctx context.Context, a Actor, id int64) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM users WHERE id = $1 AND NOT builtin`, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		if _, err := tx.Exec(ctx, `SELECT pg_notify('mcpgate_servers', '*')`); err != nil {
			return err
		}
		return record(ctx, tx, a, "user.delete", userTarget(id), nil)
	})
}
