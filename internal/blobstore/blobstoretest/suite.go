// Package blobstoretest is the conformance suite every blobstore.Store
// backend must pass.
package blobstoretest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/blobstore"
	"github.com/spacesandbox/space/internal/errdefs"
)

// Backend adapts a store to the suite.
type Backend struct {
	// New returns an empty store.
	New func(t *testing.T) blobstore.Store
	// Corrupt changes the stored bytes of key behind the store's back,
	// keeping its size and recorded checksum.
	Corrupt func(t *testing.T, s blobstore.Store, key string)
}

// Run runs every conformance test against b.
func Run(t *testing.T, b Backend) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s blobstore.Store, b Backend)
	}{
		{"RoundTrip", testRoundTrip},
		{"Overwrite", testOverwrite},
		{"List", testList},
		{"Delete", testDelete},
		{"NotFound", testNotFound},
		{"InvalidKeys", testInvalidKeys},
		{"SizeMismatch", testSizeMismatch},
		{"Checksum", testChecksum},
		{"Authenticated", testAuthenticated},
		{"CancelMidUpload", testCancel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, b.New(t), b) })
	}
}

// Random returns n reproducible pseudo-random bytes.
func Random(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// stream hides bytes.Reader's Seek/WriterTo so stores see a plain stream.
func stream(b []byte) io.Reader { return struct{ io.Reader }{bytes.NewReader(b)} }

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// Put stores data under key and checks the returned Info.
func Put(t *testing.T, s blobstore.Store, key string, data []byte) blobstore.Info {
	t.Helper()
	info, err := s.Put(context.Background(), key, stream(data), int64(len(data)))
	if err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", key, len(data), err)
	}
	if info.Key != key || info.Size != int64(len(data)) || info.SHA256 != sum(data) {
		t.Fatalf("Put(%q) info = %+v, want size %d sha256 %s", key, info, len(data), sum(data))
	}
	return info
}

func readAll(t *testing.T, s blobstore.Store, key string) ([]byte, error) {
	t.Helper()
	rc, _, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func testRoundTrip(t *testing.T, s blobstore.Store, _ Backend) {
	for _, tc := range []struct {
		name string
		size int
	}{{"empty", 0}, {"small", 1000}, {"12MiB", 12 << 20}, {"20MiB", 20 << 20}} {
		t.Run(tc.name, func(t *testing.T) {
			data := Random(uint64(tc.size), tc.size)
			key := "roundtrip/" + tc.name
			Put(t, s, key, data)
			got, err := readAll(t, s, key)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("Get(%q) = %d bytes, %v; want the %d bytes put", key, len(got), err, len(data))
			}
			info, err := s.Stat(context.Background(), key)
			if err != nil || info.Size != int64(tc.size) || info.SHA256 != sum(data) || info.Modified.IsZero() {
				t.Fatalf("Stat(%q) = %+v, %v", key, info, err)
			}
		})
	}
}

func testOverwrite(t *testing.T, s blobstore.Store, _ Backend) {
	Put(t, s, "over/k", []byte("first version"))
	Put(t, s, "over/k", []byte("second"))
	if got, err := readAll(t, s, "over/k"); err != nil || string(got) != "second" {
		t.Fatalf("after overwrite Get = %q, %v", got, err)
	}
}

func testList(t *testing.T, s blobstore.Store, _ Backend) {
	for _, k := range []string{"list/a/1", "list/a/2", "list/b/1", "listx"} {
		Put(t, s, k, []byte(k))
	}
	for _, tc := range []struct {
		prefix string
		want   string
	}{
		{"list/a/", "list/a/1 list/a/2"},
		{"list/", "list/a/1 list/a/2 list/b/1"},
		{"list", "list/a/1 list/a/2 list/b/1 listx"},
		{"list/a/2", "list/a/2"},
		{"nope/", ""},
	} {
		infos, err := s.List(context.Background(), tc.prefix)
		if err != nil {
			t.Fatalf("List(%q): %v", tc.prefix, err)
		}
		var keys []string
		for _, i := range infos {
			keys = append(keys, i.Key)
			if i.Size != int64(len(i.Key)) {
				t.Errorf("List(%q): %s size %d, want %d", tc.prefix, i.Key, i.Size, len(i.Key))
			}
		}
		if got := strings.Join(keys, " "); got != tc.want {
			t.Errorf("List(%q) = %q, want %q", tc.prefix, got, tc.want)
		}
	}
}

func testDelete(t *testing.T, s blobstore.Store, _ Backend) {
	ctx := context.Background()
	Put(t, s, "del/k", []byte("x"))
	for i := range 2 { // the second time the key is missing: still no error
		if err := s.Delete(ctx, "del/k"); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
	}
	if _, err := s.Stat(ctx, "del/k"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Stat after Delete: %v, want ErrNotFound", err)
	}
}

