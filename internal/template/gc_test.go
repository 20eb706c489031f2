package template

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/blobstore"
	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/errdefs"
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

// oldLayers stores a layer per key (one file each) that is already older
// than the service's cache TTL of a nanosecond.
func oldLayers(t *testing.T, e *testEnv, keys ...string) {
	t.Helper()
	for _, k := range keys {
		e.storeLayer(t, k, map[string]string{"f-" + k[:4]: k})
	}
	time.Sleep(time.Millisecond)
}

// stored reports which of keys' layers are in the object store.
func (e *testEnv) stored(t *testing.T, keys ...string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, k := range keys {
		ok, err := e.s.art.has(context.Background(), layerID(k))
		if err != nil {
			t.Fatal(err)
		}
		out[k[:1]] = ok
	}
	return out
}

func wantStored(t *testing.T, got map[string]bool, want map[string]bool) {
	t.Helper()
	for k, w := range want {
		if got[k] != w {
			t.Errorf("layer %s stored = %v, want %v", k, got[k], w)
		}
	}
}

// TestCollectPins: what a build pins is never collected, also when the
// build starts after the collection chose what to keep (the collector
// checks the pins as it removes); a pin released during a collection
// holds until it ends (the build's tags moved after the collection looked
// at them); once released, it goes with the next collection.
func TestCollectPins(t *testing.T) {
	ctx := context.Background()
	e := newTestService(t, func(c *Config) { c.CacheTTL = time.Nanosecond })
	a, b, c, d := key('a'), key('b'), key('c'), key('d')
	oldLayers(t, e, a, b, c, d)

	release := e.s.pins.pin(layerID(a)) // a build in progress uses a
	var releaseB func()
	e.s.collectHook = func() {
		// A build starts mid-collection and finds b and c cached; the one
		// using c ends before the collection does.
		releaseB = e.s.pins.pin(layerID(b))
		e.s.pins.pin(layerID(c))()
	}
	if err := e.s.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	wantStored(t, e.stored(t, a, b, c, d), map[string]bool{"a": true, "b": true, "c": true, "d": false})

	e.s.collectHook = nil
	release()
	releaseB()
	if err := e.s.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	wantStored(t, e.stored(t, a, b, c), map[string]bool{"a": false, "b": false, "c": false})
}

// TestCollectKeepsWhatSandboxesResumeOn: a paused sandbox and a snapshot
// of a deleted template keep the layers their image is made of (another
// node makes the image from them to resume), not only the image here;
// what nothing names goes.
func TestCollectKeepsWhatSandboxesResumeOn(t *testing.T) {
	ctx := context.Background()
	e := newTestService(t, func(c *Config) { c.CacheTTL = time.Nanosecond })
	base, paused, snap, unused := key('1'), key('2'), key('3'), key('4')
	oldLayers(t, e, base, paused, snap, unused)
	bp := e.readyBuild(t, "b-paused", "gone", []string{base, paused}, "")
	bs := e.readyBuild(t, "b-snap", "gone", []string{base, snap}, "")
	e.readyBuild(t, "b-unused", "gone", []string{base, unused}, "")
	if err := e.st.DeleteTemplate(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := e.st.CreateSandbox(ctx, &store.Sandbox{ID: "sb", Image: bp.Result.Image, State: store.StatePaused, Template: "gone"}, 16, nil); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "disk.tar"), []byte("layer"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.checkpoints.Save(ctx, &checkpoint.Manifest{ID: "snap-1", Kind: checkpoint.KindSnapshot, SandboxID: "ended",
		Meta: map[string]string{checkpoint.MetaImage: bs.Result.Image}}, dir, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	wantStored(t, e.stored(t, base, paused, snap, unused), map[string]bool{"1": true, "2": true, "3": true, "4": false})

	// And a node without the image makes it from them.
	root, err := e.s.ImageRoot("gone", bp.Result.Image)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{base, paused} {
		if data, err := os.ReadFile(filepath.Join(root, "f-"+k[:4])); err != nil || string(data) != k {
			t.Errorf("remade image: file of layer %s: %q, %v", k[:1], data, err)
		}
	}
	if data, err := os.ReadFile(filepath.Join(root, "usr/local/bin/space-agent")); err != nil || string(data) != testAgent {
		t.Errorf("remade image has no agent: %q, %v", data, err)
	}
	if _, err := e.s.ImageRoot("gone", "i-0123456789abcdef0123456789abcdef"); errdefs.Class(err) != errdefs.ErrFailedPrecondition {
		t.Errorf("an image no build made: %v, want failed precondition", err)
	}
}
