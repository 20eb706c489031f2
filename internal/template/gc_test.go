package template

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/blobstore"
	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/seal"
	"github.com/spacesandbox/space/internal/store"
)

// TestCollectBaseImages: the install script never removes base images;
// the collector removes the ones nothing can need any more, and keeps the
// current one, those of sandboxes (running or paused), those a checkpoint
// or snapshot names, and those too new to tell.
func TestCollectBaseImages(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "templates")
	old := time.Now().Add(-48 * time.Hour)
	image := func(name string, mtime time.Time) {
		root := filepath.Join(dir, BaseName, name)
		if err := os.MkdirAll(filepath.Join(root, "usr/local/bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "usr/local/bin/space-agent"), []byte("agent"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(root, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"rootfs-cur-a1", "rootfs-run-a2", "rootfs-paused-a3", "rootfs-snap-a4", "rootfs-unused-a5", "rootfs-ended-a7"} {
		image(name, old)
	}
	image("rootfs-new-a6", time.Now())
	if err := os.MkdirAll(filepath.Join(dir, BaseName, "rootfs-recipe"), 0o755); err != nil { // a recipe rootfs, not an image
		t.Fatal(err)
	}
	if err := os.Symlink("rootfs-cur-a1", filepath.Join(dir, BaseName, "current")); err != nil {
		t.Fatal(err)
	}

	st, err := store.OpenBolt(filepath.Join(tmp, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for id, sb := range map[string]struct{ image, state string }{
		"running": {"rootfs-run-a2", store.StateRunning}, "paused": {"rootfs-paused-a3", store.StatePaused}, "ended": {"rootfs-ended-a7", store.StateKilled},
	} {
		if err := st.CreateSandbox(ctx, &store.Sandbox{ID: id, Image: sb.image, State: sb.state, Template: BaseName}, 16, nil); err != nil {
			t.Fatal(err)
		}
	}
	objects, err := blobstore.NewFS(filepath.Join(tmp, "objects"))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := seal.OpenKeyring(filepath.Join(tmp, "platform.json"))
	if err != nil {
		t.Fatal(err)
	}
	checkpoints := checkpoint.NewRepo(objects, keys)
	empty := t.TempDir()
	if err := os.WriteFile(filepath.Join(empty, "disk.tar"), []byte("layer"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := checkpoints.Save(ctx, &checkpoint.Manifest{ID: "snap-1", Kind: checkpoint.KindSnapshot, SandboxID: "gone",
		Meta: map[string]string{checkpoint.MetaImage: "rootfs-snap-a4"}}, empty, nil); err != nil {
		t.Fatal(err)
	}
	agent := filepath.Join(tmp, "space-agent")
	if err := os.WriteFile(agent, []byte("agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, Config{
		Dir: dir, WorkDir: filepath.Join(tmp, "work"), LogDir: filepath.Join(tmp, "logs"), Store: st,
		Repo: checkpoint.NewRepoAt(objects, keys, "templates/"), Checkpoints: checkpoints,
		Agent: agent, CacheTTL: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"rootfs-cur-a1": true, "rootfs-run-a2": true, "rootfs-paused-a3": true, "rootfs-snap-a4": true,
		"rootfs-new-a6": true, "rootfs-recipe": true, "rootfs-unused-a5": false, "rootfs-ended-a7": false,
	} {
		_, err := os.Stat(filepath.Join(dir, BaseName, name))
		if got := err == nil; got != want {
			t.Errorf("%s kept = %v, want %v", name, got, want)
		}
	}
}
