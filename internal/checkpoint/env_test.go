package checkpoint_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/spacesandbox/space/internal/blobstore"
	"github.com/spacesandbox/space/internal/blobstore/blobstoretest"
	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/seal"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/pgtest"
)

// env is a repository on one backend, behind a store wrapper that can make
// the backend die in the middle of an upload.
type env struct {
	store *flaky
	keys  *seal.Keyring
	repo  *checkpoint.Repo
	index *store.Postgres // nil: no index
	// corrupt flips a stored byte of key behind the store's back, keeping
	// its recorded checksum.
	corrupt func(t *testing.T, key string)
}

type backend struct {
	name string
	new  func(t *testing.T) *env
}

var backends = []backend{
	{"fs", fsEnv},
	// The local store with the cluster's manifest index: a real
	// PostgreSQL catalog (lists read it, not the store).
	{"fs+catalog", func(t *testing.T) *env {
		e := fsEnv(t)
		e.index = catalog(t)
		e.repo.WithIndex(e.index)
		return e
	}},
	{"s3", func(t *testing.T) *env {
		v := blobstoretest.StartVersity(t)
		s := v.Store(t)
		e := newEnv(t, &flaky{Store: s, stop: v.Stop, start: func() { v.Start(t) }})
		e.corrupt = func(t *testing.T, key string) {
			ctx, c := context.Background(), s.Client()
			head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("space"), Key: &key})
			if err != nil {
				t.Fatal(err)
			}
			b := readRaw(t, s, key)
			b[100] ^= 1
			if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("space"), Key: &key,
				Body: bytes.NewReader(b), Metadata: head.Metadata}); err != nil {
				t.Fatal(err)
			}
		}
		return e
	}},
}

// fsEnv is a repository on the local-directory store.
func fsEnv(t *testing.T) *env {
	root := t.TempDir()
	s, err := blobstore.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, &flaky{Store: s})
	e.corrupt = func(t *testing.T, key string) {
		f, err := os.OpenFile(filepath.Join(root, key), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b := make([]byte, 1)
		f.ReadAt(b, 100)
		if _, err := f.WriteAt([]byte{b[0] ^ 1}, 100); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func newEnv(t *testing.T, f *flaky) *env {
	t.Helper()
	keys, err := seal.OpenKeyring(filepath.Join(t.TempDir(), "platform.json"))
	if err != nil {
		t.Fatal(err)
	}
	f.budget = -1
	return &env{store: f, keys: keys, repo: checkpoint.NewRepo(f, keys)}
}

func eachBackend(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b.new(t))
		})
	}
}

// flaky is a store that dies once budget bytes of uploads have passed: an
// S3 server is killed (stop), the fs store starts failing every call as an
// unreachable store would. revive brings it back.
type flaky struct {
	blobstore.Store
	stop, start func() // S3 only

	mu     sync.Mutex
	budget int64 // < 0: unlimited
	down   bool
	// landed, if set, is closed when an upload of a key ending in
	// landedKey completes; the store does not die before it (see dieAfter).
	landed    chan struct{}
	landedKey string
}

var errDown = errdefs.New(errdefs.ErrUnavailable, "object store is unreachable (test)")

// dieAfter arms the store to die after n more upload bytes, and not before
// an upload of a key ending in landedKey (if not "") has completed: uploads
// run side by side, and on a loaded host the big one could spend the
// budget before a small one started (the store then dies with nothing of
// the checkpoint stored: TestStoreDiesMidUpload saw "not found" where it
// wants "incomplete").
func (f *flaky) dieAfter(n int64, landedKey string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.budget, f.landed, f.landedKey = n, nil, landedKey
	if landedKey != "" {
		f.landed = make(chan struct{})
	}
}

func (f *flaky) revive() {
	f.mu.Lock()
	f.down, f.budget = false, -1
	f.mu.Unlock()
	if f.start != nil {
		f.start()
	}
}

// fail reports whether calls fail here (fs) rather than in the dead server.
func (f *flaky) fail() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.down && f.stop == nil
}

func (f *flaky) consume(n int) {
	f.mu.Lock()
	if f.budget < 0 || f.down {
		f.mu.Unlock()
		return
	}
	f.budget -= int64(n)
	left, landed := f.budget, f.landed
	f.mu.Unlock()
	if left > 0 {
		return
	}
	if landed != nil {
		select { // the upload that must land first (bounded: never hang a test)
		case <-landed:
		case <-time.After(time.Minute):
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.down {
		f.down = true
		if f.stop != nil {
			f.stop()
		}
	}
}

type countingReader struct {
	r io.Reader
	f *flaky
}

func (c countingReader) Read(p []byte) (int, error) {
	if c.f.fail() {
		return 0, errDown
	}
	n, err := c.r.Read(p)
	c.f.consume(n)
	return n, err
}

func (f *flaky) Put(ctx context.Context, key string, r io.Reader, size int64) (blobstore.Info, error) {
	if f.fail() {
		return blobstore.Info{}, errDown
	}
	info, err := f.Store.Put(ctx, key, countingReader{r, f}, size)
	f.mu.Lock()
	if err == nil && f.landed != nil && strings.HasSuffix(key, f.landedKey) {
		close(f.landed)
		f.landed = nil
	}
	f.mu.Unlock()
	return info, err
}

func (f *flaky) Get(ctx context.Context, key string) (io.ReadCloser, blobstore.Info, error) {
	if f.fail() {
		return nil, blobstore.Info{}, errDown
	}
	return f.Store.Get(ctx, key)
}

func (f *flaky) GetAuthenticated(ctx context.Context, key string) (io.ReadCloser, blobstore.Info, error) {
	if f.fail() {
		return nil, blobstore.Info{}, errDown
	}
	return f.Store.GetAuthenticated(ctx, key)
}

func (f *flaky) Stat(ctx context.Context, key string) (blobstore.Info, error) {
	if f.fail() {
		return blobstore.Info{}, errDown
	}
	return f.Store.Stat(ctx, key)
}

func (f *flaky) Delete(ctx context.Context, key string) error {
	if f.fail() {
		return errDown
	}
	return f.Store.Delete(ctx, key)
}

func (f *flaky) List(ctx context.Context, prefix string) ([]blobstore.Info, error) {
	if f.fail() {
		return nil, errDown
	}
	return f.Store.List(ctx, prefix)
}

func readRaw(t *testing.T, s blobstore.Store, key string) []byte {
	t.Helper()
	rc, _, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// keys lists every object key in the store.
func keys(t *testing.T, s blobstore.Store) []string {
	t.Helper()
	infos, err := s.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, i := range infos {
		out = append(out, i.Key)
	}
	return out
}

// pg is the package's PostgreSQL server, started by the first test that
// needs it; each test gets a database of its own.
var (
	pgMu  sync.Mutex
	pgSrv *pgtest.Server
)

func catalog(t *testing.T) *store.Postgres {
	t.Helper()
	pgMu.Lock()
	if pgSrv == nil {
		pgSrv = pgtest.Start(keep{t})
	}
	srv := pgSrv
	pgMu.Unlock()
	p, err := store.OpenPostgres(context.Background(), srv.NewDatabase(t), "n1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// keep gives the shared server's cleanup to TestMain (called with pgMu
// held, by catalog).
type keep struct{ *testing.T }

func (keep) Cleanup(f func()) { cleanups = append(cleanups, f) }

var cleanups []func()

func TestMain(m *testing.M) {
	code := m.Run()
	for _, f := range cleanups {
		f()
	}
	os.Exit(code)
}
