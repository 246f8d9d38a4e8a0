package store

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// OAuth token modes of a server.
const (
	OAuthPerUser = "per-user"
	OAuthShared  = "shared"
)

// OAuth token states as stored; "none" (no row) is the caller's to report.
const (
	OAuthAuthorized = "authorized"
	OAuthExpired    = "expired"
	OAuthError      = "error"
)

// ServerOAuth is a server's upstream OAuth configuration, secrets in clear:
// callers show ClientSecret only as "set" or "not set".
type ServerOAuth struct {
	ServerID     int64
	Mode         string // OAuthPerUser or OAuthShared
	ClientID     string // pre-registered client; "" means dynamic registration
	ClientSecret string
	Scopes       []string
	// Registration and Discovery are opaque JSON owned by the oauth package.
	Registration []byte
	Discovery    []byte
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// OAuthFlow is an authorization in progress, between start and callback.
type OAuthFlow struct {
	StateHash   []byte // SHA-256 of the state; the state itself is never stored
	ServerID    int64
	UserID      int64
	Shared      bool   // the token goes to the server's shared slot
	BindingHash []byte // SHA-256 of the browser binding cookie's value
	URLHash     []byte // SHA-256 of the server URL it was started for
	Verifier    string
	RedirectURI string
	CreatedAt   time.Time
	ExpiresAt   time.Time
}

// OAuthToken is one stored upstream token, in clear. UserID 0 is the
// server's shared token.
type OAuthToken struct {
	ServerID     int64
	UserID       int64
	AccessToken  string
	RefreshToken string
	TokenType    string
	Scope        string
	Expiry       time.Time // zero: the server gave no lifetime
	Status       string
	LastError    string // never holds a token or secret
	URLHash      []byte // SHA-256 of the server URL it was issued for
	UpdatedAt    time.Time
}

func oauthAAD(serverID int64, column string) string {
	return "server_oauth/" + strconv.FormatInt(serverID, 10) + "/" + column
}

func flowAAD(stateHash []byte) string {
	return "oauth_flows/" + hex.EncodeToString(stateHash) + "/verifier"
}

func tokenAAD(serverID, userID int64, column string) string {
	who := "shared"
	if userID != 0 {
		who = strconv.FormatInt(userID, 10)
	}
	return "oauth_tokens/" + strconv.FormatInt(serverID, 10) + "/" + who + "/" + column
}

// sealOpt seals a value, keeping "" as "none".
func (s *Store) sealOpt(v []byte, aad string) (string, error) {
	if len(v) == 0 {
		return "", nil
	}
	return s.sealer.Seal(v, aad)
}

func (s *Store) openOpt(v, aad string) ([]byte, error) {
	if v == "" {
		return nil, nil
	}
	pt, err := s.sealer.Open(v, aad)
	if err != nil {
		// The keyring's error names no value, but keep the contract narrow.
		return nil, ErrSecret
	}
	return pt, nil
}

// rowQuerier is a pool or a transaction. Code holding a transaction reads
// through it, never through the pool: a second connection per caller can
// exhaust the pool when every connection's holder waits for another.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// GetServerOAuth returns a server's OAuth configuration; ErrNotFound when the
// server has none.
func (s *Store) GetServerOAuth(ctx context.Context, serverID int64) (ServerOAuth, error) {
	return s.getServerOAuth(ctx, s.pool, serverID, false)
}

func (s *Store) getServerOAuth(ctx context.Context, q rowQuerier, serverID int64, forUpdate bool) (ServerOAuth, error) {
	var (
		c                 ServerOAuth
		secret, reg, disc string
	)
	lock := ""
	if forUpdate {
		lock = " FOR UPDATE"
	}
	err := q.QueryRow(ctx, `SELECT server_id, mode, client_id, client_secret, scopes, registration, discovery,
			created_at, updated_at
		FROM server_oauth WHERE server_id = $1`+lock, serverID).
		Scan(&c.ServerID, &c.Mode, &c.ClientID, &secret, &c.Scopes, &reg, &disc, &c.CreatedAt, &c.UpdatedAt)
	if err != nil {
		return ServerOAuth{}, notFound(err)
	}
	sec, err := s.openOpt(secret, oauthAAD(serverID, "client_secret"))
	if err != nil {
		return ServerOAuth{}, fmt.Errorf("server %d oauth client secret: %w", serverID, err)
	}
	c.ClientSecret = string(sec)
	if c.Registration, err = s.openOpt(reg, oauthAAD(serverID, "registration")); err != nil {
		return ServerOAuth{}, fmt.Errorf("server %d oauth registration: %w", serverID, err)
	}
	if c.Discovery, err = s.openOpt(disc, oauthAAD(serverID, "discovery")); err != nil {
		return ServerOAuth{}, fmt.Errorf("server %d oauth discovery: %w", serverID, err)
	}
	if c.Scopes == nil {
		c.Scopes = []string{}
	}
	return c, nil
}

// PutServerOAuth stores a server's OAuth configuration (mode, client,
// scopes). A change of client id, client secret or mode drops what was
// learnt for the old one (registration, discovery) and, for a mode change,
// every token, since a per-user token must not become the shared one or the
// other way round.
func (s *Store) PutServerOAuth(ctx context.Context, a Actor, c ServerOAuth) error {
	if c.Mode != OAuthPerUser && c.Mode != OAuthShared {
		return fmt.Errorf("oauth mode %q: must be %q or %q", c.Mode, OAuthPerUser, OAuthShared)
	}
	secret, err := s.sealOpt([]byte(c.ClientSecret), oauthAAD(c.ServerID, "client_secret"))
	if err != nil {
		return err
	}
	if c.Scopes == nil {
		c.Scopes = []string{}
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var (
			oldMode, oldClient, oldSecret string
			exists                        = true
		)
		err := tx.QueryRow(ctx, `SELECT mode, client_id, client_secret FROM server_oauth WHERE server_id = $1 FOR UPDATE`,
			c.ServerID).Scan(&oldMode, &oldClient, &oldSecret)
		if errors.Is(err, pgx.ErrNoRows) {
			exists = false
		} else if err != nil {
			return err
		}
		sameSecret := false
		if exists {
			old, err := s.openOpt(oldSecret, oauthAAD(c.ServerID, "client_secret"))
			sameSecret = err == nil && string(old) == c.ClientSecret
		}
		keepLearnt := exists && oldClient == c.ClientID && sameSecret && oldMode == c.Mode
		if _, err := tx.Exec(ctx, `INSERT INTO server_oauth (server_id, mode, client_id, client_secret, scopes)
				VALUES (@id, @mode, @client_id, @secret, @scopes)
			ON CONFLICT (server_id) DO UPDATE SET mode = @mode, client_id = @client_id, client_secret = @secret,
				scopes = @scopes, updated_at = now(),
				registration = CASE WHEN @keep THEN server_oauth.registration ELSE '' END,
				discovery = CASE WHEN @keep THEN server_oauth.discovery ELSE '' END`,
			pgx.NamedArgs{"id": c.ServerID, "mode": c.Mode, "client_id": c.ClientID, "secret": secret,
				"scopes": c.Scopes, "keep": keepLearnt}); err != nil {
			return err
		}
		if exists && oldMode != c.Mode {
			if _, err := tx.Exec(ctx, `DELETE FROM oauth_tokens WHERE server_id = $1`, c.ServerID); err != nil {
				return err
			}
		}
		return record(ctx, tx, a, "server.oauth.configure", oauthTarget(ctx, tx, c.ServerID),
			map[string]any{"mode": c.Mode, "client_secret_set": c.ClientSecret != ""})
	})
}

