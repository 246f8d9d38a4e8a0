package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/mcpgate/mcpgate/internal/testbin"
)

// The engine tests share one FROM scratch image holding /mcpecho (the
// entrypoint) and /probe, built once per test process through the Engine
// API from a tar context made here: nothing is pulled.
var (
	imageOnce sync.Once
	imageRef  string
	imageErr  error
	imageCli  *Runner
)

func TestMain(m *testing.M) {
	code := m.Run()
	if imageRef != "" && imageCli != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, _ = imageCli.cli.ImageRemove(ctx, imageRef, image.RemoveOptions{Force: true, PruneChildren: true})
		cancel()
		imageCli.Close()
	}
	os.Exit(code)
}

// needEngine skips (or, under MCPGATE_TEST_STRICT=1, fails) a test when no
// engine answers.
func needEngine(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("MCPGATE_TEST_STRICT") == "1" {
		t.Fatalf("docker engine required (MCPGATE_TEST_STRICT=1): %v", err)
	}
	t.Skipf("no docker engine (run .ci/dockerd.sh and export DOCKER_HOST): %v", err)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// engineRunner returns a runner with a fresh replica id for the engine named
// by the environment, skipping the test when there is none.
func engineRunner(t testing.TB) *Runner {
	t.Helper()
	r, err := New("test-"+randomHex(6), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if _, err := r.Probe(context.Background()); err != nil {
		needEngine(t, err)
	}
	return r
}

// testImage returns the shared test image, building it on first use.
func testImage(t testing.TB) string {
	t.Helper()
	imageOnce.Do(func() {
		echo := testbin.Build(t, "internal/cmd/mcpecho")
		probe := testbin.Build(t, "docker/internal/probe")
		r, err := New("test-image", nil)
		if err != nil {
			imageErr = err
			return
		}
		imageCli = r
		ref := "mcpgate-dockertest:" + randomHex(6)
		imageErr = buildImage(context.Background(), r, ref, map[string]string{"mcpecho": echo, "probe": probe},
			"FROM scratch\nCOPY mcpecho probe /\nUSER 65534:65534\nENTRYPOINT [\"/mcpecho\"]\n")
		if imageErr == nil {
			imageRef = ref
		}
	})
	if imageErr != nil {
		t.Fatalf("building test image: %v", imageErr)
	}
	return imageRef
}

func buildImage(ctx context.Context, r *Runner, ref string, files map[string]string, dockerfile string) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, mode int64, body []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(body))}); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	if err := add("Dockerfile", 0o644, []byte(dockerfile)); err != nil {
		return err
	}
	for name, src := range files {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := add(name, 0o755, b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	resp, err := r.cli.ImageBuild(ctx, &buf, build.ImageBuildOptions{
		Tags: []string{ref}, Remove: true, ForceRemove: true, NetworkMode: "none",
		Labels: map[string]string{"io.mcpgate.test": "true"},
	})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var m jsonmessage.JSONMessage
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if m.Error != nil {
			return fmt.Errorf("image build: %s", m.Error.Message)
		}
	}
}

// startT starts a container and makes sure the test leaves nothing behind.
func startT(t testing.TB, r *Runner, spec Spec) *Container {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := r.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start(%s): %v", spec.Server, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("cleanup Stop: %v", err)
		}
	})
	return c
}

// waitExit waits for the container's exit with a deadline.
func waitExit(t testing.TB, c *Container, d time.Duration) error {
	t.Helper()
	select {
	case <-c.Exited():
		return c.Wait()
	case <-time.After(d):
		t.Fatalf("container %s did not exit within %v", shortID(c.ID()), d)
		return nil
	}
}

// labelled lists the containers carrying label key=value, running or not.
func labelled(t testing.TB, r *Runner, key, value string) []container.Summary {
	t.Helper()
	list, err := r.cli.ContainerList(context.Background(), container.ListOptions{
		All: true, Filters: filters.NewArgs(filters.Arg("label", key+"="+value)),
	})
	if err != nil {
		t.Fatalf("listing containers: %v", err)
	}
	return list
}
