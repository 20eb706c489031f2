package checkpoint_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/blobstore"
	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/seal"
)

const marker = "PLAINTEXT-MARKER-7f3a9c-written-inside-the-sandbox"

// image writes a checkpoint image dir: a small checkpoint.img, a sparse
// pages.img of pagesSize bytes (1 MiB random runs between 3 MiB holes), an
// empty pages_meta.img; every non-empty file holds the marker.
func image(t *testing.T, pagesSize int64) (string, map[string][]byte) {
	t.Helper()
	dir := t.TempDir()
	var seed [32]byte
	rng := mrand.NewChaCha8(seed)
	small := make([]byte, 100<<10)
	rng.Read(small)
	copy(small[5000:], marker)
	pages := make([]byte, pagesSize)
	for off := int64(0); off+(1<<20) <= pagesSize; off += 4 << 20 {
		rng.Read(pages[off : off+(1<<20)])
	}
	copy(pages[pagesSize/2:], marker)
	files := map[string][]byte{"checkpoint.img": small, "pages.img": pages, "pages_meta.img": {}}
	for name, b := range files {
		if err := writeSparse(filepath.Join(dir, name), b); err != nil {
			t.Fatal(err)
		}
	}
	return dir, files
}

// writeSparse writes b to path leaving its all-zero MiBs as holes.
func writeSparse(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	zero := make([]byte, 1<<20)
	for off := 0; off < len(b); off += len(zero) {
		chunk := b[off:min(len(b), off+len(zero))]
		if !bytes.Equal(chunk, zero[:len(chunk)]) {
			if _, err := f.WriteAt(chunk, int64(off)); err != nil {
				return err
			}
		}
	}
	return f.Truncate(int64(len(b)))
}

func manifest(id, keyID string) *checkpoint.Manifest {
	return &checkpoint.Manifest{
		ID: id, Kind: checkpoint.KindCheckpoint, SandboxID: "sbx1", Template: "base",
		RuntimeVersion: "runsc-test", Limits: checkpoint.Limits{CPU: 2, MemoryMB: 512, DiskMB: 1024, MaxProcesses: 100},
		Network: json.RawMessage(`{"allow_out": ["example.com"], "deny_all": false}`),
		Meta:    map[string]string{"template_image": "base-1"}, KeyID: keyID,
	}
}

func save(t *testing.T, e *env, m *checkpoint.Manifest, dir string, secret []byte) {
	t.Helper()
	if err := e.repo.Save(context.Background(), m, dir, secret); err != nil {
		t.Fatalf("Save(%s): %v", m.ID, err)
	}
}

// load restores id into a fresh dir and compares it with files.
func load(t *testing.T, e *env, id string, files map[string][]byte) (*checkpoint.Manifest, []byte) {
	t.Helper()
	dir := t.TempDir()
	m, secret, err := e.repo.Load(context.Background(), id, dir)
	if err != nil {
		t.Fatalf("Load(%s): %v", id, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(files) {
		t.Errorf("Load wrote %d files, want %d", len(entries), len(files))
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("restored %s: %d bytes, %v; want the %d bytes saved", name, len(got), err, len(want))
		}
	}
	return m, secret
}

func TestRoundTrip(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		dir, files := image(t, 64<<20)
		secret := []byte(`{"access_token":"tok","env":{"K":"` + marker + `"}}`)
		m := manifest("ckpt-1", "")
		save(t, e, m, dir, secret)
		// pages.img (64 MiB) goes up in two parts of 32 MiB.
		if m.Version != checkpoint.ManifestVersion || len(m.Artifacts) != 4 || m.Bytes <= 64<<20 || m.Took <= 0 || m.CreatedAt.IsZero() {
			t.Fatalf("Save filled %+v", m)
		}
		var names []string
		for _, a := range m.Artifacts {
			names = append(names, a.Name)
		}
		if want := []string{"checkpoint.img", "pages.img.part0000", "pages.img.part0001", "pages_meta.img"}; !slices.Equal(names, want) {
			t.Errorf("artifacts %v, want %v (sorted)", names, want)
		}
		if p := m.Artifacts[2]; p.File != "pages.img" || p.Offset != 32<<20 || p.PlainSize != 32<<20 {
			t.Errorf("second part of pages.img: %+v", p)
		}
		t.Logf("saved %d bytes in %v", m.Bytes, m.Took)

		got, gotSecret := load(t, e, "ckpt-1", files)
		if !bytes.Equal(gotSecret, secret) {
			t.Errorf("secret = %q, want %q", gotSecret, secret)
		}
		if got.Limits != m.Limits || got.Template != m.Template || !maps.Equal(got.Meta, m.Meta) || !got.CreatedAt.Equal(m.CreatedAt) ||
			got.Bytes != m.Bytes || got.KeyID != "" || got.SandboxID != "sbx1" || got.RuntimeVersion != "runsc-test" {
			t.Errorf("loaded manifest %+v\nwant %+v", got, m)
		}
		var policy map[string]any
		if err := json.Unmarshal(got.Network, &policy); err != nil || policy["deny_all"] != false {
			t.Errorf("network policy = %s, %v", got.Network, err)
		}

		// No plaintext at rest: not in the artifacts, not in the manifest.
		for _, key := range keys(t, e.store) {
			if b := readRaw(t, e.store, key); bytes.Contains(b, []byte(marker)) {
				t.Errorf("plaintext found in stored object %s", key)
			}
		}

		ms, err := e.repo.List(context.Background())
		if err != nil || len(ms) != 1 || ms[0].ID != "ckpt-1" {
			t.Fatalf("List = %v, %v", ms, err)
		}
		if err := e.repo.Save(context.Background(), manifest("ckpt-1", ""), dir, nil); !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Fatalf("second Save of the same id: %v, want ErrAlreadyExists", err)
		}
		if _, err := e.repo.Get(context.Background(), "ckpt-1"); err != nil { // the refused Save removed nothing
			t.Fatalf("Get after a refused Save: %v", err)
		}
	})
}

