package harness

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/spacesandbox/space/internal/testenv"
)

// TestUnmountUnder: mounts nested below a suite's directory (a name with
// a space included) are all gone after unmountUnder, and one beside it
// stays.
func TestUnmountUnder(t *testing.T) {
	testenv.NeedRoot(t, "mounting")
	base := t.TempDir()
	dir, beside := filepath.Join(base, "suite dir"), filepath.Join(base, "suite dir2")
	points := []string{dir, filepath.Join(dir, "a"), filepath.Join(dir, "a", "b"), beside}
	for _, p := range points {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("tmpfs", p, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { syscall.Unmount(beside, syscall.MNT_DETACH) })
	if err := unmountUnder(dir); err != nil {
		t.Fatal(err)
	}
	info, _ := os.ReadFile("/proc/self/mountinfo")
	if n := strings.Count(string(info), `suite\040dir `) + strings.Count(string(info), `suite\040dir/`); n != 0 {
		t.Errorf("%d mounts left under %s", n, dir)
	}
	if !strings.Contains(string(info), `suite\040dir2 `) {
		t.Errorf("the mount beside it (%s) was removed too", beside)
	}
}
