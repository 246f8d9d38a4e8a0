package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is an upstream MCP server definition, secrets in clear: callers
// mask them before anything leaves the process.
type Server struct {
	ID          int64
	Name        string
	Protocol    string
	Command     string
	Args        []string
	Env         map[string]string
	URL         string
	Headers     map[string]string
	WorkingDir  string
	Enabled     bool
	Quarantined bool
	Shared      bool
	OwnerID     int64
	OwnerEmail  string
	Isolation   Isolation
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// Isolation holds the per-server isolation settings as stored. A nil pointer
// means "inherit the global setting".
type Isolation struct {
	EnabledOverride *bool
	ModeOverride    *string
	Image           *string
	NetworkMode     *string
	MemoryLimit     *string
	CPULimit        *float64
	ExtraArgs       map[string]any
}

// Scope says whose servers a query may touch: a member sees shared servers
// and their own; All (admins) sees every server.
type Scope struct {
	UserID int64
	All    bool
}

type serverRow struct {
	ID                       int64             `db:"id"`
	Name                     string            `db:"name"`
	Protocol                 string            `db:"protocol"`
	Command                  string            `db:"command"`
	Args                     []string          `db:"args"`
	Env                      map[string]string `db:"env"`
	URL                      string            `db:"url"`
	Headers                  map[string]string `db:"headers"`
	WorkingDir               string            `db:"working_dir"`
	Enabled                  bool              `db:"enabled"`
	Quarantined              bool              `db:"quarantined"`
	Shared                   bool              `db:"shared"`
	OwnerID                  int64             `db:"owner_id"`
	OwnerEmail               string            `db:"owner_email"`
	IsolationEnabledOverride *bool             `db:"isolation_enabled_override"`
	IsolationModeOverride    *string           `db:"isolation_mode_override"`
	IsolationImage           *string           `db:"isolation_image"`
	IsolationNetworkMode     *string           `db:"isolation_network_mode"`
	IsolationMemoryLimit     *string           `db:"isolation_memory_limit"`
	IsolationCPULimit        *float64          `db:"isolation_cpu_limit"`
	IsolationExtraArgs       map[string]any    `db:"isolation_extra_args"`
	CreatedAt                time.Time         `db:"created_at"`
	UpdatedAt                time.Time         `db:"updated_at"`
}

const serverSelect = `SELECT s.id, s.name, s.protocol, s.command, s.args, s.env, s.url, s.headers, s.working_dir,
	s.enabled, s.quarantined, s.shared, s.owner_id, u.email AS owner_email,
	s.isolation_enabled_override, s.isolation_mode_override, s.isolation_image, s.isolation_network_mode,
	s.isolation_memory_limit, s.isolation_cpu_limit, s.isolation_extra_args, s.created_at, s.updated_at
	FROM servers s JOIN users u ON u.id = s.owner_id`

const scopeWhere = `(@all OR s.shared OR s.owner_id = @user_id)`

func scopeArgs(sc Scope, more pgx.NamedArgs) pgx.NamedArgs {
	more["all"] = sc.All
	more["user_id"] = sc.UserID
	return more
}

// AAD strings bind each sealed value to its server row and field.
func envAAD(id int64, key string) string {
	return "servers/" + strconv.FormatInt(id, 10) + "/env/" + key
}
func headerAAD(id int64, key string) string {
	return "servers/" + strconv.FormatInt(id, 10) + "/headers/" + key
}
func urlAAD(id int64) string { return "servers/" + strconv.FormatInt(id, 10) + "/url" }

func (s *Store) openServer(r serverRow) (Server, error) {
	srv := Server{
		ID: r.ID, Name: r.Name, Protocol: r.Protocol, Command: r.Command, Args: r.Args,
		WorkingDir: r.WorkingDir, Enabled: r.Enabled, Quarantined: r.Quarantined, Shared: r.Shared,
		OwnerID: r.OwnerID, OwnerEmail: r.OwnerEmail, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		Isolation: Isolation{
			EnabledOverride: r.IsolationEnabledOverride, ModeOverride: r.IsolationModeOverride,
			Image: r.IsolationImage, NetworkMode: r.IsolationNetworkMode, MemoryLimit: r.IsolationMemoryLimit,
			CPULimit: r.IsolationCPULimit, ExtraArgs: r.IsolationExtraArgs,
		},
	}
	var err error
	if srv.Env, err = s.openMap(r.Env, func(k string) string { return envAAD(r.ID, k) }); err != nil {
		return Server{}, fmt.Errorf("server %q env: %w", r.Name, err)
	}
	if srv.Headers, err = s.openMap(r.Headers, func(k string) string { return headerAAD(r.ID, k) }); err != nil {
		return Server{}, fmt.Errorf("server %q headers: %w", r.Name, err)
	}
	if r.URL != "" {
		u, err := s.sealer.Open(r.URL, urlAAD(r.ID))
		if err != nil {
			return Server{}, fmt.Errorf("server %q url: %w", r.Name, ErrSecret)
		}
		srv.URL = string(u)
	}
	if srv.Args == nil {
		srv.Args = []string{}
	}
	return srv, nil
}

func (s *Store) openMap(sealed map[string]string, aad func(string) string) (map[string]string, error) {
	out := make(map[string]string, len(sealed))
	for k, v := range sealed {
		pt, err := s.sealer.Open(v, aad(k))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, ErrSecret)
		}
		out[k] = string(pt)
	}
	return out, nil
}

