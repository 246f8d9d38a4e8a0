package store

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Token is an agent token or a personal access token, without its secret.
type Token struct {
	ID         int64      `db:"id"`
	UserID     int64      `db:"user_id"`
	Name       string     `db:"name"`
	Kind       string     `db:"kind"`
	Prefix     string     `db:"prefix"`
	Last4      string     `db:"last4"`
	Scopes     []string   `db:"scopes"`
	Servers    []string   `db:"servers"`
	ExpiresAt  time.Time  `db:"expires_at"`
	CreatedAt  time.Time  `db:"created_at"`
	LastUsedAt *time.Time `db:"last_used_at"`
	RevokedAt  *time.Time `db:"revoked_at"`
}

const tokenCols = `id, user_id, name, kind, prefix, last4, scopes, servers, expires_at, created_at, last_used_at, revoked_at`

// NewToken is what CreateToken stores. Hash is the SHA-256 of the plaintext,
// which the store never sees.
type NewToken struct {
	UserID    int64
	Name      string
	Kind      string
	Prefix    string
	Last4     string
	Hash      []byte
	Scopes    []string
	Servers   []string
	ExpiresAt time.Time
}

// CreateToken stores a token's hash and metadata.
func (s *Store) CreateToken(ctx context.Context, a Actor, n NewToken) (Token, error) {
	var t Token
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, `INSERT INTO tokens (user_id, name, kind, prefix, last4, hash, scopes, servers, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING `+tokenCols,
			n.UserID, n.Name, n.Kind, n.Prefix, n.Last4, n.Hash, n.Scopes, n.Servers, n.ExpiresAt)
		var err error
		if t, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Token]); err != nil {
			return err
		}
		return record(ctx, tx, a, "token.create", tokenTarget(t.ID), map[string]any{"kind": t.Kind, "user_id": t.UserID})
	})
	return t, err
}

func tokenTarget(id int64) string { return "token/" + strconv.FormatInt(id, 10) }

// TokenWithUser is a token found by its hash, with the user it acts for.
type TokenWithUser struct {
	Token
	User User
}

// LookupToken finds a token by the hash of its plaintext. Expiry and
// revocation are the caller's to judge, so it can say which applied.
func (s *Store) LookupToken(ctx context.Context, hash []byte) (TokenWithUser, error) {
	var t TokenWithUser
	err := s.pool.QueryRow(ctx, `SELECT t.id, t.user_id, t.name, t.kind, t.prefix, t.last4, t.scopes, t.servers,
			t.expires_at, t.created_at, t.last_used_at, t.revoked_at,
			u.id, u.email, u.name, u.role, u.disabled, u.builtin, u.created_at
		FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.hash = $1`, hash).Scan(
		&t.ID, &t.UserID, &t.Name, &t.Kind, &t.Prefix, &t.Last4, &t.Scopes, &t.Servers,
		&t.ExpiresAt, &t.CreatedAt, &t.LastUsedAt, &t.RevokedAt,
		&t.User.ID, &t.User.Email, &t.User.Name, &t.User.Role, &t.User.Disabled, &t.User.Builtin, &t.User.CreatedAt)
	return t, notFound(err)
}

// TouchToken records a use. It writes at most once a minute per token, so a
// busy token does not turn every request into a write.
func (s *Store) TouchToken(ctx context.Context, id int64) error {
	_, err := s.pool.Exec(ctx, `UPDATE tokens SET last_used_at = now()
		WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')`, id)
	return err
}

// ListTokens returns a user's tokens, or every token when userID is 0.
func (s *Store) ListTokens(ctx context.Context, userID int64) ([]Token, error) {
	rows, _ := s.pool.Query(ctx, `SELECT `+tokenCols+` FROM tokens WHERE $1 = 0 OR user_id = $1 ORDER BY id`, userID)
	return pgx.CollectRows(rows, pgx.RowToStructByName[Token])
}

// GetToken returns one token.
func (s *Store) GetToken(ctx context.Context, id int64) (Token, error) {
	rows, _ := s.pool.Query(ctx, `SELECT `+tokenCols+` FROM tokens WHERE id = $1`, id)
	t, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Token])
	return t, notFound(err)
}

// RevokeToken marks a token revoked; revoking twice is not an error.
func (s *Store) RevokeToken(ctx context.Context, a Actor, id int64) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1`, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return record(ctx, tx, a, "token.revoke", tokenTarget(id), nil)
	})
}
