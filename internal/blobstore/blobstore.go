// Package blobstore stores immutable artifacts (disk snapshots, checkpoint
// images, manifests) by key. Two backends implement Store: a local directory
// (the default, see fs.go) and S3 (see s3.go). Both record a SHA-256 of every
// object while it streams in and verify it when it streams out, so corruption
// at rest or in transit surfaces as ErrChecksum instead of a bad restore
// (unless the reader authenticates the bytes itself: GetAuthenticated).
package blobstore

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Store is an object store. Every method takes the caller's context first;
// cancelling it aborts a transfer and leaves no object under the key.
type Store interface {
	// Put streams r (size bytes, or -1 if unknown) under key, replacing any
	// object there. The object becomes visible only once complete.
	Put(ctx context.Context, key string, r io.Reader, size int64) (Info, error)
	// Get opens key. The reader verifies size and SHA-256 at EOF and returns
	// an error wrapping ErrChecksum instead of io.EOF when they differ.
	Get(ctx context.Context, key string) (io.ReadCloser, Info, error)
	// GetAuthenticated opens key for a caller that authenticates every
	// byte itself, as the AEAD stream of a sealed checkpoint artifact does:
	// the reader checks the size recorded at Put but not the SHA-256, a
	// second pass over the bytes (about as much CPU as the decryption and
	// the write of a restored image together) that proves less than the
	// AEAD's tags.
	GetAuthenticated(ctx context.Context, key string) (io.ReadCloser, Info, error)
	// Stat describes key without reading it.
	Stat(ctx context.Context, key string) (Info, error)
	// Delete removes key; a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List returns the objects whose keys start with prefix, sorted by key.
	// SHA256 may be empty where the backend cannot list it cheaply (S3);
	// Stat always fills it.
	List(ctx context.Context, prefix string) ([]Info, error)
}

// Info describes a stored object.
type Info struct {
	Key      string
	Size     int64
	SHA256   string // lowercase hex
	Modified time.Time
}

// ErrChecksum means an object's bytes do not match the size or SHA-256
// recorded when it was stored.
var ErrChecksum = errors.New("blobstore: checksum mismatch")

// MaxKeyLen is the longest key accepted, in bytes (S3's limit).
const MaxKeyLen = 1024

// MaxKeyElementLen is the longest element of a key, in bytes: the local
// backend stores each element as a file or directory name (NAME_MAX).
const MaxKeyElementLen = 255

// reservedPrefix starts the names backends use for their own bookkeeping
// (fs temp files, S3 staging objects); no key element may start with it.
const reservedPrefix = ".blobstore-"

// ValidateKey reports whether key is usable on every backend: slash-separated
// non-empty elements of at most MaxKeyElementLen bytes, none "." or "..", no
// leading slash, no NUL, at most MaxKeyLen bytes.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return errdefs.New(errdefs.ErrInvalidArgument, "object key is empty")
	case len(key) > MaxKeyLen:
		return errdefs.New(errdefs.ErrInvalidArgument, "object key is %d bytes, longer than %d", len(key), MaxKeyLen)
	case strings.ContainsRune(key, 0):
		return errdefs.New(errdefs.ErrInvalidArgument, "object key contains NUL")
	case strings.HasPrefix(key, "/"):
		return errdefs.New(errdefs.ErrInvalidArgument, "object key %q starts with /", key)
	}
	for _, el := range strings.Split(key, "/") {
		switch {
		case el == "", el == ".", el == "..":
			return errdefs.New(errdefs.ErrInvalidArgument, "object key %q has an empty, . or .. element", key)
		case len(el) > MaxKeyElementLen:
			return errdefs.New(errdefs.ErrInvalidArgument, "object key %q has an element longer than %d bytes", key, MaxKeyElementLen)
		case strings.HasPrefix(el, reservedPrefix):
			return errdefs.New(errdefs.ErrInvalidArgument, "object key %q uses the reserved prefix %q", key, reservedPrefix)
		}
	}
	return nil
}

// validatePrefix is ValidateKey for List prefixes, which may be empty or end
// in "/" (or in a partial element).
func validatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	trimmed := strings.TrimSuffix(prefix, "/")
	if trimmed == "" {
		return errdefs.New(errdefs.ErrInvalidArgument, "list prefix %q starts with /", prefix)
	}
	if err := ValidateKey(trimmed); err != nil {
		return errdefs.Wrap(errdefs.ErrInvalidArgument, err, "invalid list prefix %q", prefix)
	}
	return nil
}
