package migrations_test

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mcpgate/mcpgate/migrations"
	"github.com/mcpgate/mcpgate/store/storetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	storetest.StopPrivate()
	os.Exit(code)
}

func emptyPool(t *testing.T, name string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	url, drop, err := storetest.EmptyDB(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drop)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// H7: an empty database migrates cleanly and a second run is a no-op.
func TestH7UpOnEmptyThenRerun(t *testing.T) {
	ctx := context.Background()
	pool := emptyPool(t, "mig_rerun")
	names, err := migrations.Names()
	if err != nil {
		t.Fatal(err)
	}
	applied, err := migrations.Up(ctx, pool)
	if err != nil {
		t.Fatalf("first run: %v", err)
	}
	if len(applied) != len(names) {
		t.Fatalf("first run applied %v, want all of %v", applied, names)
	}
	again, err := migrations.Up(ctx, pool)
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	if len(again) != 0 {
		t.Fatalf("second run applied %v, want nothing", again)
	}
	pending, err := migrations.Pending(ctx, pool)
	if err != nil || len(pending) != 0 {
		t.Fatalf("Pending = %v, %v; want none", pending, err)
	}
}

// H7: two replicas migrating at the same moment apply each file exactly once.
func TestH7ConcurrentUp(t *testing.T) {
	ctx := context.Background()
	pool := emptyPool(t, "mig_concurrent")
	a, err := pgxpool.New(ctx, pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var wg sync.WaitGroup
	results := make([][]string, 2)
	errs := make([]error, 2)
	start := make(chan struct{})
	for i, p := range []*pgxpool.Pool{pool, a} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = migrations.Up(ctx, p)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("runner %d: %v", i, err)
		}
	}
	names, _ := migrations.Names()
	if got := len(results[0]) + len(results[1]); got != len(names) {
		t.Fatalf("applied %v and %v; want %d files in all, each once", results[0], results[1], len(names))
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil || n != len(names) {
		t.Fatalf("schema_migrations has %d rows (%v), want %d", n, err, len(names))
	}
}
