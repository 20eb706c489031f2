package volume

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/blobstore"
	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/seal"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/testenv"
)

// openReal is a service over real ext4 images (root, mkfs.ext4, mount and
// loop devices), sharing objects (an fs object store) with other nodes.
func openReal(t *testing.T, dir, objects string) (*Service, *store.Bolt) {
	t.Helper()
	testenv.NeedRoot(t, "volumes loop-mount ext4 images")
	testenv.NeedCommand(t, "mkfs.ext4", "mount", "umount", "fsfreeze")
	os.MkdirAll(dir, 0o700)
	b, err := store.OpenBolt(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	fs, err := blobstore.NewFS(objects)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := seal.OpenKeyring(filepath.Join(objects, "..", "platform.json"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(context.Background(), Config{
		Dir: filepath.Join(dir, "volumes"), ImagesDir: filepath.Join(dir, "images"), DefaultMB: 32, MaxMB: 256,
		Backups: checkpoint.NewRepoAt(fs, keys, "volumes/"), Logger: slog.New(slog.DiscardHandler),
	}, b, b)
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	return s, b
}

func TestRealVolume(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	objects := filepath.Join(base, "shared", "objects")
	os.MkdirAll(objects, 0o700)
	nodeA := filepath.Join(base, "a")
	s, b := openReal(t, nodeA, objects)
	var volumes []string
	t.Cleanup(func() {
		for _, id := range volumes {
			s.disk.remove(context.Background(), id)
		}
	})
	v, err := s.Create(ctx, CreateRequest{Name: "data", SizeMB: 32})
	if err != nil {
		t.Fatal(err)
	}
	volumes = append(volumes, v.ID)
	if _, err := s.Create(ctx, CreateRequest{Name: "data"}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("a second volume of one name: %v", err)
	}
	if !mounted(s.disk.mnt(v.ID)) {
		t.Fatal("not mounted")
	}
	// The limit is the filesystem's: a write past it is ENOSPC (507).
	_, err = s.Write(ctx, v.ID, "/big", io.LimitReader(zeros{}, 64<<20), Attrs{})
	if !errors.Is(err, errdefs.ErrNoSpace) || strings.Contains(errdefs.PublicMessage(err), nodeA) {
		t.Fatalf("a write past the limit: %v", err)
	}
	if _, err := s.Stat(ctx, v.ID, "/big"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a failed write left a file: %v", err)
	}
	if _, err := s.Write(ctx, v.ID, "/kept.txt", strings.NewReader("kept"), Attrs{}); err != nil {
		t.Fatal(err)
	}
	s.MakeDir(ctx, v.ID, "/sub/dir", true, Attrs{})
	s.Write(ctx, v.ID, "/sub/dir/f", bytes.NewReader(bytes.Repeat([]byte("y"), 1<<20)), Attrs{})
	os.Symlink("/etc/shadow", filepath.Join(s.disk.root(v.ID), "sub", "evil"))

	// A backup, restored as a new volume on another node sharing the store.
	bk, err := s.TakeBackup(ctx, "data")
	if err != nil {
		t.Fatal(err)
	}
	if bk.Files != 5 || bk.VolumeName != "data" || bk.SizeMB != 32 {
		t.Fatalf("backup %+v", bk)
	}
	raw, _ := os.ReadFile(filepath.Join(s.disk.root(v.ID), "kept.txt"))
	if strings.Contains(string(readAllObjects(t, objects)), "kept") || len(raw) == 0 {
		t.Fatal("the backup is not encrypted")
	}
	nodeB := filepath.Join(base, "b")
	s2, b2 := openReal(t, nodeB, objects)
	defer b2.Close()
	list, err := s2.Backups(ctx, "data")
	if err != nil || len(list) != 1 || list[0].ID != bk.ID {
		t.Fatalf("backups seen from node b: %+v %v", list, err)
	}
	if _, err := s2.Create(ctx, CreateRequest{Name: "moved", SizeMB: 16, FromBackup: "nope"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown backup: %v", err)
	}
	v2, err := s2.Create(ctx, CreateRequest{Name: "moved", FromBackup: bk.ID})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.disk.remove(ctx, v2.ID)
	if v2.SizeMB != 32 || v2.RestoredFrom != bk.ID {
		t.Fatalf("restored %+v", v2)
	}
	rc, _, err := s2.Open(ctx, "moved", "/kept.txt")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(rc)
	rc.Close()
	if string(data) != "kept" {
		t.Fatalf("restored %q", data)
	}
	if e, err := s2.Stat(ctx, "moved", "/sub/evil"); err != nil || e.Target != "/etc/shadow" {
		t.Fatalf("restored symlink %+v %v", e, err)
	}
	if e, err := s2.Stat(ctx, "moved", "/sub/dir/f"); err != nil || e.Size != 1<<20 || e.UID != dataUID {
		t.Fatalf("restored file %+v %v", e, err)
	}

	// A crash mid-create: the record says creating; a restart removes it.
	stale := &store.Volume{ID: newID(), Name: "half", State: store.VolumeCreating, SizeMB: 16}
	b.CreateVolume(ctx, stale)
	s.disk.make(ctx, stale.ID, 16)
	os.MkdirAll(filepath.Join(s.cfg.Dir, "vol-orphan"), 0o700)
	b.Close()
	s3, b3 := openReal(t, nodeA, objects)
	defer b3.Close()
	if _, err := b3.GetVolume(ctx, stale.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a half-made volume survived a restart: %v", err)
	}
	if _, err := os.Stat(s3.disk.volDir(stale.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("its files survived: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s3.cfg.Dir, "vol-orphan")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("an orphan directory survived")
	}
	if got, err := s3.Get(ctx, "data"); err != nil || got.UsedBytes < 1<<20 {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	if err := s3.Delete(ctx, "data"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s3.disk.volDir(v.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a deleted volume's files remain")
	}
	if err := s3.DeleteBackup(ctx, bk.ID); err != nil {
		t.Fatal(err)
	}
}

func readAllObjects(t *testing.T, dir string) []byte {
	var all []byte
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			all = append(all, b...)
		}
		return nil
	})
	return all
}
