package volume

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

func TestCheckMountPath(t *testing.T) {
	ok := []string{"/data", "/mnt/data", "/home/user/work", "/workspace", "/tmp/x", "/opt/cache", "/var/lib/app", "/srv", "/libraryx"}
	for _, p := range ok {
		if err := CheckMountPath(p); err != nil {
			t.Errorf("%q refused: %v", p, err)
		}
	}
	bad := map[string]string{
		"":                             "needs a path",
		"data":                         "absolute",
		"/":                            "whole filesystem",
		"/proc":                        "/proc",
		"/proc/self":                   "/proc",
		"/sys/fs":                      "/sys",
		"/dev":                         "/dev",
		"/usr":                         "space agent",
		"/usr/local/bin":               "space agent",
		"/bin":                         "programs",
		"/sbin":                        "programs",
		"/lib":                         "libraries",
		"/lib64":                       "libraries",
		"/libx32/foo":                  "libraries",
		"/etc":                         "configuration",
		"/etc/ssl":                     "configuration",
		"/run":                         "runtime state",
		"/var/run":                     "runtime state",
		"/var":                         "would cover /var/run",
		"/boot":                        "boot",
		"/data/":                       "clean",
		"/data/../etc":                 "clean",
		"/a//b":                        "clean",
		"/a/./b":                       "clean",
		"/a\x00b":                      "NUL",
		"/" + strings.Repeat("a", 300): "256",
	}
	for p, want := range bad {
		err := CheckMountPath(p)
		if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(errdefs.PublicMessage(err), want) {
			t.Errorf("%q: got %v, want a 400 saying %q", p, err, want)
		}
	}
	if err := CheckMountPaths([]string{"/data", "/data/sub"}); err == nil || !strings.Contains(err.Error(), "overlap") {
		t.Errorf("nested mounts: %v", err)
	}
	if err := CheckMountPaths([]string{"/a", "/a"}); err == nil {
		t.Error("the same path twice was accepted")
	}
	if err := CheckMountPaths([]string{"/a", "/ab"}); err != nil {
		t.Errorf("/a and /ab: %v", err)
	}
}

func TestCheckName(t *testing.T) {
	for _, n := range []string{"data", "My_Vol-1", strings.Repeat("a", 63)} {
		if err := CheckName(n); err != nil {
			t.Errorf("%q: %v", n, err)
		}
	}
	for _, n := range []string{"", "a b", "a/b", "..", "a.b", strings.Repeat("a", 64)} {
		if err := CheckName(n); err == nil {
			t.Errorf("%q accepted", n)
		}
	}
}