// oauthTarget names a server in the activity log as server changes do,
// "server/<name>", falling back to the id.
func oauthTarget(ctx context.Context, tx pgx.Tx, serverID int64) string {
	var name string
	if err := tx.QueryRow(ctx, `SELECT name FROM servers WHERE id = $1`, serverID).Scan(&name); err != nil {
		return "server/" + strconv.FormatInt(serverID, 10)
	}
	return "server/" + name
}

// UpdateOAuthDiscovery runs learn on a server's OAuth configuration under
// a row lock and stores the registration and discovery JSON it returns, so
// that two flows started at once do not register two clients (the second
// would orphan the first's code). learn may do network I/O.
func (s *Store) UpdateOAuthDiscovery(ctx context.Context, serverID int64,
	learn func(cur ServerOAuth) (registration, discovery []byte, err error)) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		cur, err := s.getServerOAuth(ctx, tx, serverID, true)
		if err != nil {
			return err
		}
		registration, discovery, err := learn(cur)
		if err != nil {
			return err
		}
		reg, err := s.sealOpt(registration, oauthAAD(serverID, "registration"))
		if err != nil {
			return err
		}
		disc, err := s.sealOpt(discovery, oauthAAD(serverID, "discovery"))
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE server_oauth SET registration = $2, discovery = $3, updated_at = now()
			WHERE server_id = $1`, serverID, reg, disc)
		return err
	})
}

// DeleteServerOAuth removes a server's OAuth configuration, its flows and
// its tokens.
func (s *Store) DeleteServerOAuth(ctx context.Context, a Actor, serverID int64) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, q := range []string{
			`DELETE FROM oauth_tokens WHERE server_id = $1`,
			`DELETE FROM oauth_flows WHERE server_id = $1`,
			`DELETE FROM server_oauth WHERE server_id = $1`,
		} {
			if _, err := tx.Exec(ctx, q, serverID); err != nil {
				return err
			}
		}
		return record(ctx, tx, a, "server.oauth.delete", oauthTarget(ctx, tx, serverID), nil)
	})
}

// CreateOAuthFlow stores a flow in progress.
func (s *Store) CreateOAuthFlow(ctx context.Context, f OAuthFlow) error {
	if len(f.StateHash) != 32 {
		return errors.New("oauth flow: state hash must be 32 bytes")
	}
	verifier, err := s.sealer.Seal([]byte(f.Verifier), flowAAD(f.StateHash))
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO oauth_flows (state_hash, server_id, user_id, shared, binding_hash, url_hash,
			verifier, redirect_uri, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		f.StateHash, f.ServerID, f.UserID, f.Shared, f.BindingHash, f.URLHash, verifier, f.RedirectURI, f.CreatedAt, f.ExpiresAt)
	return err
}

// TakeOAuthFlow deletes and returns the flow with this state hash, so that a
// state can be used once, whoever presents it; ErrNotFound if there is none.
// Whether it has expired is the caller's to check.
func (s *Store) TakeOAuthFlow(ctx context.Context, stateHash []byte) (OAuthFlow, error) {
	var (
		f        OAuthFlow
		verifier string
	)
	err := s.pool.QueryRow(ctx, `DELETE FROM oauth_flows WHERE state_hash = $1
		RETURNING state_hash, server_id, user_id, shared, binding_hash, url_hash, verifier, redirect_uri, created_at,
			expires_at`, stateHash).
		Scan(&f.StateHash, &f.ServerID, &f.UserID, &f.Shared, &f.BindingHash, &f.URLHash, &verifier, &f.RedirectURI,
			&f.CreatedAt, &f.ExpiresAt)
	if err != nil {
		return OAuthFlow{}, notFound(err)
	}
	v, err := s.sealer.Open(verifier, flowAAD(f.StateHash))
	if err != nil {
		return OAuthFlow{}, fmt.Errorf("oauth flow verifier: %w", ErrSecret)
	}
	f.Verifier = string(v)
	return f, nil
}

// DeleteExpiredOAuthFlows removes flows that expired before now.
func (s *Store) DeleteExpiredOAuthFlows(ctx context.Context, now time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM oauth_flows WHERE expires_at <= $1`, now)
	return tag.RowsAffected(), err
}