func TestCustomerKey(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		dir, files := image(t, 3<<20)
		key := randomKey(t)
		m := manifest("byok", "acme")
		if err := e.repo.Save(ctx, m, dir, nil); !errors.Is(err, seal.ErrKeyMissing) || !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("Save under an unloaded key: %v, want ErrKeyMissing", err)
		}
		if len(keys(t, e.store)) != 0 {
			t.Fatalf("a Save refused for its key uploaded %v", keys(t, e.store))
		}
		if err := e.keys.SetCustomerKey("acme", key); err != nil {
			t.Fatal(err)
		}
		save(t, e, m, dir, []byte("s"))
		load(t, e, "byok", files)

		for _, tc := range []struct {
			name  string
			setup func()
			want  error
			msg   string
		}{
			{"missing key", func() { e.keys.RemoveCustomerKey("acme") }, seal.ErrKeyMissing, `customer key "acme" is not loaded`},
			{"wrong key", func() { e.keys.SetCustomerKey("acme", randomKey(t)) }, seal.ErrWrongKey, "is not the version that wrapped"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tc.setup()
				out := t.TempDir()
				_, _, err := e.repo.Load(ctx, "byok", out)
				if !errors.Is(err, tc.want) || !errors.Is(err, errdefs.ErrFailedPrecondition) {
					t.Fatalf("Load: %v, want %v", err, tc.want)
				}
				if msg := errdefs.PublicMessage(err); !strings.Contains(msg, tc.msg) {
					t.Errorf("message %q does not say %q", msg, tc.msg)
				}
				if entries, _ := os.ReadDir(out); len(entries) != 0 {
					t.Errorf("failed Load left %v", entries)
				}
			})
		}
	})
}

func TestRotation(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		oldKey, newKey := randomKey(t), randomKey(t)
		if err := e.keys.SetCustomerKey("acme", oldKey); err != nil {
			t.Fatal(err)
		}
		dir, files := image(t, 2<<20)
		save(t, e, manifest("old-1", "acme"), dir, []byte("one"))
		save(t, e, manifest("old-2", "acme"), dir, []byte("two"))
		save(t, e, manifest("plat", ""), dir, nil)
		before := readRaw(t, e.store, "checkpoints/old-1/data/pages.img")

		if err := e.keys.RotateCustomerKey("acme", newKey); err != nil {
			t.Fatal(err)
		}
		save(t, e, manifest("new-1", "acme"), dir, nil) // already under the new version
		n, err := e.repo.Rewrap(ctx, "acme")
		if err != nil || n != 2 {
			t.Fatalf("Rewrap = %d, %v; want 2 manifests rewritten", n, err)
		}
		if n, err := e.repo.Rewrap(ctx, "acme"); err != nil || n != 0 {
			t.Fatalf("second Rewrap = %d, %v; want 0", n, err)
		}
		if err := e.keys.SetCustomerKey("acme", newKey); err != nil { // drop the old version
			t.Fatal(err)
		}
		for _, id := range []string{"old-1", "old-2", "new-1", "plat"} {
			_, secret := load(t, e, id, files)
			if id == "old-2" && string(secret) != "two" {
				t.Errorf("secret of %s = %q", id, secret)
			}
		}
		if !bytes.Equal(before, readRaw(t, e.store, "checkpoints/old-1/data/pages.img")) {
			t.Error("Rewrap re-encrypted the data")
		}
		if _, err := e.repo.Rewrap(ctx, "nobody"); !errors.Is(err, seal.ErrKeyMissing) {
			t.Errorf("Rewrap under an unloaded key: %v", err)
		}
	})
}

