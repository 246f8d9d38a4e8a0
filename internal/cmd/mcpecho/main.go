// Command mcpecho is a small MCP server used by mcpgate's tests and benchmarks.
// It speaks MCP over stdio by default, or Streamable HTTP with -http ADDR.
//
// Its tools cover each annotation class the gateway gates on: echo (read-only),
// add_note (write, not destructive), delete_notes (destructive by default),
// and sleep (read-only, for calls that outlive a crash or a shutdown).
// MCPECHO_DESCRIPTION_SUFFIX changes the echo tool's description, which lets
// tests stage a tool that changes after approval.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type echoIn struct {
	Text string `json:"text" jsonschema:"the text to send back"`
}

type noteIn struct {
	Note string `json:"note" jsonschema:"the note to keep"`
}

type sleepIn struct {
	Millis int `json:"millis" jsonschema:"how long to sleep, in milliseconds"`
}

type empty struct{}

func main() {
	httpAddr := flag.String("http", "", "serve Streamable HTTP on this address instead of stdio")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	srv := newServer()
	if *httpAddr == "" {
		if err := srv.Run(ctx, &mcp.StdioTransport{}); err != nil && ctx.Err() == nil {
			log.Fatal(err)
		}
		return
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := &http.Server{Addr: *httpAddr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		hs.Close()
	}()
	if err := hs.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}

func newServer() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "mcpecho", Version: "1.0.0"}, nil)
	var (
		mu    sync.Mutex
		notes []string
	)
	notDestructive := false

	mcp.AddTool(srv, &mcp.Tool{
		Name:        "echo",
		Description: "Echo the given text back to the caller unchanged" + os.Getenv("MCPECHO_DESCRIPTION_SUFFIX"),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, empty, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, empty{}, nil
	})

	mcp.AddTool(srv, &mcp.Tool{
		Name:        "add_note",
		Description: "Store a short note in memory",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &notDestructive},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in noteIn) (*mcp.CallToolResult, empty, error) {
		mu.Lock()
		notes = append(notes, in.Note)
		n := len(notes)
		mu.Unlock()
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%d notes", n)}}}, empty{}, nil
	})

	mcp.AddTool(srv, &mcp.Tool{
		Name:        "delete_notes",
		Description: "Delete every stored note",
	}, func(_ context.Context, _ *mcp.CallToolRequest, _ empty) (*mcp.CallToolResult, empty, error) {
		mu.Lock()
		notes = nil
		mu.Unlock()
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deleted"}}}, empty{}, nil
	})

	mcp.AddTool(srv, &mcp.Tool{
		Name:        "sleep",
		Description: "Wait for the given number of milliseconds, then answer",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in sleepIn) (*mcp.CallToolResult, empty, error) {
		// Tests watch the server's log for this line to know a call is in flight.
		fmt.Fprintf(os.Stderr, "sleep: started %d ms\n", in.Millis)
		select {
		case <-time.After(time.Duration(in.Millis) * time.Millisecond):
		case <-ctx.Done():
			return nil, empty{}, ctx.Err()
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "slept"}}}, empty{}, nil
	})
	return srv
}
