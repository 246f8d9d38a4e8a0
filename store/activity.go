package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Activity is one audit record: a change made through the API, or a tool call.
type Activity struct {
	ID         int64          `db:"id" json:"id"`
	At         time.Time      `db:"at" json:"at"`
	UserID     *int64         `db:"user_id" json:"user_id"`
	TokenID    *int64         `db:"token_id" json:"token_id"`
	Action     string         `db:"action" json:"action"`
	Target     string         `db:"target" json:"target"`
	Outcome    string         `db:"outcome" json:"outcome"`
	RequestID  string         `db:"request_id" json:"request_id"`
	Server     string         `db:"server" json:"server,omitempty"`
	Tool       string         `db:"tool" json:"tool,omitempty"`
	Variant    string         `db:"variant" json:"variant,omitempty"`
	DurationMS *int32         `db:"duration_ms" json:"duration_ms,omitempty"`
	Detail     map[string]any `db:"detail" json:"detail"`
}

// ActivityFilter narrows ListActivity; zero values do not filter.
type ActivityFilter struct {
	UserID int64
	Action string
	Server string
	Before int64 // id cursor: records older than this one
	Since  time.Time
	Limit  int
}

// ListActivity returns matching records, newest first.
func (s *Store) ListActivity(ctx context.Context, f ActivityFilter) ([]Activity, error) {
	if f.Limit <= 0 || f.Limit > 1000 {
		f.Limit = 100
	}
	rows, _ := s.pool.Query(ctx, `SELECT id, at, user_id, token_id, action, target, outcome, request_id,
			server, tool, variant, duration_ms, detail
		FROM activity
		WHERE (@user_id = 0 OR user_id = @user_id)
		  AND (@action = '' OR action = @action)
		  AND (@server = '' OR server = @server)
		  AND (@before = 0 OR id < @before)
		  AND (@since::timestamptz IS NULL OR at >= @since)
		ORDER BY id DESC LIMIT @limit`, pgx.NamedArgs{
		"user_id": f.UserID, "action": f.Action, "server": f.Server, "before": f.Before,
		"since": nullTime(f.Since), "limit": f.Limit,
	})
	return pgx.CollectRows(rows, pgx.RowToStructByName[Activity])
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// PruneActivity deletes activity older than keep, in batches. One replica
// does it at a time: a replica that finds the job running elsewhere skips
// it (ran is false).
func (s *Store) PruneActivity(ctx context.Context, keep time.Duration) (deleted int64, ran bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(hashtext('mcpgate.activity_retention'))`).Scan(&ran); err != nil || !ran {
			return err
		}
		for {
			tag, err := tx.Exec(ctx, `DELETE FROM activity WHERE id IN (
				SELECT id FROM activity WHERE at < now() - make_interval(secs => $1) LIMIT 5000)`, keep.Seconds())
			if err != nil {
				return err
			}
			deleted += tag.RowsAffected()
			if tag.RowsAffected() < 5000 {
				return nil
			}
		}
	})
	return deleted, ran, err
}