// The store dies in the middle of an upload: Save fails as unavailable, no
// manifest exists, Load says the checkpoint is incomplete and not
// restorable, and SweepIncomplete removes what was left.
func TestStoreDiesMidUpload(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		dir, files := image(t, 20<<20)
		save(t, e, manifest("good", ""), dir, nil) // an earlier complete checkpoint

		e.store.dieAfter(12<<20, "/data/checkpoint.img") // a small file, then part of pages.img
		err := e.repo.Save(ctx, manifest("broken", ""), dir, nil)
		if !errors.Is(err, errdefs.ErrUnavailable) {
			t.Fatalf("Save while the store dies: %v, want ErrUnavailable", err)
		}
		if !strings.Contains(err.Error(), "checkpoint broken") || !strings.Contains(errdefs.PublicMessage(err), "unreachable") {
			t.Errorf("error %q does not say which checkpoint failed and why", err)
		}
		t.Logf("Save failed: %v", err)
		e.store.revive()

		if _, err := e.store.Stat(ctx, "checkpoints/broken/manifest.json"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("manifest of the failed Save: %v, want none", err)
		}
		_, _, err = e.repo.Load(ctx, "broken", t.TempDir())
		if !errors.Is(err, checkpoint.ErrIncomplete) || !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("Load of the failed checkpoint: %v, want ErrIncomplete", err)
		}
		if ms, err := e.repo.List(ctx); err != nil || len(ms) != 1 || ms[0].ID != "good" {
			t.Fatalf("List = %v, %v; want only the good checkpoint", ms, err)
		}

		if n, err := e.repo.SweepIncomplete(ctx, time.Hour); err != nil || n != 0 {
			t.Fatalf("SweepIncomplete(1h) = %d, %v; want 0 (too recent)", n, err)
		}
		if n, err := e.repo.SweepIncomplete(ctx, 0); err != nil || n != 1 {
			t.Fatalf("SweepIncomplete(0) = %d, %v; want 1", n, err)
		}
		for _, k := range keys(t, e.store) {
			if strings.HasPrefix(k, "checkpoints/broken/") {
				t.Errorf("left after sweep: %s", k)
			}
		}
		if _, _, err := e.repo.Load(ctx, "broken", t.TempDir()); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("Load after sweep: %v, want ErrNotFound", err)
		}
		load(t, e, "good", files)
	})
}

func TestDelete(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		dir, files := image(t, 1<<20)
		save(t, e, manifest("a", ""), dir, nil)
		save(t, e, manifest("b", ""), dir, nil)
		if err := e.repo.Delete(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.repo.Get(ctx, "a"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
		}
		if got := keys(t, e.store); len(got) != 4 || !strings.HasPrefix(got[0], "checkpoints/b/") {
			t.Fatalf("objects after Delete: %v, want only b's", got)
		}
		if err := e.repo.Delete(ctx, "a"); err != nil {
			t.Fatalf("second Delete: %v", err)
		}
		load(t, e, "b", files)
	})
}

