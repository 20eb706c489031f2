package template

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/recipe"
)

// bomb is a gzip tar of one file of n zero bytes: a few KiB that expand
// to n.
func bomb(t *testing.T, n int64) []byte {
	t.Helper()
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: "zeros", Mode: 0o644, Size: n, Typeflag: tar.TypeReg})
	zero := make([]byte, 1<<20)
	for left := n; left > 0; left -= int64(len(zero)) {
		tw.Write(zero[:min(left, int64(len(zero)))])
	}
	tw.Close()
	zw.Close()
	return b.Bytes()
}

func writeTemp(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "files.tar")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// TestPlanCopyBounds: a COPY of a file set that expands past MaxContext
// fails as it is read, saying which setting, and leaves no part on disk;
// a tenant's COPYs together hold at most MaxContext; one within works.
func TestPlanCopyBounds(t *testing.T) {
	const limit = 4 << 20
	e := newTestService(t, func(c *Config) { c.MaxContext = limit })
	cp := &recipe.Copy{Src: []string{"."}, Dest: "/app/"}
	for _, tc := range []struct {
		name string
		size int64
		ok   bool
	}{
		{"small", 1 << 20, true},
		{"bomb", 64 << 20, false},
		{"just over", limit + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := bomb(t, tc.size)
			work := t.TempDir()
			plan, err := planCopy(writeTemp(t, data), cp, "/", work, e.s.copyBounds("t1"))
			if tc.ok {
				if err != nil {
					t.Fatalf("a context within the limit: %v", err)
				}
				if e.s.contexts.heldBy("t1") == 0 {
					t.Errorf("the parts written are not charged to the tenant")
				}
				plan.release()
			} else if errdefs.Class(err) != errdefs.ErrTooLarge || !strings.Contains(err.Error(), "SPACE_TEMPLATE_MAX_CONTEXT") {
				t.Fatalf("err = %v, want too large naming SPACE_TEMPLATE_MAX_CONTEXT (%d compressed bytes)", err, len(data))
			}
			if n := dirBytes(t, work); n != 0 {
				t.Errorf("%d bytes left in the work dir", n)
			}
			if h := e.s.contexts.heldBy("t1"); h != 0 {
				t.Errorf("the tenant still holds %d bytes", h)
			}
		})
	}
	t.Run("tenant total", func(t *testing.T) {
		work := t.TempDir()
		first, err := planCopy(writeTemp(t, bomb(t, 3<<20)), cp, "/", work, e.s.copyBounds("t1"))
		if err != nil {
			t.Fatal(err)
		}
		defer first.release()
		_, err = planCopy(writeTemp(t, bomb(t, 3<<20)), cp, "/", work, e.s.copyBounds("t1"))
		if errdefs.Class(err) != errdefs.ErrTooLarge {
			t.Fatalf("a second COPY past the tenant's total: err = %v, want too large", err)
		}
		other, err := planCopy(writeTemp(t, bomb(t, 3<<20)), cp, "/", work, e.s.copyBounds("t2"))
		if err != nil {
			t.Fatalf("another tenant's COPY: %v", err)
		}
		other.release()
	})
}

// TestReadFilesSparse: a sparse entry's size counts, though its holes are
// not in the stream (Go's tar reader expands a PAX sparse entry to its
// real size).
func TestReadFilesSparse(t *testing.T) {
	var b bytes.Buffer
	// A PAX header (Go's writer will not write sparse records) for a 1 GiB
	// file of which nothing is stored: its body is the sparse map only.
	var recs string
	for _, kv := range [][2]string{{"GNU.sparse.major", "1"}, {"GNU.sparse.minor", "0"}, {"GNU.sparse.name", "holes"}, {"GNU.sparse.realsize", "1073741824"}} {
		rec := " " + kv[0] + "=" + kv[1] + "\n"
		n := len(rec) + 2
		if len(strconv.Itoa(n)+rec) != n {
			n++
		}
		recs += strconv.Itoa(n) + rec
	}
	b.Write(ustarBlock("PaxHeaders/holes", 'x', len(recs)))
	b.WriteString(recs)
	b.Write(make([]byte, (512-len(recs)%512)%512))
	b.Write(ustarBlock("holes", '0', 512))
	b.Write(append([]byte("0\n"), make([]byte, 510)...))
	b.Write(make([]byte, 1024))
	var sawSize int64
	err := readFiles(writeTemp(t, b.Bytes()), 1<<20, func(h *tar.Header, _ io.Reader) error { sawSize = h.Size; return nil })
	if errdefs.Class(err) != errdefs.ErrTooLarge {
		t.Fatalf("err = %v (entry size %d), want too large", err, sawSize)
	}
	// The positive control: the same entry passes a limit above its size.
	if err := readFiles(writeTemp(t, b.Bytes()), 2<<30, func(h *tar.Header, _ io.Reader) error { sawSize = h.Size; return nil }); err != nil || sawSize != 1<<30 {
		t.Fatalf("within the limit: err %v, size %d, want nil and 1 GiB", err, sawSize)
	}
}

// ustarBlock is a ustar header block.
func ustarBlock(name string, typ byte, size int) []byte {
	h := make([]byte, 512)
	copy(h, name)
	copy(h[100:], "0000644\x00")
	copy(h[108:], "0000000\x00")
	copy(h[116:], "0000000\x00")
	copy(h[124:], fmt.Sprintf("%011o\x00", size))
	copy(h[136:], "00000000000\x00")
	copy(h[148:], "        ")
	h[156] = typ
	copy(h[257:], "ustar\x0000")
	sum := 0
	for _, c := range h {
		sum += int(c)
	}
	copy(h[148:], fmt.Sprintf("%06o\x00 ", sum))
	return h
}

// TestPutFilesDiskFloor: an upload that would take the disk below its
// floor is refused (507's class) and leaves nothing; one above it works.
func TestPutFilesDiskFloor(t *testing.T) {
	ctx := context.Background()
	data := []byte("files")
	sum := sha256.Sum256(data)
	hash := hex.EncodeToString(sum[:])
	full := newTestService(t, func(c *Config) { c.DiskFloor = 1 << 62 })
	err := full.s.PutFiles(ctx, hash, bytes.NewReader(data), true, 1<<20)
	if errdefs.Class(err) != errdefs.ErrNoSpace {
		t.Fatalf("err = %v, want no space", err)
	}
	if ok, _ := full.s.HasFiles(ctx, hash); ok {
		t.Errorf("the refused upload was stored")
	}
	if n := dirBytes(t, full.s.art.work); n != 0 {
		t.Errorf("%d bytes left in the work dir", n)
	}
	if err := full.s.AdmitUpload(1); errdefs.Class(err) != errdefs.ErrNoSpace {
		t.Errorf("AdmitUpload on a full disk: %v, want no space", err)
	}
	roomy := newTestService(t, func(c *Config) { c.DiskFloor = 1 })
	if err := roomy.s.AdmitUpload(1 << 20); err != nil {
		t.Errorf("AdmitUpload with room: %v", err)
	}
	if err := roomy.s.AdmitUpload(1 << 62); errdefs.Class(err) != errdefs.ErrNoSpace {
		t.Errorf("AdmitUpload of more than the disk: %v, want no space", err)
	}
	if err := roomy.s.PutFiles(ctx, hash, bytes.NewReader(data), true, 1<<20); err != nil {
		t.Fatalf("an upload with room: %v", err)
	}
}
