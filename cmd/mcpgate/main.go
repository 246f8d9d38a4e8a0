// Command mcpgate is the team-shared MCP gateway: `mcpgate serve` runs it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/mcpgate/mcpgate/sandbox"
)

func main() {
	// The sandbox wrapper runs before anything else: it must not start
	// goroutines, open files or read the gateway's configuration.
	if len(os.Args) > 1 && os.Args[1] == "__sandbox_exec" {
		os.Exit(sandbox.Exec(os.Args[2:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		args = []string{"help"}
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "mcpgate: unknown command %q\n\n", args[0])
		usage()
		return 2
	}
	if err := cmd.run(ctx, args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "mcpgate %s: %v\n", args[0], err)
		return 1
	}
	return 0
}