func testNotFound(t *testing.T, s blobstore.Store, _ Backend) {
	ctx := context.Background()
	if _, err := s.Stat(ctx, "missing/k"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Stat: %v, want ErrNotFound", err)
	}
	if _, _, err := s.Get(ctx, "missing/k"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get: %v, want ErrNotFound", err)
	}
}

func testInvalidKeys(t *testing.T, s blobstore.Store, _ Backend) {
	ctx := context.Background()
	for _, key := range []string{"", "/abs", "a/../b", "..", "a//b", "a/", "a\x00b", strings.Repeat("k", 1025), ".blobstore-tmp-x"} {
		if _, err := s.Put(ctx, key, stream(nil), 0); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Put(%q): %v, want ErrInvalidArgument", key, err)
		}
		if _, _, err := s.Get(ctx, key); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Get(%q): %v, want ErrInvalidArgument", key, err)
		}
		if _, err := s.Stat(ctx, key); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Stat(%q): %v, want ErrInvalidArgument", key, err)
		}
		if err := s.Delete(ctx, key); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Delete(%q): %v, want ErrInvalidArgument", key, err)
		}
	}
	if _, err := s.List(ctx, "../"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("List(../): %v, want ErrInvalidArgument", err)
	}
}

func testSizeMismatch(t *testing.T, s blobstore.Store, _ Backend) {
	_, err := s.Put(context.Background(), "size/k", stream([]byte("12345")), 10)
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("Put with wrong size: %v, want ErrInvalidArgument", err)
	}
	if _, err := s.Stat(context.Background(), "size/k"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Stat after failed Put: %v, want ErrNotFound", err)
	}
}

func testChecksum(t *testing.T, s blobstore.Store, b Backend) {
	Put(t, s, "sum/k", Random(7, 64<<10))
	b.Corrupt(t, s, "sum/k")
	if _, err := readAll(t, s, "sum/k"); !errors.Is(err, blobstore.ErrChecksum) {
		t.Fatalf("reading a corrupted object: %v, want ErrChecksum", err)
	}
}

// testAuthenticated: GetAuthenticated serves the bytes put and leaves
// their authentication to the caller (a corrupted object reads through).
func testAuthenticated(t *testing.T, s blobstore.Store, b Backend) {
	ctx := context.Background()
	data := Random(8, 64<<10)
	put := Put(t, s, "auth/k", data)
	read := func() ([]byte, blobstore.Info, error) {
		rc, info, err := s.GetAuthenticated(ctx, "auth/k")
		if err != nil {
			t.Fatalf("GetAuthenticated: %v", err)
		}
		defer rc.Close()
		got, err := io.ReadAll(rc)
		return got, info, err
	}
	got, info, err := read()
	if err != nil || !bytes.Equal(got, data) || info.Size != put.Size || info.SHA256 != put.SHA256 {
		t.Fatalf("GetAuthenticated = %d bytes, %+v, %v; want the %d bytes put, %+v", len(got), info, err, len(data), put)
	}
	b.Corrupt(t, s, "auth/k")
	if got, _, err = read(); err != nil || bytes.Equal(got, data) || len(got) != len(data) {
		t.Fatalf("GetAuthenticated of a corrupted object = %d bytes (same as put: %v), %v; want its changed bytes and no error", len(got), bytes.Equal(got, data), err)
	}
	if _, _, err := s.GetAuthenticated(ctx, "auth/missing"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("GetAuthenticated of a missing key: %v, want ErrNotFound", err)
	}
	if _, _, err := s.GetAuthenticated(ctx, "../k"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("GetAuthenticated(../k): %v, want ErrInvalidArgument", err)
	}
}

// cancelAfter cancels ctx once n bytes have been read, then keeps serving
// data: the store, not the source, must notice.
type cancelAfter struct {
	r      io.Reader
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.n -= n; c.n <= 0 {
		c.cancel()
	}
	return n, err
}

func testCancel(t *testing.T, s blobstore.Store, _ Backend) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	data := Random(3, 20<<20)
	src := &cancelAfter{r: stream(data), n: 10 << 20, cancel: cancel}
	if _, err := s.Put(ctx, "cancel/k", src, int64(len(data))); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put cancelled mid-upload: %v, want context.Canceled", err)
	}
	if _, err := s.Stat(context.Background(), "cancel/k"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Stat after cancelled Put: %v, want ErrNotFound", err)
	}
	if infos, err := s.List(context.Background(), ""); err != nil || len(infos) != 0 {
		t.Fatalf("List after cancelled Put = %v, %v; want nothing", infos, err)
	}
}
