package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/keyring"
	"github.com/mcpgate/mcpgate/store"
	"github.com/mcpgate/mcpgate/store/storetest"
)

var db *storetest.DB

func TestMain(m *testing.M) {
	var err error
	db, err = storetest.NewDB(context.Background(), "store")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	db.Close()
	storetest.StopPrivate()
	os.Exit(code)
}

func newKeyring(t *testing.T) (*keyring.Keyring, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret.key")
	kr, err := keyring.Generate(path)
	if err != nil {
		t.Fatal(err)
	}
	return kr, path
}

var n int

func owner(t *testing.T, st *store.Store) int64 {
	t.Helper()
	n++
	u, err := st.CreateUser(context.Background(), store.Actor{}, fmt.Sprintf("o%d-%d@example.test", os.Getpid(), n), "", "member")
	if err != nil {
		t.Fatal(err)
	}
	return u.ID
}

func createServer(t *testing.T, st *store.Store, name string, env map[string]string) store.Server {
	t.Helper()
	srv, err := st.CreateServer(context.Background(), store.Actor{}, store.Server{
		Name: name, Protocol: "stdio", Command: "npx", Enabled: true, OwnerID: owner(t, st), Env: env, Headers: map[string]string{},
	})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func rawEnv(t *testing.T, name, key string) string {
	t.Helper()
	var v string
	if err := db.Pool.QueryRow(context.Background(), `SELECT env->>$2 FROM servers WHERE name = $1`, name, key).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// C2: sealed at rest with a key id, fresh nonce per write, no plaintext.
func TestC2SealedAtRest(t *testing.T) {
	kr, _ := newKeyring(t)
	st := store.New(db.Pool, kr)
	a := createServer(t, st, "c2-a", map[string]string{"TOKEN": "plain-secret-c2"})
	b := createServer(t, st, "c2-b", map[string]string{"TOKEN": "plain-secret-c2"})
	ra, rb := rawEnv(t, a.Name, "TOKEN"), rawEnv(t, b.Name, "TOKEN")
	if !strings.HasPrefix(ra, "v1:k1:") || ra == rb || strings.Contains(ra, "plain-secret") {
		t.Fatalf("stored values %q and %q", ra, rb)
	}
}

// C3/C4: a ciphertext moved to another row, or with one bit flipped, does
// not open; the error carries no secret.
func TestC3C4MovedOrTamperedFails(t *testing.T) {
	kr, _ := newKeyring(t)
	st := store.New(db.Pool, kr)
	a := createServer(t, st, "c3-a", map[string]string{"TOKEN": "secret-of-a-c3"})
	b := createServer(t, st, "c3-b", map[string]string{"TOKEN": "secret-of-b-c3"})
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `UPDATE servers SET env = (SELECT env FROM servers WHERE name = $1) WHERE name = $2`, a.Name, b.Name); err != nil {
		t.Fatal(err)
	}
	_, err := st.GetServer(ctx, store.Scope{All: true}, b.Name)
	if !errors.Is(err, store.ErrSecret) || strings.Contains(err.Error(), "secret-of") {
		t.Fatalf("moved ciphertext: %v", err)
	}
	raw := rawEnv(t, a.Name, "TOKEN")
	i := strings.LastIndex(raw, ":") + 3
	flipped := raw[:i] + string(raw[i]^1) + raw[i+1:]
	if _, err := db.Pool.Exec(ctx, `UPDATE servers SET env = jsonb_build_object('TOKEN', $2::text) WHERE name = $1`, a.Name, flipped); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetServer(ctx, store.Scope{All: true}, a.Name); !errors.Is(err, store.ErrSecret) {
		t.Fatalf("flipped bit: %v", err)
	}
	db.Pool.Exec(ctx, `DELETE FROM servers WHERE name IN ($1, $2)`, a.Name, b.Name)
}

// C5: with secrets under k1, rotate to k2: everything still reads, no row
// references k1 afterwards, and once k1 is retired a value still sealed
// under it fails closed.
func TestC5Rotation(t *testing.T) {
	ctx := context.Background()
	// Rotation covers every row: start from rows of this test's key only.
	if _, err := db.Pool.Exec(ctx, `DELETE FROM servers`); err != nil {
		t.Fatal(err)
	}
	kr, path := newKeyring(t)
	st := store.New(db.Pool, kr)
	const servers = 25
	for i := range servers {
		createServer(t, st, fmt.Sprintf("rot-%d", i), map[string]string{"A": fmt.Sprintf("a-%d", i), "B": "b"})
	}
	backup := rawEnv(t, "rot-0", "A")

	k2, err := kr.AddKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := kr.SetPrimary(k2); err != nil {
		t.Fatal(err)
	}
	if err := kr.Save(path); err != nil {
		t.Fatal(err)
	}
	// New writes use k2 at once.
	fresh := createServer(t, st, "rot-new", map[string]string{"A": "new"})
	if !strings.HasPrefix(rawEnv(t, fresh.Name, "A"), "v1:"+k2+":") {
		t.Fatalf("new write not under %s", k2)
	}
	// Resumable: a small batch size makes several transactions.
	n, err := st.RotateSecrets(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	if n < servers*2 {
		t.Fatalf("re-sealed %d values, want at least %d", n, servers*2)
	}
	if again, err := st.RotateSecrets(ctx, 7); err != nil || again != 0 {
		t.Fatalf("second run re-sealed %d (%v), want 0", again, err)
	}
	counts, err := st.SealedKeyCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if counts["k1"] != 0 || counts[k2] == 0 {
		t.Fatalf("key counts after rotation: %v", counts)
	}
	for i := range servers {
		srv, err := st.GetServer(ctx, store.Scope{All: true}, fmt.Sprintf("rot-%d", i))
		if err != nil || srv.Env["A"] != fmt.Sprintf("a-%d", i) {
			t.Fatalf("rot-%d after rotation: %v %v", i, srv.Env, err)
		}
	}
	if err := kr.Retire("k1"); err != nil {
		t.Fatal(err)
	}
	// A value restored from an old backup, under the retired key: refused.
	if _, err := db.Pool.Exec(ctx, `UPDATE servers SET env = jsonb_set(env, '{A}', to_jsonb($1::text)) WHERE name = 'rot-0'`, backup); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetServer(ctx, store.Scope{All: true}, "rot-0"); !errors.Is(err, store.ErrSecret) {
		t.Fatalf("value under a retired key: %v", err)
	}
	if _, err := kr.Open(backup, "servers/x/env/A"); !errors.Is(err, keyring.ErrKeyRetired) {
		t.Fatalf("keyring on a retired key: %v", err)
	}
}

// The retention job deletes old records only, and runs on one replica at a
// time: while another holds the job's lock, it skips.
func TestPruneActivity(t *testing.T) {
	ctx := context.Background()
	kr, _ := newKeyring(t)
	st := store.New(db.Pool, kr)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO activity (action, at) VALUES ('old', now() - interval '40 days'), ('old', now() - interval '31 days'), ('new', now())`); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('mcpgate.activity_retention'))`); err != nil {
		t.Fatal(err)
	}
	if n, ran, err := st.PruneActivity(ctx, 30*24*time.Hour); err != nil || ran || n != 0 {
		t.Fatalf("with the job held elsewhere: deleted %d, ran %v, %v", n, ran, err)
	}
	tx.Rollback(ctx)
	n, ran, err := st.PruneActivity(ctx, 30*24*time.Hour)
	if err != nil || !ran || n != 2 {
		t.Fatalf("prune: deleted %d, ran %v, %v; want 2", n, ran, err)
	}
	var left int
	db.Pool.QueryRow(ctx, `SELECT count(*) FROM activity WHERE action IN ('old', 'new')`).Scan(&left)
	if left != 1 {
		t.Fatalf("%d records left, want the new one", left)
	}
}