func TestTamper(t *testing.T) {
	t.Cleanup(checkpoint.SetPartSize(1 << 20)) // pages.img in three parts (after the parallel subtests)
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		dir, _ := image(t, 3<<20)
		for _, tc := range []struct {
			name   string
			tamper func(t *testing.T)
			want   []error // any of
		}{
			{"artifact corrupted at rest", func(t *testing.T) {
				e.corrupt(t, "checkpoints/x/data/pages.img.part0001")
			}, []error{blobstore.ErrChecksum, seal.ErrAuth}},
			{"artifact replaced through the store", func(t *testing.T) {
				b := readRaw(t, e.store, "checkpoints/x/data/pages.img.part0001")
				b[len(b)/2] ^= 1
				put(t, e, "checkpoints/x/data/pages.img.part0001", b)
			}, []error{errdefs.ErrFailedPrecondition}},
			{"artifact swapped with another checkpoint's", func(t *testing.T) {
				put(t, e, "checkpoints/x/data/pages.img.part0001", readRaw(t, e.store, "checkpoints/other/data/pages.img.part0001"))
			}, []error{errdefs.ErrFailedPrecondition}},
			{"manifest edited", func(t *testing.T) {
				b := readRaw(t, e.store, "checkpoints/x/manifest.json")
				put(t, e, "checkpoints/x/manifest.json", bytes.Replace(b, []byte(`"memory_mb": 512`), []byte(`"memory_mb": 8192`), 1))
			}, []error{seal.ErrAuth}},
			{"artifact missing", func(t *testing.T) {
				e.store.Delete(ctx, "checkpoints/x/data/checkpoint.img")
			}, []error{errdefs.ErrFailedPrecondition}},
			{"two parts of a file swapped", func(t *testing.T) {
				p0 := readRaw(t, e.store, "checkpoints/x/data/pages.img.part0000")
				p1 := readRaw(t, e.store, "checkpoints/x/data/pages.img.part0001")
				put(t, e, "checkpoints/x/data/pages.img.part0000", p1)
				put(t, e, "checkpoints/x/data/pages.img.part0001", p0)
			}, []error{errdefs.ErrFailedPrecondition}},
			{"a part missing", func(t *testing.T) {
				e.store.Delete(ctx, "checkpoints/x/data/pages.img.part0002")
			}, []error{errdefs.ErrFailedPrecondition}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e.repo.Delete(ctx, "x")
				e.repo.Delete(ctx, "other")
				save(t, e, manifest("x", ""), dir, []byte("secret"))
				save(t, e, manifest("other", ""), dir, nil)
				tc.tamper(t)
				out := t.TempDir()
				_, secret, err := e.repo.Load(ctx, "x", out)
				if err == nil || secret != nil || !slices.ContainsFunc(tc.want, func(w error) bool { return errors.Is(err, w) }) {
					t.Fatalf("Load of a tampered checkpoint: %v, want one of %v", err, tc.want)
				}
				// What a client sees: the outermost class decides, so a
				// damaged checkpoint is never a 404 because an object of
				// it is missing, nor a 500.
				if class := errdefs.Class(err); class != errdefs.ErrFailedPrecondition {
					t.Errorf("class of %v = %v, want %v", err, class, errdefs.ErrFailedPrecondition)
				}
				if status, code := errdefs.HTTPStatus(err); status != 409 || code != "failed_precondition" {
					t.Errorf("a client sees %d %s for %v, want 409 failed_precondition", status, code, err)
				}
				t.Logf("Load: %v", err)
				if entries, _ := os.ReadDir(out); len(entries) != 0 {
					t.Errorf("failed Load left %v", entries)
				}
			})
		}
	})
}

// TestVersion1: a manifest of the format before parts (every artifact a
// whole file) still loads.
func TestVersion1(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		dir, files := image(t, 4<<20)
		m := manifest("old", "")
		save(t, e, m, dir, []byte("secret"))
		if err := e.repo.RewriteAs(ctx, m, 1, []byte("secret")); err != nil {
			t.Fatal(err)
		}
		got, secret := load(t, e, "old", files)
		if got.Version != 1 || string(secret) != "secret" {
			t.Fatalf("loaded version %d, secret %q", got.Version, secret)
		}
	})
}

func put(t *testing.T, e *env, key string, b []byte) {
	t.Helper()
	if _, err := e.store.Put(context.Background(), key, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}
}

