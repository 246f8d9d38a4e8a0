package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// healthcheckCmd asks the gateway this container runs for /healthz (or
// /readyz with --ready) on loopback and fails unless it answers 200. It is
// the image's HEALTHCHECK, so the image needs no curl.
func healthcheckCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	ready := fs.Bool("ready", false, "check /readyz (the database too) instead of /healthz")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	addr, err := loopbackAddr(cmp.Or(os.Getenv("MCPGATE_LISTEN"), ":8080"))
	if err != nil {
		return err
	}
	path := "/healthz"
	if *ready {
		path = "/readyz"
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	// A proxy configured for the upstream calls must not see this request.
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("requesting %s: %w", path, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", path, resp.Status)
	}
	return nil
}

// loopbackAddr turns the listen address into one this host can dial: an
// unspecified or empty host becomes the loopback address of its family.
func loopbackAddr(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil || port == "" || port == "0" {
		return "", errors.New("MCPGATE_LISTEN: needs a fixed port for the health check")
	}
	switch ip := net.ParseIP(host); {
	case host == "" || host == "0.0.0.0":
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return net.JoinHostPort(host, port), nil
}
