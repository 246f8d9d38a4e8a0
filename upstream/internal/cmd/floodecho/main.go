// Command floodecho is an MCP stdio server for the upstream package's tests:
// while it answers calls it writes -mb megabytes to stderr, to show that a
// flooding child neither grows the gateway's memory nor stalls its stdout.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type echoIn struct {
	Text string `json:"text" jsonschema:"the text to send back"`
}

type empty struct{}

func main() {
	mb := flag.Int("mb", 100, "megabytes to write to stderr")
	flag.Parse()

	var written atomic.Int64
	go func() {
		pad := strings.Repeat("x", 1000)
		total := int64(*mb) << 20
		for n := 0; written.Load() < total; n++ {
			k, err := fmt.Fprintf(os.Stderr, "flood %09d %s\n", n, pad)
			if err != nil {
				return
			}
			written.Add(int64(k))
		}
		fmt.Fprintln(os.Stderr, "flood done")
	}()

	srv := mcp.NewServer(&mcp.Implementation{Name: "floodecho", Version: "1.0.0"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "Echo the text back"},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, empty, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, empty{}, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "flooded", Description: "Bytes written to stderr so far"},
		func(context.Context, *mcp.CallToolRequest, empty) (*mcp.CallToolResult, empty, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint(written.Load())}}}, empty{}, nil
		})
	if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
