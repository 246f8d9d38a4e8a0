package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/mcpgate/mcpgate/apikey"
	"github.com/mcpgate/mcpgate/config"
	"github.com/mcpgate/mcpgate/doctor"
	"github.com/mcpgate/mcpgate/server"
	"github.com/mcpgate/mcpgate/store"
	"github.com/mcpgate/mcpgate/upstream"
)

type command struct {
	summary string
	run     func(ctx context.Context, args []string) error
}

var commands map[string]command

func init() {
	commands = map[string]command{
		"serve":       {"run the gateway", serve},
		"migrate":     {"apply database migrations and exit", migrate},
		"version":     {"print the version", func(context.Context, []string) error { fmt.Println(server.Version); return nil }},
		"user":        {"break-glass: `user create --email E [--role admin|member] [--name N]`", userCmd},
		"token":       {"break-glass: `token create --email E [--kind personal|agent] [--name N] [--expires-in 30d]`", tokenCmd},
		"doctor":      {"check the deployment; `--json` for scripts; exits 1 when anything is wrong", doctorCmd},
		"secrets":     {"secret key rotation: `secrets status | add-key | rotate | retire KEY_ID`", secretsCmd},
		"healthcheck": {"exit 0 when this host's gateway answers /healthz (`--ready`: /readyz)", healthcheckCmd},
		"help":        {"show this help", func(context.Context, []string) error { usage(); return nil }},
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: mcpgate <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(os.Stderr, "\nConfiguration comes from MCPGATE_* environment variables; see the README.")
}

func serve(ctx context.Context, _ []string) error {
	// Grandchildren orphaned by a stopped server (npx → node) are adopted
	// and reaped here, even without an init process in the container.
	if err := upstream.BecomeSubreaper(); err != nil {
		return err
	}
	return server.Run(ctx, os.Getenv, os.Stderr)
}

// openStore opens the database the way serve does, joining a private
// PostgreSQL that a running gateway owns instead of starting a second one.
func openStore(ctx context.Context) (*store.Store, func(), error) {
	cfg, err := config.Load(os.Getenv, os.Geteuid())
	if err != nil {
		return nil, nil, err
	}
	log := server.NewLogger(io.Discard, "error")
	db, err := server.OpenDatabase(ctx, cfg, log, true)
	if err != nil {
		return nil, nil, err
	}
	sealer, err := server.LoadSecretKey(cfg, log)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return store.New(db.Pool, sealer), db.Close, nil
}

func migrate(ctx context.Context, _ []string) error {
	cfg, err := config.Load(os.Getenv, os.Geteuid())
	if err != nil {
		return err
	}
	db, err := server.OpenDatabase(ctx, cfg, server.NewLogger(os.Stderr, cfg.LogLevel), true)
	if err != nil {
		return err
	}
	db.Close()
	return nil
}

var cliActor = store.Actor{RequestID: "cli"}

func userCmd(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "create" {
		return errors.New("usage: mcpgate user create --email E [--role admin|member] [--name N]")
	}
	fs := flag.NewFlagSet("user create", flag.ContinueOnError)
	email := fs.String("email", "", "e-mail address (required)")
	name := fs.String("name", "", "display name")
	role := fs.String("role", "member", "admin or member")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *email == "" || (*role != "admin" && *role != "member") {
		return errors.New("--email is required and --role is admin or member")
	}
	st, closeDB, err := openStore(ctx)
	if err != nil {
		return err
	}
	defer closeDB()
	u, err := st.CreateUser(ctx, cliActor, *email, *name, *role)
	if err != nil {
		return err
	}
	fmt.Printf("created user %d (%s, %s)\n", u.ID, u.Email, u.Role)
	return nil
}

func tokenCmd(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "create" {
		return errors.New("usage: mcpgate token create --email E [--kind personal|agent] [--name N] [--expires-in 30d]")
	}
	fs := flag.NewFlagSet("token create", flag.ContinueOnError)
	email := fs.String("email", "", "the user's e-mail address (required)")
	kind := fs.String("kind", apikey.Personal, "personal or agent")
	name := fs.String("name", "break-glass", "token name")
	ttl := fs.Duration("expires-in", 30*24*time.Hour, "lifetime, at most 8760h")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *email == "" || (*kind != apikey.Personal && *kind != apikey.Agent) || *ttl <= 0 || *ttl > 365*24*time.Hour {
		return errors.New("--email is required, --kind is personal or agent, --expires-in at most 8760h")
	}
	st, closeDB, err := openStore(ctx)
	if err != nil {
		return err
	}
	defer closeDB()
	u, err := st.GetUserByEmail(ctx, *email)
	if err != nil {
		return fmt.Errorf("user %s: %w", *email, err)
	}
	key, err := apikey.New(*kind)
	if err != nil {
		return err
	}
	scopes := []string{"read", "write", "destructive"}
	if *kind == apikey.Agent {
		scopes = []string{"read"}
	}
	t, err := st.CreateToken(ctx, store.Actor{UserID: u.ID, RequestID: "cli"}, store.NewToken{
		UserID: u.ID, Name: *name, Kind: *kind, Prefix: key.Display, Last4: key.Last4, Hash: key.Hash[:],
		Scopes: scopes, Servers: []string{"*"}, ExpiresAt: time.Now().Add(*ttl).UTC().Truncate(time.Second),
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "created %s token %d for %s, expires %s; it is shown once:\n", t.Kind, t.ID, u.Email, t.ExpiresAt.Format(time.RFC3339))
	fmt.Println(key.Plain)
	return nil
}

func doctorCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := config.Load(os.Getenv, os.Geteuid())
	if err != nil {
		return err
	}
	log := server.NewLogger(io.Discard, "error")
	in := doctor.Inputs{Config: cfg, DockerSocket: server.DockerSocket()}
	db, err := server.OpenDatabase(ctx, cfg, log, true)
	if err != nil {
		in.StoreErr = err
	} else {
		defer db.Close()
		if sealer, err := server.LoadSecretKey(cfg, log); err == nil {
			in.Store = store.New(db.Pool, sealer)
		} else {
			in.StoreErr = err
		}
	}
	in.Host, in.DockerAPI = server.ProbeHost(ctx, "doctor", log)
	rep := doctor.Run(ctx, in)
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		for _, c := range rep.Checks {
			fmt.Printf("%-5s %-24s %s\n", c.Status, c.Name, c.Detail)
		}
	}
	if !rep.OK {
		return errors.New("problems found")
	}
	return nil
}

