package blobstore_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/blobstore"
	"github.com/spacesandbox/space/internal/blobstore/blobstoretest"
	"github.com/spacesandbox/space/internal/errdefs"
)

func TestFSConformance(t *testing.T) {
	var root string
	blobstoretest.Run(t, blobstoretest.Backend{
		New: func(t *testing.T) blobstore.Store {
			root = t.TempDir()
			s, err := blobstore.NewFS(root)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Corrupt: func(t *testing.T, _ blobstore.Store, key string) {
			f, err := os.OpenFile(filepath.Join(root, key), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			b := make([]byte, 1)
			if _, err := f.ReadAt(b, 100); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte{b[0] ^ 0xff}, 100); err != nil {
				t.Fatal(err)
			}
		},
	})
}

func TestFSPermissions(t *testing.T) {
	root := filepath.Join(t.TempDir(), "store")
	s, err := blobstore.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	blobstoretest.Put(t, s, "a/b/c", []byte("x"))
	for _, tc := range []struct {
		path string
		want os.FileMode
	}{{root, 0o700}, {filepath.Join(root, "a"), 0o700}, {filepath.Join(root, "a/b"), 0o700}, {filepath.Join(root, "a/b/c"), 0o600}} {
		st, err := os.Stat(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != tc.want {
			t.Errorf("%s mode %o, want %o", tc.path, got, tc.want)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(root, "a/b"))
	if len(entries) != 1 {
		t.Errorf("temp files left beside the object: %v", entries)
	}
}

// TestFSKeyOverDirectory: a key whose name is the directory of another
// key (even a deleted one: emptied directories stay) is refused as a
// collision, not with an unclassified error (found by FuzzValidateKey).
func TestFSKeyOverDirectory(t *testing.T) {
	s, err := blobstore.NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Put(ctx, "a/b", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	for _, deleted := range []bool{false, true} {
		if deleted {
			if err := s.Delete(ctx, "a/b"); err != nil {
				t.Fatal(err)
			}
		}
		_, err := s.Put(ctx, "a", strings.NewReader("y"), 1)
		if errdefs.Class(err) != errdefs.ErrFailedPrecondition {
			t.Errorf("Put over the directory of a/b (deleted %v): %v, want FailedPrecondition", deleted, err)
		}
	}
}