func userKeyArg(userID int64) any {
	if userID == 0 {
		return nil
	}
	return userID
}

const oauthTokenCols = `server_id, coalesce(user_id, 0), access_token, refresh_token, token_type, scope, expiry,
	status, last_error, url_hash, updated_at`

func (s *Store) scanToken(row pgx.Row) (OAuthToken, error) {
	var (
		t               OAuthToken
		access, refresh string
		expiry          *time.Time
	)
	if err := row.Scan(&t.ServerID, &t.UserID, &access, &refresh, &t.TokenType, &t.Scope, &expiry,
		&t.Status, &t.LastError, &t.URLHash, &t.UpdatedAt); err != nil {
		return OAuthToken{}, notFound(err)
	}
	if expiry != nil {
		t.Expiry = *expiry
	}
	a, err := s.openOpt(access, tokenAAD(t.ServerID, t.UserID, "access"))
	if err != nil {
		return OAuthToken{}, fmt.Errorf("oauth access token: %w", err)
	}
	r, err := s.openOpt(refresh, tokenAAD(t.ServerID, t.UserID, "refresh"))
	if err != nil {
		return OAuthToken{}, fmt.Errorf("oauth refresh token: %w", err)
	}
	t.AccessToken, t.RefreshToken = string(a), string(r)
	return t, nil
}

