// Package storetest gives each test package a database of its own, cloned
// from a template that holds the current migrations. With
// MCPGATE_TEST_DATABASE_URL unset it starts a private PostgreSQL (the same
// mechanism `mcpgate serve` uses) for the test process.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mcpgate/mcpgate/migrations"
	"github.com/mcpgate/mcpgate/pglocal"
)

// DB is one test package's database.
type DB struct {
	Pool *pgxpool.Pool
	URL  string
	// AdminURL reaches the maintenance database of the same server.
	AdminURL string
	drop     func()
}

// Close drops the database (and stops a private server).
func (d *DB) Close() { d.drop() }

var (
	privateOnce sync.Once
	private     *pglocal.Server
	privateDir  string
	privateErr  error
)

// BaseURL returns the maintenance URL of the test server, starting a private
// one when MCPGATE_TEST_DATABASE_URL is unset.
func BaseURL(ctx context.Context) (string, error) {
	if u := os.Getenv("MCPGATE_TEST_DATABASE_URL"); u != "" {
		return u, nil
	}
	privateOnce.Do(func() {
		// Short path: the socket lives in it and must fit in 107 bytes.
		privateDir, privateErr = os.MkdirTemp("", "mcpg-")
		if privateErr != nil {
			return
		}
		// The server may run as another user, who must be able to pass through.
		if privateErr = os.Chmod(privateDir, 0o711); privateErr != nil {
			return
		}
		private, privateErr = pglocal.Start(ctx, pglocal.Options{
			Dir:          filepath.Join(privateDir, "pg"),
			PasswordFile: filepath.Join(privateDir, "pw"),
			Durable:      false,
		})
	})
	if privateErr != nil {
		return "", privateErr
	}
	return private.AdminURL(), nil
}

// StopPrivate stops the private server, if this process started one.
func StopPrivate() {
	if private != nil {
		private.Stop()
		os.RemoveAll(privateDir)
	}
}

// NewDB clones a fresh database for the named test package.
func NewDB(ctx context.Context, pkg string) (*DB, error) {
	base, err := BaseURL(ctx)
	if err != nil {
		return nil, err
	}
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return nil, fmt.Errorf("connecting to the test server: %w", err)
	}
	defer admin.Close(ctx)
	tmpl, err := ensureTemplate(ctx, admin, base)
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("test_%s_%d", pkg, os.Getpid())
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return nil, err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{tmpl}.Sanitize()); err != nil {
		return nil, fmt.Errorf("cloning %s: %w", tmpl, err)
	}
	url, err := withDatabase(base, name)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	return &DB{Pool: pool, URL: url, AdminURL: base, drop: func() {
		pool.Close()
		if c, err := pgx.Connect(context.Background(), base); err == nil {
			c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
			c.Close(context.Background())
		}
	}}, nil
}

// EmptyDB creates a database with no schema at all, for migration tests.
func EmptyDB(ctx context.Context, name string) (url string, drop func(), err error) {
	base, err := BaseURL(ctx)
	if err != nil {
		return "", nil, err
	}
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", nil, err
	}
	defer admin.Close(ctx)
	name = fmt.Sprintf("%s_%d", name, os.Getpid())
	id := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)"); err != nil {
		return "", nil, err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+id); err != nil {
		return "", nil, err
	}
	url, err = withDatabase(base, name)
	return url, func() {
		if c, err := pgx.Connect(context.Background(), base); err == nil {
			c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)")
			c.Close(context.Background())
		}
	}, err
}

func ensureTemplate(ctx context.Context, admin *pgx.Conn, base string) (string, error) {
	fp, err := migrations.Fingerprint()
	if err != nil {
		return "", err
	}
	tmpl := "tmpl_" + fp
	// Test binaries of several packages run at once: one builds, the others wait.
	if _, err := admin.Exec(ctx, `SELECT pg_advisory_lock(hashtext('mcpgate.testtemplate'))`); err != nil {
		return "", err
	}
	defer admin.Exec(context.Background(), `SELECT pg_advisory_unlock(hashtext('mcpgate.testtemplate'))`)
	var isTemplate bool
	err = admin.QueryRow(ctx, `SELECT datistemplate FROM pg_database WHERE datname = $1`, tmpl).Scan(&isTemplate)
	if err == nil && isTemplate {
		return tmpl, nil
	}
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", err
	}
	id := pgx.Identifier{tmpl}.Sanitize()
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+id); err != nil {
		return "", err
	}
	url, err := withDatabase(base, tmpl)
	if err != nil {
		return "", err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	_, err = migrations.Up(ctx, conn)
	conn.Close(ctx)
	if err != nil {
		return "", fmt.Errorf("migrating the template: %w", err)
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+id+" IS_TEMPLATE true"); err != nil {
		return "", err
	}
	return tmpl, nil
}

func withDatabase(base, name string) (string, error) {
	// Rewrite the path only; host, user, password and query stay as given.
	u, err := parseURL(base)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}