func secretsCmd(ctx context.Context, args []string) error {
	usage := errors.New("usage: mcpgate secrets status | add-key | rotate [--batch N] | retire KEY_ID")
	if len(args) == 0 {
		return usage
	}
	cfg, err := config.Load(os.Getenv, os.Geteuid())
	if err != nil {
		return err
	}
	log := server.NewLogger(io.Discard, "error")
	kf, err := server.LoadSecretKey(cfg, log)
	if err != nil {
		return err
	}
	kr := kf.Keyring()
	switch args[0] {
	case "add-key":
		id, err := kr.AddKey()
		if err != nil {
			return err
		}
		if err := kr.SetPrimary(id); err != nil {
			return err
		}
		if err := kr.Save(cfg.SecretKeyFile); err != nil {
			return err
		}
		fmt.Printf("key %s is the primary; new secrets use it. Run `mcpgate secrets rotate` to re-encrypt the others.\n", id)
		return nil
	case "status", "rotate", "retire":
	default:
		return usage
	}
	db, err := server.OpenDatabase(ctx, cfg, log, true)
	if err != nil {
		return err
	}
	defer db.Close()
	st := store.New(db.Pool, kf)
	switch args[0] {
	case "rotate":
		fs := flag.NewFlagSet("secrets rotate", flag.ContinueOnError)
		batch := fs.Int("batch", 100, "rows per transaction")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		n, err := st.RotateAllSecrets(ctx, *batch)
		fmt.Printf("re-encrypted %d values under %s\n", n, kr.Primary())
		return err
	case "retire":
		if len(args) != 2 {
			return usage
		}
		counts, err := st.SealedKeyCounts(ctx)
		if err != nil {
			return err
		}
		if c := counts[args[1]]; c > 0 {
			return fmt.Errorf("key %s still seals %d values: run `mcpgate secrets rotate` first", args[1], c)
		}
		if err := kr.Retire(args[1]); err != nil {
			return err
		}
		return kr.Save(cfg.SecretKeyFile)
	}
	counts, err := st.SealedKeyCounts(ctx)
	if err != nil {
		return err
	}
	for _, k := range kr.Keys() {
		fmt.Printf("%-8s %-8s %d values\n", k.ID, k.State, counts[k.ID])
	}
	return nil
}
