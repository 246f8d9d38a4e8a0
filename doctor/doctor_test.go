package doctor

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// canConnect follows the kernel's rule for a pathname socket: write
// permission for the owner, the group, or others, as the uid falls.
func TestCanConnect(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown of the test sockets needs root") // the table below is about other uids than ours
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	sock := func(name string, mode os.FileMode, uid, gid int) string {
		p := filepath.Join(dir, name)
		ln, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	private := sock("private", 0o600, 0, 0)
	group := sock("group", 0o660, 0, 65534)
	world := sock("world", 0o666, 0, 0)
	theirs := sock("theirs", 0o600, 65534, 65534)
	for _, tt := range []struct {
		path string
		uid  int
		want bool
	}{
		{private, 65534, false},
		{private, 0, true},
		{group, 65534, true}, // the sandbox uid's gid equals its uid
		{group, 1000, false},
		{world, 65534, true},
		{theirs, 65534, true},
		{filepath.Join(dir, "missing"), 65534, false},
	} {
		if got := canConnect(tt.path, tt.uid); got != tt.want {
			t.Errorf("canConnect(%s, %d) = %v, want %v", filepath.Base(tt.path), tt.uid, got, tt.want)
		}
	}
}
