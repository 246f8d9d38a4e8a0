package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// RotatingSealer is a Sealer that can tell a value sealed under a key other
// than its primary.
type RotatingSealer interface {
	Sealer
	NeedsRotation(sealed string) bool
}

// RotateSecrets re-seals, under the primary key, every server secret sealed
// under another key: batch rows at a time, each batch in its own
// transaction, skipping rows another rotator holds. It can stop anywhere
// and be run again; it returns how many values it re-sealed.
func (s *Store) RotateSecrets(ctx context.Context, batch int) (int, error) {
	rs, ok := s.sealer.(RotatingSealer)
	if !ok {
		return 0, fmt.Errorf("rotating secrets: the sealer cannot rotate")
	}
	if batch <= 0 {
		batch = 100
	}
	total := 0
	var after int64
	for {
		var (
			n, last int64
			count   int
		)
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			rows, _ := tx.Query(ctx, `SELECT id, env, headers, url FROM servers WHERE id > $1 ORDER BY id LIMIT $2
				FOR UPDATE SKIP LOCKED`, after, batch)
			type row struct {
				id           int64
				env, headers map[string]string
				url          string
			}
			var list []row
			for rows.Next() {
				var r row
				if err := rows.Scan(&r.id, &r.env, &r.headers, &r.url); err != nil {
					return err
				}
				list = append(list, r)
			}
			if err := rows.Err(); err != nil {
				return err
			}
			for _, r := range list {
				last, n = r.id, n+1
				changed := false
				reseal := func(v, aad string) (string, error) {
					if v == "" || !rs.NeedsRotation(v) {
						return v, nil
					}
					pt, err := rs.Open(v, aad)
					if err != nil {
						return "", fmt.Errorf("server %d: %w", r.id, ErrSecret)
					}
					changed = true
					count++
					return rs.Seal(pt, aad)
				}
				for k, v := range r.env {
					nv, err := reseal(v, envAAD(r.id, k))
					if err != nil {
						return err
					}
					r.env[k] = nv
				}
				for k, v := range r.headers {
					nv, err := reseal(v, headerAAD(r.id, k))
					if err != nil {
						return err
					}
					r.headers[k] = nv
				}
				u, err := reseal(r.url, urlAAD(r.id))
				if err != nil {
					return err
				}
				if changed {
					if _, err := tx.Exec(ctx, `UPDATE servers SET env = $2, headers = $3, url = $4 WHERE id = $1`,
						r.id, r.env, r.headers, u); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		total += count
		if n == 0 {
			return total, nil
		}
		after = last
	}
}

// RotateAllSecrets re-seals every secret the store keeps: server
// definitions and upstream OAuth.
func (s *Store) RotateAllSecrets(ctx context.Context, batch int) (int, error) {
	n, err := s.RotateSecrets(ctx, batch)
	if err != nil {
		return n, err
	}
	m, err := s.RotateOAuthSecrets(ctx, batch)
	return n + m, err
}

// SealedKeyCounts counts the stored secret values per key id, so an
// operator can see when a key is no longer referenced and can be retired.
func (s *Store) SealedKeyCounts(ctx context.Context) (map[string]int, error) {
	counts, err := s.serverKeyCounts(ctx)
	if err != nil {
		return nil, err
	}
	return counts, s.AddOAuthSealedKeyCounts(ctx, counts)
}

func (s *Store) serverKeyCounts(ctx context.Context) (map[string]int, error) {
	rows, _ := s.pool.Query(ctx, `
		SELECT v FROM servers, jsonb_each_text(env) AS e(k, v)
		UNION ALL SELECT v FROM servers, jsonb_each_text(headers) AS h(k, v)
		UNION ALL SELECT url FROM servers WHERE url <> ''`)
	vals, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, v := range vals {
		parts := strings.SplitN(v, ":", 3)
		if len(parts) == 3 {
			out[parts[1]]++
		}
	}
	return out, nil
}
