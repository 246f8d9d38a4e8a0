// Command wrapper is the sandbox wrapper alone: what `mcpgate
// __sandbox_exec` runs, in a binary that carries nothing else. Tests and
// benchmarks use it to measure the wrapper without a large binary's start-up.
package main

import (
	"os"

	"github.com/mcpgate/mcpgate/sandbox"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != sandbox.ExecArg {
		os.Stderr.WriteString("usage: wrapper " + sandbox.ExecArg + " --policy-fd N -- command [args...]\n")
		os.Exit(2)
	}
	os.Exit(sandbox.Exec(os.Args[2:]))
}
