package template

import (
	"archive/tar"
	"bytes"
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

// testAgent is the agent binary the test services put into images.
const testAgent = "agent"

// testEnv is a template service on a real store, object store and
// templates directory (no base template, no build sandboxes).
type testEnv struct {
	s           *Service
	st          *store.Bolt
	dir         string // the templates directory
	checkpoints *checkpoint.Repo
}

// newTestService opens a service; edit changes its config first.
func newTestService(t *testing.T, edit func(*Config)) *testEnv {
	t.Helper()
	tmp := t.TempDir()
	st, err := store.OpenBolt(filepath.Join(tmp, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	objects, err := blobstore.NewFS(filepath.Join(tmp, "objects"))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := seal.OpenKeyring(filepath.Join(tmp, "platform.json"))
	if err != nil {
		t.Fatal(err)
	}
	agent := filepath.Join(tmp, "space-agent")
	if err := os.WriteFile(agent, []byte(testAgent), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "templates")
	cfg := Config{
		Dir: dir, WorkDir: filepath.Join(tmp, "work"), LogDir: filepath.Join(tmp, "logs"), Store: st,
		Repo: checkpoint.NewRepoAt(objects, keys, "templates/"), Checkpoints: checkpoint.NewRepo(objects, keys),
		Agent: agent, CacheTTL: time.Hour,
	}
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return &testEnv{s: s, st: st, dir: dir, checkpoints: cfg.Checkpoints}
}

// layerTar is a plain tar of regular files (name -> content).
func layerTar(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// storeLayer saves a layer of files under key in the object store and
// returns its stored size.
func (e *testEnv) storeLayer(t *testing.T, key string, files map[string]string) int64 {
	t.Helper()
	path := filepath.Join(t.TempDir(), "layer.tar")
	if err := os.WriteFile(path, layerTar(t, files), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.art.saveLayer(context.Background(), key, path); err != nil {
		t.Fatal(err)
	}
	m, err := e.s.cfg.Repo.Get(context.Background(), layerID(key))
	if err != nil {
		t.Fatal(err)
	}
	return m.Bytes
}

// readyBuild records a ready build of template name made of layers, with
// the template pointing tags at it (the template made if missing).
func (e *testEnv) readyBuild(t *testing.T, id, name string, layers []string, start string, tags ...string) *store.Build {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	b := &store.Build{ID: id, Template: name, State: store.BuildReady, Tags: tags, CreatedAt: now, FinishedAt: now,
		Result: &store.BuildImage{Image: e.s.im.id(layers[len(layers)-1]), Key: layers[len(layers)-1], Layers: layers, Start: start}}
	tpl, err := e.st.GetTemplate(ctx, name)
	if err != nil {
		tpl = &store.Template{Name: name, Tags: map[string]store.TemplateTag{}, CreatedAt: now}
	}
	for _, tag := range tags {
		tpl.Tags[tag] = store.TemplateTag{Build: id, At: now}
	}
	tpl.UpdatedAt = now
	if err := e.st.PutBuild(ctx, b, tpl); err != nil {
		t.Fatal(err)
	}
	return b
}

// key is a cache key for tests (64 hex digits, as recipe makes them).
func key(c byte) string { return string(bytes.Repeat([]byte{c}, 64)) }
