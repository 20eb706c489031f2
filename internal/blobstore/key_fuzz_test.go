package blobstore

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

// FuzzValidateKey: a key ValidateKey accepts stays inside the local
// backend's root, and the backend stores and returns it byte for byte or
// refuses it with a classified error; a key it refuses is refused as
// invalid.
func FuzzValidateKey(f *testing.F) {
	for _, seed := range []string{
		"a", "a/b/c.tar", "sandboxes/abc/disk-1", "", "/abs", "a//b", "a/./b", "a/../b", "..", "a/",
		".blobstore-tmp", "a/.blobstore-x", "a\x00b", strings.Repeat("k", 1025), strings.Repeat("d", 300),
		"ünïcode/ключ", "a\\..\\b", "a/b/",
	} {
		f.Add(seed)
	}
	root := f.TempDir()
	st, err := NewFS(root)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := ValidateKey(key)
		if err != nil {
			if errdefs.Class(err) != errdefs.ErrInvalidArgument {
				t.Fatalf("ValidateKey(%q) = %v, not InvalidArgument", key, err)
			}
			if _, perr := st.Put(context.Background(), key, strings.NewReader("x"), 1); perr == nil {
				t.Fatalf("Put accepted key %q that ValidateKey refuses (%v)", key, err)
			}
			return
		}
		if p := st.path(key); !strings.HasPrefix(p, filepath.Clean(root)+string(filepath.Separator)) {
			t.Fatalf("key %q maps to %s, outside %s", key, p, root)
		}
		if err := validatePrefix(key); err != nil {
			t.Fatalf("a valid key %q is not a valid list prefix: %v", key, err)
		}
		if err := validatePrefix(key + "/"); err != nil {
			t.Fatalf("a valid key %q + / is not a valid list prefix: %v", key, err)
		}
		ctx := context.Background()
		data := []byte("v:" + key)
		if _, err := st.Put(ctx, key, bytes.NewReader(data), int64(len(data))); err != nil {
			if errdefs.Class(err) == nil {
				t.Fatalf("Put(%q) failed without an error class: %v", key, err)
			}
			return
		}
		rc, _, err := st.Get(ctx, key)
		if err != nil {
			t.Fatalf("Get(%q) after Put: %v", key, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get(%q) = %q, %v", key, got, err)
		}
		if err := st.Delete(ctx, key); err != nil {
			t.Fatalf("Delete(%q): %v", key, err)
		}
	})
}
