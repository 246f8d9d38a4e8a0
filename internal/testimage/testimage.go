// Package testimage builds small container images for tests through the
// Docker Engine API, from local files only: nothing is pulled.
package testimage

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"
)

// Client returns an Engine API client, or skips the test (fails it under
// MCPGATE_TEST_STRICT=1) when no engine answers.
func Client(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = cli.Ping(ctx)
		cancel()
	}
	if err != nil {
		if os.Getenv("MCPGATE_TEST_STRICT") == "1" {
			t.Fatalf("no Docker engine: %v", err)
		}
		t.Skipf("no Docker engine: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Scratch builds a FROM scratch image tagged ref holding files (name in the
// image → path on the host, made executable) with the given Dockerfile
// lines after FROM, and removes it when the test ends.
func Scratch(t testing.TB, cli *client.Client, ref string, files map[string]string, lines ...string) {
	t.Helper()
	df := "FROM scratch\n"
	for name := range files {
		df += fmt.Sprintf("COPY %s /%s\n", name, name)
	}
	for _, l := range lines {
		df += l + "\n"
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, mode int64, body []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		tw.Write(body)
	}
	add("Dockerfile", 0o644, []byte(df))
	for name, src := range files {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		add(name, 0o755, b)
	}
	tw.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	resp, err := cli.ImageBuild(ctx, &buf, build.ImageBuildOptions{
		Tags: []string{ref}, Remove: true, ForceRemove: true, NetworkMode: "none", Version: build.BuilderV1,
		Labels: map[string]string{"io.mcpgate.test": "true"},
	})
	if err != nil {
		t.Fatalf("building %s: %v", ref, err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var m jsonmessage.JSONMessage
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("building %s: %v", ref, err)
		}
		if m.Error != nil {
			t.Fatalf("building %s: %s", ref, m.Error.Message)
		}
	}
	t.Cleanup(func() {
		cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true, PruneChildren: true})
	})
}
