package blobstore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"

	"github.com/spacesandbox/space/internal/errdefs"
)

// verifyingReader passes an object's bytes through and, at EOF, checks them
// against the size and SHA-256 recorded at Put. A mismatch replaces io.EOF
// with an error wrapping ErrChecksum, so a caller that reads to the end can
// never mistake a corrupt object for a good one.
type verifyingReader struct {
	rc       io.ReadCloser
	key      string
	wantSize int64
	wantSum  string
	h        hash.Hash // nil: the size only (GetAuthenticated)
	n        int64
	err      error // sticky result once decided
}

func newVerifyingReader(rc io.ReadCloser, key string, size int64, sum string) *verifyingReader {
	return &verifyingReader{rc: rc, key: key, wantSize: size, wantSum: sum, h: sha256.New()}
}

// newSizeCheckingReader checks the size alone, for a caller that
// authenticates the bytes itself.
func newSizeCheckingReader(rc io.ReadCloser, key string, size int64) *verifyingReader {
	return &verifyingReader{rc: rc, key: key, wantSize: size}
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.rc.Read(p)
	if v.h != nil {
		v.h.Write(p[:n])
	}
	v.n += int64(n)
	if v.n > v.wantSize {
		v.err = fmt.Errorf("%w: object %q is longer than its recorded %d bytes", ErrChecksum, v.key, v.wantSize)
		return n, v.err
	}
	if err == io.EOF {
		v.err = v.check()
		return n, v.err
	}
	if err != nil {
		v.err = fmt.Errorf("blobstore: read %q: %w", v.key, err)
	}
	return n, v.err
}

func (v *verifyingReader) check() error {
	if v.n != v.wantSize {
		return fmt.Errorf("%w: object %q has %d bytes, recorded %d", ErrChecksum, v.key, v.n, v.wantSize)
	}
	if v.h == nil {
		return io.EOF
	}
	if got := hex.EncodeToString(v.h.Sum(nil)); got != v.wantSum {
		return fmt.Errorf("%w: object %q has sha256 %s, recorded %s", ErrChecksum, v.key, got, v.wantSum)
	}
	return io.EOF
}

func (v *verifyingReader) Close() error { return v.rc.Close() }

// hashingReader hashes and counts what passes through it on the way in.
type hashingReader struct {
	r io.Reader
	h hash.Hash
	n int64
}

func newHashingReader(r io.Reader) *hashingReader { return &hashingReader{r: r, h: sha256.New()} }

func (hr *hashingReader) Read(p []byte) (int, error) {
	n, err := hr.r.Read(p)
	hr.h.Write(p[:n])
	hr.n += int64(n)
	return n, err
}

func (hr *hashingReader) sum() string { return hex.EncodeToString(hr.h.Sum(nil)) }

// checkSize reports a short or long stream against the size the caller declared.
func checkSize(key string, declared, got int64) error {
	if declared >= 0 && declared != got {
		return errdefs.New(errdefs.ErrInvalidArgument, "put %q: reader gave %d bytes, declared %d", key, got, declared)
	}
	return nil
}