func (s *Store) sealMap(plain map[string]string, aad func(string) string) (map[string]string, error) {
	out := make(map[string]string, len(plain))
	for k, v := range plain {
		ct, err := s.sealer.Seal([]byte(v), aad(k))
		if err != nil {
			return nil, err
		}
		out[k] = ct
	}
	return out, nil
}

func (s *Store) collectServers(rows pgx.Rows) ([]Server, error) {
	rs, err := pgx.CollectRows(rows, pgx.RowToStructByName[serverRow])
	if err != nil {
		return nil, err
	}
	out := make([]Server, 0, len(rs))
	for _, r := range rs {
		srv, err := s.openServer(r)
		if err != nil {
			return nil, err
		}
		out = append(out, srv)
	}
	return out, nil
}

// ListServers returns the servers in scope, by name.
func (s *Store) ListServers(ctx context.Context, sc Scope) ([]Server, error) {
	rows, _ := s.pool.Query(ctx, serverSelect+` WHERE `+scopeWhere+` ORDER BY s.name`, scopeArgs(sc, pgx.NamedArgs{}))
	return s.collectServers(rows)
}

// GetServer returns one server in scope; one out of scope is ErrNotFound, so
// its existence does not leak.
func (s *Store) GetServer(ctx context.Context, sc Scope, name string) (Server, error) {
	rows, _ := s.pool.Query(ctx, serverSelect+` WHERE s.name = @name AND `+scopeWhere, scopeArgs(sc, pgx.NamedArgs{"name": name}))
	list, err := s.collectServers(rows)
	if err != nil {
		return Server{}, err
	}
	if len(list) == 0 {
		return Server{}, ErrNotFound
	}
	return list[0], nil
}

// CreateServer stores a new server; a taken name is ErrConflict.
func (s *Store) CreateServer(ctx context.Context, a Actor, srv Server) (Server, error) {
	var out Server
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The id is drawn first: it is part of every secret's AAD.
		if err := tx.QueryRow(ctx, `SELECT nextval(pg_get_serial_sequence('servers', 'id'))`).Scan(&srv.ID); err != nil {
			return err
		}
		if err := s.writeServer(ctx, tx, srv, true); err != nil {
			return err
		}
		var err error
		if out, err = s.getServerTx(ctx, tx, srv.ID); err != nil {
			return err
		}
		return s.serverChanged(ctx, tx, a, "server.create", out.Name)
	})
	if isUniqueViolation(err) {
		return Server{}, fmt.Errorf("server %q: %w", srv.Name, ErrConflict)
	}
	return out, err
}

// UpdateServer loads a server in scope under a row lock, lets change modify
// it (an error from change aborts with nothing written) and stores the result.
func (s *Store) UpdateServer(ctx context.Context, a Actor, sc Scope, name, action string, change func(*Server) error) (Server, error) {
	var out Server
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, serverSelect+` WHERE s.name = @name AND `+scopeWhere+` FOR UPDATE OF s`,
			scopeArgs(sc, pgx.NamedArgs{"name": name}))
		list, err := s.collectServers(rows)
		if err != nil {
			return err
		}
		if len(list) == 0 {
			return ErrNotFound
		}
		cur := list[0]
		if err := change(&cur); err != nil {
			return err
		}
		if err := s.writeServer(ctx, tx, cur, false); err != nil {
			return err
		}
		if out, err = s.getServerTx(ctx, tx, cur.ID); err != nil {
			return err
		}
		return s.serverChanged(ctx, tx, a, action, out.Name)
	})
	return out, err
}