// GetOAuthToken returns the token of a user (0: the shared one) for a
// server; ErrNotFound if there is none.
func (s *Store) GetOAuthToken(ctx context.Context, serverID, userID int64) (OAuthToken, error) {
	return s.scanToken(s.pool.QueryRow(ctx, `SELECT `+oauthTokenCols+` FROM oauth_tokens
		WHERE server_id = $1 AND user_key = $2`, serverID, userID))
}

// OAuthTokenState is a token's state without the token, for listings.
type OAuthTokenState struct {
	ServerID   int64
	UserID     int64 // 0: shared
	Status     string
	Expiry     time.Time // zero: none
	HasRefresh bool
	LastError  string
	URLHash    []byte
}

// ListOAuthTokenStates returns, for every server with OAuth configured, the
// state of the token a call by userID would use: the shared one for shared
// servers, the user's own otherwise. A server without a token is absent.
func (s *Store) ListOAuthTokenStates(ctx context.Context, userID int64) ([]OAuthTokenState, error) {
	rows, _ := s.pool.Query(ctx, `SELECT t.server_id, coalesce(t.user_id, 0), t.status, t.expiry, t.refresh_token <> '', t.last_error, t.url_hash
		FROM server_oauth c JOIN oauth_tokens t ON t.server_id = c.server_id
		WHERE t.user_key = CASE WHEN c.mode = 'shared' THEN 0 ELSE $1::bigint END`, userID)
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (OAuthTokenState, error) {
		var (
			st     OAuthTokenState
			expiry *time.Time
		)
		err := row.Scan(&st.ServerID, &st.UserID, &st.Status, &expiry, &st.HasRefresh, &st.LastError, &st.URLHash)
		if expiry != nil {
			st.Expiry = *expiry
		}
		return st, err
	})
}

func (s *Store) tokenArgs(t OAuthToken) (pgx.NamedArgs, error) {
	access, err := s.sealOpt([]byte(t.AccessToken), tokenAAD(t.ServerID, t.UserID, "access"))
	if err != nil {
		return nil, err
	}
	refresh, err := s.sealOpt([]byte(t.RefreshToken), tokenAAD(t.ServerID, t.UserID, "refresh"))
	if err != nil {
		return nil, err
	}
	var expiry any
	if !t.Expiry.IsZero() {
		expiry = t.Expiry
	}
	if t.Status == "" {
		t.Status = OAuthAuthorized
	}
	if t.TokenType == "" {
		t.TokenType = "Bearer"
	}
	return pgx.NamedArgs{"server_id": t.ServerID, "user_id": userKeyArg(t.UserID), "user_key": t.UserID,
		"access": access, "refresh": refresh, "token_type": t.TokenType, "scope": t.Scope, "expiry": expiry,
		"status": t.Status, "last_error": t.LastError, "url_hash": t.URLHash}, nil
}

const tokenUpsert = `INSERT INTO oauth_tokens (server_id, user_id, access_token, refresh_token, token_type, scope,
		expiry, status, last_error, url_hash)
	VALUES (@server_id, @user_id, @access, @refresh, @token_type, @scope, @expiry, @status, @last_error, @url_hash)
	ON CONFLICT (server_id, user_key) DO UPDATE SET access_token = @access, refresh_token = @refresh,
		token_type = @token_type, scope = @scope, expiry = @expiry, status = @status, last_error = @last_error,
		url_hash = @url_hash, updated_at = now()`

