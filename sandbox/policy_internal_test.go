package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestReadGrants checks the entry-by-entry grant list: siblings along the
// data dir's path are granted, the data dir and its ancestors never, nor a
// sibling that is a symlink leading back to an ancestor or into the data dir.
func TestReadGrants(t *testing.T) {
	base := t.TempDir()
	data := filepath.Join(base, "srv", "data")
	for _, d := range []string{data, filepath.Join(base, "srv", "other"), filepath.Join(base, "lib")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "srv", "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"up": base, "in": data, "fine": filepath.Join(base, "lib")} {
		if err := os.Symlink(target, filepath.Join(base, "srv", name)); err != nil {
			t.Fatal(err)
		}
	}

	grants, err := readGrants(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/etc", "/usr", filepath.Join(base, "lib"), filepath.Join(base, "srv", "other"),
		filepath.Join(base, "srv", "file"), filepath.Join(base, "srv", "fine")} {
		if !slices.Contains(grants, want) {
			t.Errorf("%s is not granted", want)
		}
	}
	for _, g := range grants {
		r, err := filepath.EvalSymlinks(g)
		if err != nil {
			t.Fatal(err)
		}
		if isAncestorOrSelf(r, data) || isAncestorOrSelf(data, r) {
			t.Errorf("grant %s (%s) covers the data dir", g, r)
		}
	}
}

func TestChildEnv(t *testing.T) {
	d := Dirs{Home: "/d/home", Tmp: "/d/tmp"}
	env := ChildEnv(map[string]string{"API_KEY": "k", "HOME": "/elsewhere", "LANG": "de_DE.UTF-8"}, d)
	slices.Sort(env)
	want := []string{"API_KEY=k", "HOME=/d/home", "LANG=de_DE.UTF-8", "PATH=" + DefaultPath, "TMPDIR=/d/tmp"}
	if !slices.Equal(env, want) {
		t.Errorf("ChildEnv = %q, want %q", env, want)
	}
}

func TestAvailable(t *testing.T) {
	abi, err := ABI()
	if err != nil {
		if _, ok := Available(1); ok {
			t.Fatalf("Available reports Landlock although ABI() fails: %v", err)
		}
		if os.Getenv("MCPGATE_TEST_STRICT") == "1" {
			t.Fatalf("no Landlock here: %v", err)
		}
		t.Skipf("no Landlock here: %v", err)
	}
	t.Logf("Landlock ABI %d", abi)
	if got, ok := Available(abi); !ok || got != abi {
		t.Errorf("Available(%d) = %d, %v; want %d, true", abi, got, ok, abi)
	}
	if _, ok := Available(abi + 1); ok {
		t.Errorf("Available(%d) is true on an ABI %d kernel", abi+1, abi)
	}
}
