// Command mcpgate-sandbox is the sandbox wrapper alone: what `mcpgate
// __sandbox_exec` runs, in a binary that carries nothing else, so a
// sandboxed child does not pay for the gateway's start-up (about 30 ms).
// mcpgate uses it when it lies next to the mcpgate binary.
package main

import (
	"os"

	"github.com/mcpgate/mcpgate/sandbox"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != sandbox.ExecArg {
		os.Stderr.WriteString("usage: mcpgate-sandbox " + sandbox.ExecArg + " --policy-fd N -- command [args...]\n")
		os.Exit(2)
	}
	os.Exit(sandbox.Exec(os.Args[2:]))
}
