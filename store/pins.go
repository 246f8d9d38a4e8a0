package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// ToolPin is the approved fingerprint of one tool of a server.
type ToolPin struct {
	Server     string    `db:"server"`
	Tool       string    `db:"tool"`
	Pin        string    `db:"pin"`
	ApprovedAt time.Time `db:"approved_at"`
	ApprovedBy *int64    `db:"approved_by"`
}

// ListPins returns every approved pin, by server name and tool name.
func (s *Store) ListPins(ctx context.Context) (map[string]map[string]string, error) {
	rows, _ := s.pool.Query(ctx, `SELECT s.name, p.tool, p.pin FROM tool_pins p JOIN servers s ON s.id = p.server_id`)
	out := map[string]map[string]string{}
	var server, tool, pin string
	_, err := pgx.ForEachRow(rows, []any{&server, &tool, &pin}, func() error {
		m := out[server]
		if m == nil {
			m = map[string]string{}
			out[server] = m
		}
		m[tool] = pin
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ServerPins returns the approved pins of one server, by tool name.
func (s *Store) ServerPins(ctx context.Context, name string) ([]ToolPin, error) {
	rows, _ := s.pool.Query(ctx, `SELECT s.name AS server, p.tool, p.pin, p.approved_at, p.approved_by
		FROM tool_pins p JOIN servers s ON s.id = p.server_id WHERE s.name = $1 ORDER BY p.tool`, name)
	return pgx.CollectRows(rows, pgx.RowToStructByName[ToolPin])
}

// ApproveServer replaces the pins of a server in scope with pins (tool name
// to pin), lifts its quarantine and notifies every replica, all in one
// transaction, so no replica ever sees an approved server with stale pins.
func (s *Store) ApproveServer(ctx context.Context, a Actor, sc Scope, name string, pins map[string]string) (Server, error) {
	var out Server
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var id int64
		err := tx.QueryRow(ctx, `SELECT s.id FROM servers s WHERE s.name = @name AND `+scopeWhere+` FOR UPDATE OF s`,
			scopeArgs(sc, pgx.NamedArgs{"name": name})).Scan(&id)
		if err != nil {
			return notFound(err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM tool_pins WHERE server_id = $1`, id); err != nil {
			return err
		}
		tools := make([]string, 0, len(pins))
		hashes := make([]string, 0, len(pins))
		for t, p := range pins {
			tools = append(tools, t)
			hashes = append(hashes, p)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO tool_pins (server_id, tool, pin, approved_by)
			SELECT $1, t, p, (SELECT id FROM users WHERE id = $4) FROM unnest($2::text[], $3::text[]) AS x(t, p)`,
			id, tools, hashes, a.userArg()); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE servers SET quarantined = false, updated_at = now() WHERE id = $1`, id); err != nil {
			return err
		}
		if out, err = s.getServerTx(ctx, tx, id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_notify('mcpgate_servers', $1)`, name); err != nil {
			return err
		}
		return record(ctx, tx, a, "server.approve", "server/"+name, map[string]any{"tools": len(pins)})
	})
	return out, err
}
