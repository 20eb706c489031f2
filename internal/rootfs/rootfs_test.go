package rootfs

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

type ent struct {
	name, body, link string
	typ              byte
	mode             int64
}

func layer(t *testing.T, ents ...ent) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
			if e.typ == tar.TypeDir {
				mode = 0o755
			}
		}
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: mode, Size: int64(len(e.body)),
			Uid: os.Getuid(), Gid: os.Getgid()}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return &buf
}

func write(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

// A layer applied to a clone changes the clone only: the parent image's
// files (which the clone shares) keep their content, owner and mode.
func TestCloneThenApplyLeavesParent(t *testing.T) {
	tmp := t.TempDir()
	parent, child := filepath.Join(tmp, "parent"), filepath.Join(tmp, "child")
	os.Mkdir(parent, 0o755)
	write(t, parent, map[string]string{"etc/hostname": "old", "usr/bin/tool": "tool", "var/log/a": "a", "var/log/b": "b", "keep": "keep"})
	os.Symlink("/etc/hostname", filepath.Join(parent, "hn"))
	if err := Clone(parent, child); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(context.Background(), child, layer(t,
		ent{name: "etc/hostname", body: "new", typ: tar.TypeReg, mode: 0o600},
		ent{name: "usr/bin/.wh.tool", typ: tar.TypeReg},
		ent{name: "var/log/", typ: tar.TypeDir},
		ent{name: "var/log/.wh..wh..opq", typ: tar.TypeReg},
		ent{name: "var/log/c", body: "c", typ: tar.TypeReg},
		ent{name: "made", body: "m", typ: tar.TypeReg},
		ent{name: "made2", link: "made", typ: tar.TypeLink},
	), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{
		"parent/etc/hostname": "old", "parent/usr/bin/tool": "tool", "parent/var/log/a": "a",
		"child/etc/hostname": "new", "child/var/log/c": "c", "child/keep": "keep", "child/made2": "m",
	} {
		if got := read(t, filepath.Join(tmp, p)); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	for _, p := range []string{"child/usr/bin/tool", "child/var/log/a", "child/var/log/b"} {
		if _, err := os.Lstat(filepath.Join(tmp, p)); !os.IsNotExist(err) {
			t.Errorf("%s should be gone: %v", p, err)
		}
	}
	if fi, _ := os.Stat(filepath.Join(parent, "etc/hostname")); fi.Mode().Perm() != 0o644 {
		t.Errorf("parent's file mode changed to %v", fi.Mode())
	}
	if l, _ := os.Readlink(filepath.Join(child, "hn")); l != "/etc/hostname" {
		t.Errorf("symlink cloned as %q", l)
	}
}

// Untrusted layers stay inside the image.
func TestApplyRefusesEscapes(t *testing.T) {
	tmp := t.TempDir()
	outside := filepath.Join(tmp, "outside")
	os.Mkdir(outside, 0o755)
	write(t, outside, map[string]string{"secret": "host"})
	img := filepath.Join(tmp, "img")
	os.Mkdir(img, 0o755)
	write(t, img, map[string]string{"shared": "s"})
	// A symlink to an absolute host path resolves inside the image.
	os.Symlink(outside, filepath.Join(img, "evil"))

	if _, err := Apply(context.Background(), img, layer(t,
		ent{name: "evil/secret", body: "pwned", typ: tar.TypeReg},
		ent{name: "dev/sda", typ: tar.TypeBlock},
	), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(outside, "secret")); got != "host" {
		t.Fatalf("a layer wrote through a symlink to the host: %q", got)
	}
	if got := read(t, filepath.Join(img, outside, "secret")); got != "pwned" {
		t.Errorf("the entry should land inside the image, got %q", got)
	}
	if _, err := os.Lstat(filepath.Join(img, "dev/sda")); !os.IsNotExist(err) {
		t.Errorf("device node was made: %v", err)
	}

	// A hard link to a file the layer did not make is refused: it would
	// share (and let the layer change) a file of the parent image.
	_, err := Apply(context.Background(), img, layer(t,
		ent{name: "grab", link: "shared", typ: tar.TypeLink},
	), ApplyOptions{})
	if err == nil || !errorsIs(err) || !strings.Contains(err.Error(), "hard link") {
		t.Fatalf("err = %v, want an invalid-argument error about the hard link", err)
	}
	if strings.Contains(errdefs.PublicMessage(err), tmp) {
		t.Errorf("public message names a host path: %s", errdefs.PublicMessage(err))
	}
}

func errorsIs(err error) bool { return errdefs.Class(err) == errdefs.ErrInvalidArgument }

func TestAddFileReplacesSharedFile(t *testing.T) {
	tmp := t.TempDir()
	parent, child := filepath.Join(tmp, "parent"), filepath.Join(tmp, "child")
	os.Mkdir(parent, 0o755)
	write(t, parent, map[string]string{"usr/local/bin/agent": "v1"})
	if err := Clone(parent, child); err != nil {
		t.Fatal(err)
	}
	data := "v2-agent"
	if err := AddFile(context.Background(), child, "/usr/local/bin/agent", 0o755, os.Getuid(), os.Getgid(), strings.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(parent, "usr/local/bin/agent")); got != "v1" {
		t.Errorf("parent's agent = %q", got)
	}
	if got := read(t, filepath.Join(child, "usr/local/bin/agent")); got != data {
		t.Errorf("child's agent = %q", got)
	}
	if n, err := Size(child); err != nil || n != int64(len(data)) {
		t.Errorf("Size = %d, %v", n, err)
	}
}

// TestApplyLimit: a layer whose files take more than MaxBytes stops with
// ErrTooLarge before the entry that passes it is written.
func TestApplyLimit(t *testing.T) {
	big := strings.Repeat("x", 600)
	mk := func() *bytes.Buffer {
		return layer(t, ent{name: "a", body: big, typ: tar.TypeReg}, ent{name: "b", body: big, typ: tar.TypeReg})
	}
	dir := t.TempDir()
	_, err := Apply(context.Background(), dir, mk(), ApplyOptions{MaxBytes: 1000})
	if errdefs.Class(err) != errdefs.ErrTooLarge || !strings.Contains(err.Error(), "more than 1000 bytes") {
		t.Fatalf("err = %v, want too large", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "b")); !os.IsNotExist(err) {
		t.Errorf("the entry past the limit was written: %v", err)
	}
	if n, err := Apply(context.Background(), t.TempDir(), mk(), ApplyOptions{MaxBytes: 1200}); err != nil || n != 1200 {
		t.Errorf("at the limit: %d, %v", n, err)
	}
}