// testService is a service over a Bolt store whose volumes are plain
// directories (no image, no mount): enough for claims and content.
func testService(t *testing.T) (*Service, *store.Bolt) {
	t.Helper()
	dir := t.TempDir()
	b, err := store.OpenBolt(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s := &Service{
		cfg:  Config{Dir: filepath.Join(dir, "volumes"), ImagesDir: filepath.Join(dir, "images"), DefaultMB: 64, MaxMB: 1024},
		vols: b, sandboxes: b, disk: disk{dir: filepath.Join(dir, "volumes")}, log: slog.New(slog.DiscardHandler),
		content: map[string]*sync.RWMutex{},
	}
	return s, b
}

// addVolume records a ready volume whose root is a plain directory.
func addVolume(t *testing.T, s *Service, b *store.Bolt, name string) *store.Volume {
	t.Helper()
	v := &store.Volume{ID: newID(), Name: name, State: store.VolumeReady, SizeMB: 64, Token: newToken()}
	if err := b.CreateVolume(context.Background(), v); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(s.disk.root(v.ID), 0o755); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestOneWriterAtATime(t *testing.T) {
	s, b := testService(t)
	ctx := context.Background()
	v := addVolume(t, s, b, "shared")
	claim := func(id string, ro bool, state string) error {
		ms, release, err := s.Claim(ctx, id, []store.VolumeMount{{Name: "shared", Path: "/data", ReadOnly: ro}})
		if err != nil {
			return err
		}
		defer release()
		if ms[0].VolumeID != v.ID {
			t.Fatalf("resolved to %q, want %q", ms[0].VolumeID, v.ID)
		}
		return b.CreateSandbox(ctx, &store.Sandbox{ID: id, State: state, Volumes: ms}, 100, nil)
	}
	if err := claim("writer", false, store.StateRunning); err != nil {
		t.Fatal(err)
	}
	if err := claim("reader1", true, store.StateRunning); err != nil {
		t.Fatalf("a reader beside the writer: %v", err)
	}
	err := claim("writer2", false, store.StateRunning)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(errdefs.PublicMessage(err), "writer") {
		t.Fatalf("a second writer: %v", err)
	}
	// Paused, the writer still holds it.
	w, _ := b.GetSandbox(ctx, "writer")
	w.State = store.StatePaused
	if err := b.UpdateSandbox(ctx, w, store.Expect{State: store.StateRunning}); err != nil {
		t.Fatal(err)
	}
	if err := claim("writer2", false, store.StateRunning); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("a second writer beside a paused one: %v", err)
	}
	if err := s.Delete(ctx, "shared"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("delete in use: %v", err)
	}
	// Its own claim does not stop the writer (its resume).
	if _, release, err := s.Claim(ctx, "writer", []store.VolumeMount{{Name: "shared", Path: "/data"}}); err != nil {
		t.Fatalf("the holder's own claim: %v", err)
	} else {
		release()
	}
	// Killed, it holds nothing.
	w.State = store.StateKilled
	if err := b.UpdateSandbox(ctx, w, store.Expect{State: store.StatePaused}); err != nil {
		t.Fatal(err)
	}
	if err := claim("writer2", false, store.StateRunning); err != nil {
		t.Fatalf("a writer once the first was killed: %v", err)
	}
	got, err := s.Get(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Mounts) != 2 {
		t.Fatalf("mounts: %+v", got.Mounts)
	}
	if _, _, err := s.Claim(ctx, "x", []store.VolumeMount{{Name: "nope", Path: "/data"}}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown volume: %v", err)
	}
	if _, _, err := s.Claim(ctx, "x", []store.VolumeMount{{Name: "shared", Path: "/etc"}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bad path: %v", err)
	}
	if _, _, err := s.Claim(ctx, "x", []store.VolumeMount{{Name: "shared", Path: "/a", ReadOnly: true}, {Name: "shared", Path: "/b", ReadOnly: true}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("one volume twice: %v", err)
	}
}

func TestContent(t *testing.T) {
	s, b := testService(t)
	ctx := context.Background()
	v := addVolume(t, s, b, "files")
	u := func(n uint32) *uint32 { return &n }
	e, err := s.Write(ctx, v.ID, "/hello.txt", strings.NewReader("hi"), Attrs{Mode: u(0o640)})
	if err != nil {
		t.Fatal(err)
	}
	if e.Path != "/hello.txt" || e.Name != "hello.txt" || e.Type != "file" || e.Size != 2 || e.Mode != 0o640 {
		t.Fatalf("entry %+v", e)
	}
	if os.Geteuid() == 0 && (e.UID != dataUID || e.GID != dataUID) {
		t.Fatalf("owner %d:%d, want the sandboxes' user", e.UID, e.GID)
	}
	// Relative paths are relative to the root; an overwrite replaces.
	if _, err := s.Write(ctx, v.Name, "hello.txt", strings.NewReader("hello"), Attrs{}); err != nil {
		t.Fatal(err)
	}
	rc, _, err := s.Open(ctx, v.ID, "hello.txt")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(rc)
	rc.Close()
	if string(data) != "hello" {
		t.Fatalf("read %q", data)
	}
	if _, err := s.Write(ctx, v.ID, "/no/such/dir/f", strings.NewReader("x"), Attrs{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("write under a missing dir: %v", err)
	}
	if _, err := s.MakeDir(ctx, v.ID, "/a/b/c", false, Attrs{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("mkdir without parents: %v", err)
	}
	if _, err := s.MakeDir(ctx, v.ID, "/a/b/c", true, Attrs{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MakeDir(ctx, v.ID, "/a/b/c", true, Attrs{}); err != nil {
		t.Fatalf("mkdir -p of an existing dir: %v", err)
	}
	if _, err := s.MakeDir(ctx, v.ID, "/a", false, Attrs{}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("mkdir of an existing dir: %v", err)
	}
	if _, err := s.Write(ctx, v.ID, "/a/b/c/f.txt", strings.NewReader("deep"), Attrs{}); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListDir(ctx, v.ID, "/", 1)
	if err != nil {
		t.Fatal(err)
	}
	if names := entryNames(list); names != "a hello.txt" {
		t.Fatalf("listing: %s", names)
	}
	list, err = s.ListDir(ctx, v.ID, "/", 4)
	if err != nil {
		t.Fatal(err)
	}
	if names := entryPaths(list); names != "/a /a/b /a/b/c /a/b/c/f.txt /hello.txt" {
		t.Fatalf("deep listing: %s", names)
	}
	if e, err := s.SetAttrs(ctx, v.ID, "/hello.txt", Attrs{Mode: u(0o600)}); err != nil || e.Mode != 0o600 {
		t.Fatalf("chmod: %+v %v", e, err)
	}
	if err := s.Remove(ctx, v.ID, "/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, v.ID, "/a/b"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("stat after remove: %v", err)
	}
	if err := s.Remove(ctx, v.ID, "/a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("remove twice: %v", err)
	}
	if err := s.Remove(ctx, v.ID, "/"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("remove the root: %v", err)
	}
	if _, err := s.Stat(ctx, "nope", "/"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown volume: %v", err)
	}
}

// A sandbox can plant any symlink in a volume; the host must never follow
// one out of it, and no error may name a host path.
func TestContentNeverLeavesTheVolume(t *testing.T) {
	s, b := testService(t)
	ctx := context.Background()
	v := addVolume(t, s, b, "evil")
	root := s.disk.root(v.ID)
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("host secret"), 0o600)
	os.Symlink(secret, filepath.Join(root, "abs"))
	os.Symlink("../../../../../../../../"+secret, filepath.Join(root, "rel"))
	os.Symlink(filepath.Dir(secret), filepath.Join(root, "dirlink"))
	os.Symlink("hello", filepath.Join(root, "inside"))
	os.WriteFile(filepath.Join(root, "hello"), []byte("ok"), 0o644)
	for _, p := range []string{"/abs", "/rel", "/dirlink/secret", "/../../../" + secret, "/dirlink"} {
		rc, _, err := s.Open(ctx, v.ID, p)
		if err == nil {
			data, _ := io.ReadAll(rc)
			rc.Close()
			t.Errorf("read %s through the volume: %q", p, data)
			continue
		}
		if strings.Contains(errdefs.PublicMessage(err), s.cfg.Dir) {
			t.Errorf("%s: the error names a host path: %q", p, errdefs.PublicMessage(err))
		}
	}
	if _, err := s.Write(ctx, v.ID, "/dirlink/planted", strings.NewReader("x"), Attrs{}); err == nil {
		t.Error("wrote through a symlink out of the volume")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(secret), "planted")); err == nil {
		t.Error("a file appeared outside the volume")
	}
	if err := s.Remove(ctx, v.ID, "/dirlink/secret"); err == nil {
		t.Error("removed a file through a symlink out of the volume")
	}
	if _, err := os.Stat(secret); err != nil {
		t.Errorf("the host file is gone: %v", err)
	}
	// The symlink itself is described, and one inside the volume is followed.
	e, err := s.Stat(ctx, v.ID, "/abs")
	if err != nil || e.Type != "symlink" || e.Target != secret {
		t.Fatalf("stat of a symlink: %+v %v", e, err)
	}
	rc, _, err := s.Open(ctx, v.ID, "/inside")
	if err != nil {
		t.Fatalf("a symlink inside the volume: %v", err)
	}
	rc.Close()
	// Removing a symlink removes the link, not its target.
	if err := s.Remove(ctx, v.ID, "/abs"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(secret); err != nil {
		t.Fatalf("removing the link removed its target: %v", err)
	}
}

func TestArchiveRoundTrip(t *testing.T) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "d/e"), 0o750)
	os.WriteFile(filepath.Join(src, "d/e/f.txt"), []byte("payload"), 0o640)
	os.WriteFile(filepath.Join(src, "top"), bytes.Repeat([]byte("x"), 100000), 0o600)
	os.Symlink("/etc/passwd", filepath.Join(src, "link"))
	sr, _ := os.OpenRoot(src)
	defer sr.Close()
	var buf bytes.Buffer
	st, err := writeArchive(sr, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 5 || st.Bytes != 100007 {
		t.Fatalf("stats %+v", st)
	}
	dst := t.TempDir()
	dr, _ := os.OpenRoot(dst)
	defer dr.Close()
	if _, err := readArchive(dr, &buf); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(dst, "d/e/f.txt")); string(data) != "payload" {
		t.Fatalf("file %q", data)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "d/e/f.txt")); fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v", fi.Mode())
	}
	if fi, _ := os.Stat(filepath.Join(dst, "d")); fi.Mode().Perm() != 0o750 {
		t.Fatalf("dir mode %v", fi.Mode())
	}
	if target, _ := os.Readlink(filepath.Join(dst, "link")); target != "/etc/passwd" {
		t.Fatalf("link %q", target)
	}
}

func TestArchiveCannotWriteOutside(t *testing.T) {
	outside := t.TempDir()
	for name, entries := range map[string][]tarEntry{
		"dotdot":   {{name: "../escape", body: "x"}},
		"absolute": {{name: "/tmp/escape", body: "x"}},
		"via link": {{name: "l", link: outside}, {name: "l/escape", body: "x"}},
	} {
		t.Run(name, func(t *testing.T) {
			dst := t.TempDir()
			dr, _ := os.OpenRoot(dst)
			defer dr.Close()
			if _, err := readArchive(dr, makeArchive(t, entries)); err == nil {
				t.Fatal("a crafted archive was extracted")
			}
			if _, err := os.Stat(filepath.Join(outside, "escape")); err == nil {
				t.Fatal("a file was written outside the volume")
			}
		})
	}
}

func entryNames(es []*Entry) string {
	var out []string
	for _, e := range es {
		out = append(out, e.Name)
	}
	return strings.Join(out, " ")
}

func entryPaths(es []*Entry) string {
	var out []string
	for _, e := range es {
		out = append(out, e.Path)
	}
	return strings.Join(out, " ")
}

type tarEntry struct{ name, body, link string }

func makeArchive(t *testing.T, entries []tarEntry) io.Reader {
	t.Helper()
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), Typeflag: tar.TypeReg}
		if e.link != "" {
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, e.link, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()
	var out bytes.Buffer
	zw, _ := zstd.NewWriter(&out)
	zw.Write(raw.Bytes())
	zw.Close()
	return &out
}