func TestInvalid(t *testing.T) {
	e := backends[0].new(t)
	ctx := context.Background()
	dir, _ := image(t, 1<<10)
	for _, id := range []string{"", "../x", "a/b", ".hidden", strings.Repeat("x", 129), "a b"} {
		if err := e.repo.Save(ctx, manifest(id, ""), dir, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Save(%q): %v, want ErrInvalidArgument", id, err)
		}
		if _, _, err := e.repo.Load(ctx, id, t.TempDir()); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Load(%q): %v, want ErrInvalidArgument", id, err)
		}
		if err := e.repo.Delete(ctx, id); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Delete(%q): %v, want ErrInvalidArgument", id, err)
		}
	}
	m := manifest("k", "")
	m.Kind = "other"
	if err := e.repo.Save(ctx, m, dir, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Save with kind %q: %v", m.Kind, err)
	}
	os.Mkdir(filepath.Join(dir, "sub"), 0o700)
	if err := e.repo.Save(ctx, manifest("k", ""), dir, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Save of a dir with a subdirectory: %v", err)
	}
	if err := e.repo.Save(ctx, manifest("k", ""), t.TempDir(), nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Save of an empty dir: %v", err)
	}
	if len(keys(t, e.store)) != 0 {
		t.Errorf("refused Saves stored %v", keys(t, e.store))
	}

	put(t, e, "checkpoints/v9/manifest.json", []byte(`{"version": 9, "id": "v9"}`))
	if _, err := e.repo.Get(ctx, "v9"); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(errdefs.PublicMessage(err), "version 9") {
		t.Errorf("Get of a version 9 manifest: %v", err)
	}
	put(t, e, "checkpoints/junk/manifest.json", []byte(`{"version": 1, "id": "junk"`))
	if _, err := e.repo.Get(ctx, "junk"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Get of a truncated manifest: %v", err)
	}
	if ms, err := e.repo.List(ctx); err != nil || len(ms) != 0 {
		t.Errorf("List with only damaged manifests = %v, %v; want them skipped", ms, err)
	}
}

func randomKey(t *testing.T) []byte {
	t.Helper()
	b := make([]byte, seal.KeySize)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestIndex: with the catalog's index, lists read it; what the index
// misses (a crash between the manifest and its entry) or keeps too long
// (a delete cut short) Reindex puts right from the object store.
func TestIndex(t *testing.T) {
	ctx := context.Background()
	s, err := blobstore.NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, &flaky{Store: s})
	ix := catalog(t)
	e.repo.WithIndex(ix)
	dir, _ := image(t, 64<<10)
	save(t, e, manifest("a", ""), dir, nil)
	save(t, e, manifest("b", ""), dir, nil)
	list := func() []string {
		t.Helper()
		ms, err := e.repo.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range ms {
			ids = append(ids, m.ID)
		}
		return ids
	}
	if got := list(); fmt.Sprint(got) != "[a b]" {
		t.Fatalf("list: %v", got)
	}
	// The index alone answers: an entry without its objects still lists
	// (what Reindex is for), and an object without its entry does not.
	if err := ix.DeleteManifest(ctx, "checkpoints/", "a"); err != nil {
		t.Fatal(err)
	}
	if err := ix.PutManifest(ctx, "checkpoints/", "ghost", []byte(`{"id":"ghost","version":1}`)); err != nil {
		t.Fatal(err)
	}
	if got := list(); fmt.Sprint(got) != "[b]" {
		t.Fatalf("list from the index: %v, want [b] (a unindexed; the ghost does not decode)", got)
	}
	// Reindex: a is back; the ghost stays, being younger than a minute
	// (it may be another node's save in flight), until it is older.
	n, err := e.repo.Reindex(ctx)
	if err != nil || n != 2 {
		t.Fatalf("reindex: %d, %v", n, err)
	}
	if got := list(); fmt.Sprint(got) != "[a b]" {
		t.Fatalf("after reindex: %v", got)
	}
	if err := ix.KeepManifests(ctx, "checkpoints/", []string{"a", "b"}, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	docs, _ := ix.Manifests(ctx, "checkpoints/")
	if len(docs) != 2 {
		t.Fatalf("index after pruning the ghost: %d entries", len(docs))
	}
	// Delete takes it out of both.
	if err := e.repo.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if got := list(); fmt.Sprint(got) != "[b]" {
		t.Fatalf("after delete: %v", got)
	}
	// One sandbox's manifests come from the index by sandbox id, the
	// others' never read.
	other := manifest("c", "")
	other.SandboxID = "sbx2"
	save(t, e, other, dir, nil)
	for _, tc := range []struct{ sandbox, want string }{{"sbx1", "[b]"}, {"sbx2", "[c]"}, {"sbx3", "[]"}} {
		ms, err := e.repo.ListOf(ctx, tc.sandbox)
		var ids []string
		for _, m := range ms {
			ids = append(ids, m.ID)
		}
		if err != nil || fmt.Sprint(ids) != tc.want {
			t.Errorf("ListOf(%s) = %v, %v; want %s", tc.sandbox, ids, err, tc.want)
		}
	}
	// The index answers, not the store: c unindexed is not listed.
	if err := ix.DeleteManifest(ctx, "checkpoints/", "c"); err != nil {
		t.Fatal(err)
	}
	if ms, err := e.repo.ListOf(ctx, "sbx2"); err != nil || len(ms) != 0 {
		t.Errorf("ListOf(sbx2) after c left the index: %d manifests, %v", len(ms), err)
	}
}