// PutOAuthToken stores a token (a new one replaces the old).
func (s *Store) PutOAuthToken(ctx context.Context, t OAuthToken) error {
	args, err := s.tokenArgs(t)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, tokenUpsert, args)
	return err
}

// DeleteOAuthToken forgets the token of a user (0: the shared one); no
// token is not an error.
func (s *Store) DeleteOAuthToken(ctx context.Context, a Actor, serverID, userID int64) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM oauth_tokens WHERE server_id = $1 AND user_key = $2`, serverID, userID)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		return record(ctx, tx, a, "server.oauth.forget", oauthTarget(ctx, tx, serverID),
			map[string]any{"shared": userID == 0})
	})
}

// UpdateOAuthToken runs change on the stored token under a row lock, so that
// of several replicas refreshing the same token only one talks to the
// authorization server and the others see its result. change may do network
// I/O; it gets the server's OAuth configuration too, read in the same
// transaction, and returns the token to store (nil: store nothing) and an
// error to return after that token is committed, so a failure can be
// recorded.
func (s *Store) UpdateOAuthToken(ctx context.Context, serverID, userID int64,
	change func(cur OAuthToken, cfg ServerOAuth) (*OAuthToken, error)) (OAuthToken, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return OAuthToken{}, err
	}
	defer tx.Rollback(ctx)
	cur, err := s.scanToken(tx.QueryRow(ctx, `SELECT `+oauthTokenCols+` FROM oauth_tokens
		WHERE server_id = $1 AND user_key = $2 FOR UPDATE`, serverID, userID))
	if err != nil {
		return OAuthToken{}, err
	}
	cfg, err := s.getServerOAuth(ctx, tx, serverID, false)
	if err != nil {
		return OAuthToken{}, err
	}
	next, changeErr := change(cur, cfg)
	if next == nil {
		return cur, changeErr
	}
	next.ServerID, next.UserID = serverID, userID
	if next.URLHash == nil {
		next.URLHash = cur.URLHash
	}
	args, err := s.tokenArgs(*next)
	if err != nil {
		return OAuthToken{}, err
	}
	if _, err := tx.Exec(ctx, `UPDATE oauth_tokens SET access_token = @access, refresh_token = @refresh,
			token_type = @token_type, scope = @scope, expiry = @expiry, status = @status, last_error = @last_error,
			updated_at = now()
		WHERE server_id = @server_id AND user_key = @user_key`, args); err != nil {
		return OAuthToken{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return OAuthToken{}, err
	}
	return *next, changeErr
}

// GetOAuthTokenFor returns the token a call by userID to this server uses:
// the shared one when the server's mode is shared, the user's own otherwise.
// ErrNotFound when the server has no OAuth configuration or no such token.
func (s *Store) GetOAuthTokenFor(ctx context.Context, serverID, userID int64) (OAuthToken, error) {
	return s.scanToken(s.pool.QueryRow(ctx, `SELECT `+oauthTokenCols+` FROM oauth_tokens
		WHERE server_id = $1 AND user_key = (
			SELECT CASE WHEN mode = 'shared' THEN 0 ELSE $2::bigint END FROM server_oauth WHERE server_id = $1)`,
		serverID, userID))
}

// OAuthServerName returns the name of a server by id, for the end of an
// authorization flow, which knows only the id.
func (s *Store) OAuthServerName(ctx context.Context, serverID int64) (string, error) {
	var name string
	err := s.pool.QueryRow(ctx, `SELECT name FROM servers WHERE id = $1`, serverID).Scan(&name)
	return name, notFound(err)
}

// RotateOAuthSecrets re-seals under the primary key every OAuth secret
// (client secrets, registrations, discovery, tokens, flow verifiers) sealed
// under another key, batch rows at a time, each batch in its own
// transaction; rows another transaction holds (a refresh in progress) are
// skipped and caught by the next run. It returns how many values it
// re-sealed. RotateSecrets' caller runs it too.
func (s *Store) RotateOAuthSecrets(ctx context.Context, batch int) (int, error) {
	rs, ok := s.sealer.(RotatingSealer)
	if !ok {
		return 0, fmt.Errorf("rotating OAuth secrets: the sealer cannot rotate")
	}
	if batch <= 0 {
		batch = 100
	}
	type table struct {
		query  string // selects key text, aad prefix parts, sealed columns; $1 = after key, $2 = limit
		update string // $1.. = sealed columns, then the key
		cols   []string
	}
	tables := []table{
		{`SELECT server_id::text, server_id, 0::bigint, client_secret, registration, discovery FROM server_oauth
			WHERE server_id::text > $1 ORDER BY server_id::text LIMIT $2 FOR UPDATE SKIP LOCKED`,
			`UPDATE server_oauth SET client_secret = $1, registration = $2, discovery = $3 WHERE server_id::text = $4`,
			[]string{"client_secret", "registration", "discovery"}},
		{`SELECT server_id::text || '/' || user_key::text, server_id, user_key, access_token, refresh_token FROM oauth_tokens
			WHERE server_id::text || '/' || user_key::text > $1 ORDER BY 1 LIMIT $2 FOR UPDATE SKIP LOCKED`,
			`UPDATE oauth_tokens SET access_token = $1, refresh_token = $2 WHERE server_id::text || '/' || user_key::text = $3`,
			[]string{"access", "refresh"}},
		{`SELECT encode(state_hash, 'hex'), 0::bigint, 0::bigint, verifier FROM oauth_flows
			WHERE encode(state_hash, 'hex') > $1 ORDER BY 1 LIMIT $2 FOR UPDATE SKIP LOCKED`,
			`UPDATE oauth_flows SET verifier = $1 WHERE encode(state_hash, 'hex') = $2`,
			[]string{"verifier"}},
	}
	total := 0
	for ti, tb := range tables {
		after := ""
		for {
			var n, count int
			err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, tb.query, after, batch)
				if err != nil {
					return err
				}
				type row struct {
					key            string
					serverID, user int64
					vals           []string
				}
				var list []row
				for rows.Next() {
					r := row{vals: make([]string, len(tb.cols))}
					dest := []any{&r.key, &r.serverID, &r.user}
					for i := range r.vals {
						dest = append(dest, &r.vals[i])
					}
					if err := rows.Scan(dest...); err != nil {
						return err
					}
					list = append(list, r)
				}
				if err := rows.Err(); err != nil {
					return err
				}
				for _, r := range list {
					after, n = r.key, n+1
					changed := false
					args := make([]any, 0, len(r.vals)+1)
					for i, v := range r.vals {
						if v == "" || !rs.NeedsRotation(v) {
							args = append(args, v)
							continue
						}
						var aad string
						switch ti {
						case 0:
							aad = oauthAAD(r.serverID, tb.cols[i])
						case 1:
							aad = tokenAAD(r.serverID, r.user, tb.cols[i])
						default:
							h, err := hex.DecodeString(r.key)
							if err != nil {
								return err
							}
							aad = flowAAD(h)
						}
						pt, err := rs.Open(v, aad)
						if err != nil {
							return fmt.Errorf("oauth secret %s: %w", tb.cols[i], ErrSecret)
						}
						nv, err := rs.Seal(pt, aad)
						if err != nil {
							return err
						}
						args = append(args, nv)
						changed = true
						count++
					}
					if changed {
						if _, err := tx.Exec(ctx, tb.update, append(args, r.key)...); err != nil {
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
				break
			}
		}
	}
	return total, nil
}

// AddOAuthSealedKeyCounts adds to counts the OAuth secrets per key id, for
// SealedKeyCounts' caller: a key is retirable only when no value here
// references it either.
func (s *Store) AddOAuthSealedKeyCounts(ctx context.Context, counts map[string]int) error {
	rows, _ := s.pool.Query(ctx, `
		SELECT v FROM server_oauth, unnest(ARRAY[client_secret, registration, discovery]) AS v WHERE v <> ''
		UNION ALL SELECT v FROM oauth_tokens, unnest(ARRAY[access_token, refresh_token]) AS v WHERE v <> ''
		UNION ALL SELECT verifier FROM oauth_flows`)
	vals, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, v := range vals {
		if parts := strings.SplitN(v, ":", 3); len(parts) == 3 {
			counts[parts[1]]++
		}
	}
	return nil
}
