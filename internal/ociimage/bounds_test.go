package ociimage

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

// TestLayoutSparseBlob: an OCI layout archive unpacks to at most its own
// size; a PAX sparse entry (whose holes are not in the archive) that would
// unpack to 64 MiB of zeros is refused before it is written.
func TestLayoutSparseBlob(t *testing.T) {
	var b bytes.Buffer
	file := func(name string, body []byte) {
		b.Write(ustar(name, '0', len(body)))
		b.Write(body)
		b.Write(make([]byte, (512-len(body)%512)%512))
	}
	file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	file("index.json", []byte(`{"schemaVersion":2,"manifests":[]}`))
	var recs string
	for _, kv := range [][2]string{{"GNU.sparse.major", "1"}, {"GNU.sparse.minor", "0"}, {"GNU.sparse.name", "blobs/sha256/zeros"}, {"GNU.sparse.realsize", strconv.Itoa(64 << 20)}} {
		rec := " " + kv[0] + "=" + kv[1] + "\n"
		n := len(rec) + 2
		if len(strconv.Itoa(n)+rec) != n {
			n++
		}
		recs += strconv.Itoa(n) + rec
	}
	b.Write(ustar("PaxHeaders/zeros", 'x', len(recs)))
	b.WriteString(recs)
	b.Write(make([]byte, (512-len(recs)%512)%512))
	file("zeros", append([]byte("0\n"), make([]byte, 510)...)) // the sparse map: no data
	b.Write(make([]byte, 1024))

	dir := t.TempDir()
	archive := filepath.Join(dir, "layout.tar")
	if err := os.WriteFile(archive, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	scratch := filepath.Join(dir, "scratch")
	_, err := FromArchive(archive, scratch)
	if errdefs.Class(err) != errdefs.ErrTooLarge {
		t.Fatalf("err = %v, want too large", err)
	}
	var n int64
	filepath.Walk(scratch, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	if n > int64(b.Len()) {
		t.Errorf("%d bytes unpacked from a %d-byte archive", n, b.Len())
	}
}

// ustar is a ustar header block.
func ustar(name string, typ byte, size int) []byte {
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
