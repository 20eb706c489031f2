package template

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"log/slog"
)

// Several daemons may share a templates directory (the system test suites
// run side by side): one starting up must never remove the image another
// is making, and must remove what a process that is gone left behind.
func TestImagesWorkDirs(t *testing.T) {
	dir := t.TempDir()
	agent := agentFile{digest: "d"}

	live, err := newImages(dir, agent, 0, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	making := filepath.Join(live.work, "i-x-1234")
	if err := os.MkdirAll(filepath.Join(making, "etc"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(making, "etc", "passwd"), []byte("root:x:0:0::/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// What a crashed process left: an unlocked work dir, an earlier
	// version's half-made image, an old and a young staging dir.
	for _, p := range []string{".tmp-deadbeef/i-y-1", ".tmp-i-z-5678/etc", ".new-old", ".new-young"} {
		if err := os.MkdirAll(filepath.Join(dir, p), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(dir, ".new-old"), old, old)

	other, err := newImages(dir, agent, 0, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer other.close()
	for _, c := range []struct {
		path string
		kept bool
	}{
		{filepath.Join(making, "etc", "passwd"), true},
		{other.work, true},
		{filepath.Join(dir, ".new-young"), true},
		{filepath.Join(dir, ".tmp-deadbeef"), false},
		{filepath.Join(dir, ".tmp-i-z-5678"), false},
		{filepath.Join(dir, ".new-old"), false},
	} {
		_, err := os.Stat(c.path)
		if kept := err == nil; kept != c.kept {
			t.Errorf("%s: kept %v, want %v (%v)", c.path, kept, c.kept, err)
		}
	}

	// Once the first process is done, its work dir is gone.
	live.close()
	if _, err := os.Stat(live.work); !os.IsNotExist(err) {
		t.Errorf("work dir %s left after close: %v", live.work, err)
	}
}
