package interpreter

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestCanEnter: a directory the kernels' user cannot reach is told apart
// from other start failures (a 400 naming it, not a 500), by the mode
// bits of the directory and of every one above it.
func TestCanEnter(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{filepath.Dir(root), root} { // t.TempDir makes them 0700
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mk := func(path string, mode os.FileMode, uid, gid int) string {
		t.Helper()
		p := filepath.Join(root, path)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, uid, gid); err != nil {
			t.Skipf("chown needs root: %v", err)
		}
		return p
	}
	open := mk("open", 0o755, 0, 0)
	private := mk("private", 0o700, 0, 0)
	below := filepath.Join(private, "below")
	if err := os.Mkdir(below, 0o777); err != nil {
		t.Fatal(err)
	}
	own := mk("own", 0o700, 1000, 1000)
	group := mk("group", 0o710, 0, 1000)
	user := &syscall.Credential{Uid: 1000, Gid: 1000}
	for _, tc := range []struct {
		dir  string
		cred *syscall.Credential
		want bool
	}{
		{open, user, true},
		{private, user, false},
		{below, user, false}, // open itself, under a directory it cannot search
		{own, user, true},
		{group, user, true},
		{group, &syscall.Credential{Uid: 1001, Gid: 1001}, false},
		{private, &syscall.Credential{Uid: 0, Gid: 0}, true},
		{filepath.Join(root, "missing"), user, false},
	} {
		if got := canEnter(tc.dir, tc.cred); got != tc.want {
			t.Errorf("canEnter(%s, uid %d) = %v, want %v", tc.dir, tc.cred.Uid, got, tc.want)
		}
	}
}