// DeleteServer removes a server in scope.
func (s *Store) DeleteServer(ctx context.Context, a Actor, sc Scope, name string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM servers s WHERE s.name = @name AND `+scopeWhere, scopeArgs(sc, pgx.NamedArgs{"name": name}))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return s.serverChanged(ctx, tx, a, "server.delete", name)
	})
}

// RecordServerAction logs a lifecycle action (restart) that changes no row.
func (s *Store) RecordServerAction(ctx context.Context, a Actor, action, name string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return s.serverChanged(ctx, tx, a, action, name)
	})
}

func (s *Store) serverChanged(ctx context.Context, tx pgx.Tx, a Actor, action, name string) error {
	// Every replica LISTENs on this channel and reconciles its upstreams.
	if _, err := tx.Exec(ctx, `SELECT pg_notify('mcpgate_servers', $1)`, name); err != nil {
		return err
	}
	return record(ctx, tx, a, action, "server/"+name, nil)
}

func (s *Store) getServerTx(ctx context.Context, tx pgx.Tx, id int64) (Server, error) {
	rows, _ := tx.Query(ctx, serverSelect+` WHERE s.id = $1`, id)
	list, err := s.collectServers(rows)
	if err != nil {
		return Server{}, err
	}
	if len(list) == 0 {
		return Server{}, ErrNotFound
	}
	return list[0], nil
}

func (s *Store) writeServer(ctx context.Context, tx pgx.Tx, srv Server, insert bool) error {
	env, err := s.sealMap(srv.Env, func(k string) string { return envAAD(srv.ID, k) })
	if err != nil {
		return err
	}
	headers, err := s.sealMap(srv.Headers, func(k string) string { return headerAAD(srv.ID, k) })
	if err != nil {
		return err
	}
	var sealedURL string
	if srv.URL != "" {
		if sealedURL, err = s.sealer.Seal([]byte(srv.URL), urlAAD(srv.ID)); err != nil {
			return err
		}
	}
	if srv.Args == nil {
		srv.Args = []string{}
	}
	iso := srv.Isolation
	args := pgx.NamedArgs{
		"id": srv.ID, "name": srv.Name, "protocol": srv.Protocol, "command": srv.Command, "args": srv.Args,
		"env": env, "url": sealedURL, "headers": headers, "working_dir": srv.WorkingDir,
		"enabled": srv.Enabled, "quarantined": srv.Quarantined, "shared": srv.Shared, "owner_id": srv.OwnerID,
		"ieo": iso.EnabledOverride, "imo": iso.ModeOverride, "iimg": iso.Image, "inet": iso.NetworkMode,
		"imem": iso.MemoryLimit, "icpu": iso.CPULimit, "iextra": iso.ExtraArgs,
	}
	if insert {
		_, err = tx.Exec(ctx, `INSERT INTO servers (id, name, protocol, command, args, env, url, headers, working_dir,
				enabled, quarantined, shared, owner_id, isolation_enabled_override, isolation_mode_override,
				isolation_image, isolation_network_mode, isolation_memory_limit, isolation_cpu_limit, isolation_extra_args)
			VALUES (@id, @name, @protocol, @command, @args, @env, @url, @headers, @working_dir,
				@enabled, @quarantined, @shared, @owner_id, @ieo, @imo, @iimg, @inet, @imem, @icpu, @iextra)`, args)
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE servers SET protocol = @protocol, command = @command, args = @args, env = @env,
			url = @url, headers = @headers, working_dir = @working_dir, enabled = @enabled,
			quarantined = @quarantined, shared = @shared,
			isolation_enabled_override = @ieo, isolation_mode_override = @imo, isolation_image = @iimg,
			isolation_network_mode = @inet, isolation_memory_limit = @imem, isolation_cpu_limit = @icpu,
			isolation_extra_args = @iextra, updated_at = now()
		WHERE id = @id`, args)
	return err
}

// CountServers returns how many servers exist and how many are enabled.
func (s *Store) CountServers(ctx context.Context) (total, enabled int, err error) {
	err = s.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE enabled) FROM servers`).Scan(&total, &enabled)
	return total, enabled, err
}
