package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
)

// sumXattr holds an object's SHA-256 (hex). An xattr set on the temp file
// before the rename travels with it, so data and checksum appear under the
// key in one atomic step; a sidecar file would need a second rename.
const sumXattr = "user.space.sha256"

const tmpPrefix = reservedPrefix + "tmp-"

// FS is a Store in a local directory: one file per object at root/key.
// The directory's filesystem must support user xattrs (ext4, xfs, btrfs,
// tmpfs on Linux >= 6.6).
type FS struct {
	root string
}

var _ Store = (*FS)(nil)

// NewFS opens (creating, mode 0700) a directory store at root.
func NewFS(root string) (*FS, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("blobstore: resolve %q: %w", root, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("blobstore: create store dir: %w", err)
	}
	return &FS{root: abs}, nil
}

func (s *FS) path(key string) string { return filepath.Join(s.root, filepath.FromSlash(key)) }

// Put writes to a temp file beside the target, records the checksum, fsyncs,
// renames over the key and fsyncs the directory: a crash leaves either the
// old object or the new one, never a partial one.
func (s *FS) Put(ctx context.Context, key string, r io.Reader, size int64) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, err
	}
	dst := s.path(key)
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Info{}, fsErr("put", key, err)
	}
	f, err := os.CreateTemp(dir, tmpPrefix+"*") // mode 0600
	if err != nil {
		return Info{}, fsErr("put", key, err)
	}
	done := false
	defer func() {
		if !done {
			f.Close()
			os.Remove(f.Name())
		}
	}()

	hr := newHashingReader(ctxReader{ctx, r})
	buf := make([]byte, 1<<20)
	if _, err := io.CopyBuffer(f, hr, buf); err != nil {
		return Info{}, fsErr("put", key, err)
	}
	if err := checkSize(key, size, hr.n); err != nil {
		return Info{}, err
	}
	sum := hr.sum()
	if err := unix.Fsetxattr(int(f.Fd()), sumXattr, []byte(sum), 0); err != nil {
		return Info{}, fsErr("put: record checksum (does the filesystem support user xattrs?)", key, err)
	}
	if err := f.Sync(); err != nil {
		return Info{}, fsErr("put: fsync", key, err)
	}
	st, err := f.Stat()
	if err != nil {
		return Info{}, fsErr("put", key, err)
	}
	if err := f.Close(); err != nil {
		return Info{}, fsErr("put", key, err)
	}
	if err := ctx.Err(); err != nil {
		return Info{}, fmt.Errorf("blobstore: put %q: %w", key, err)
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		return Info{}, fsErr("put: rename", key, err)
	}
	done = true
	if err := syncDir(dir); err != nil {
		return Info{}, fsErr("put: fsync dir", key, err)
	}
	return Info{Key: key, Size: hr.n, SHA256: sum, Modified: st.ModTime()}, nil
}

// Get opens key; see Store.Get for the verification at EOF.
func (s *FS) Get(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	f, info, err := s.open(key)
	if err != nil {
		return nil, Info{}, err
	}
	return newVerifyingReader(f, key, info.Size, info.SHA256), info, nil
}

// GetAuthenticated opens key; see Store.GetAuthenticated.
func (s *FS) GetAuthenticated(ctx context.Context, key string) (io.ReadCloser, Info, error) {
	f, info, err := s.open(key)
	if err != nil {
		return nil, Info{}, err
	}
	return newSizeCheckingReader(f, key, info.Size), info, nil
}

func (s *FS) open(key string) (*os.File, Info, error) {
	if err := ValidateKey(key); err != nil {
		return nil, Info{}, err
	}
	f, err := os.Open(s.path(key))
	if err != nil {
		return nil, Info{}, fsErr("get", key, err)
	}
	info, err := fileInfo(f, key)
	if err != nil {
		f.Close()
		return nil, Info{}, err
	}
	return f, info, nil
}

// Stat describes key.
func (s *FS) Stat(ctx context.Context, key string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, err
	}
	f, err := os.Open(s.path(key))
	if err != nil {
		return Info{}, fsErr("stat", key, err)
	}
	defer f.Close()
	return fileInfo(f, key)
}

// Delete removes key. Emptied directories are left in place: removing them
// would race with a concurrent Put creating a file in them.
func (s *FS) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	st, err := os.Lstat(s.path(key))
	if errors.Is(err, fs.ErrNotExist) || (err == nil && st.IsDir()) {
		return nil
	}
	if err := os.Remove(s.path(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fsErr("delete", key, err)
	}
	return nil
}

// List walks the directory holding prefix and keeps keys that start with it.
func (s *FS) List(ctx context.Context, prefix string) ([]Info, error) {
	if err := validatePrefix(prefix); err != nil {
		return nil, err
	}
	start := s.root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		start = s.path(prefix[:i])
	}
	var out []Info
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() || !d.Type().IsRegular() || strings.HasPrefix(d.Name(), reservedPrefix) {
			return nil
		}
		rel, err := filepath.Rel(s.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		info, err := s.Stat(ctx, key)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil // deleted while we walked
		}
		if err != nil {
			return err
		}
		out = append(out, info)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("blobstore: list %q: %w", prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func fileInfo(f *os.File, key string) (Info, error) {
	st, err := f.Stat()
	if err != nil {
		return Info{}, fsErr("stat", key, err)
	}
	if !st.Mode().IsRegular() {
		return Info{}, errdefs.New(errdefs.ErrNotFound, "object %q not found", key)
	}
	buf := make([]byte, 128)
	n, err := unix.Fgetxattr(int(f.Fd()), sumXattr, buf)
	if err != nil {
		return Info{}, fmt.Errorf("%w: object %q has no recorded sha256: %v", ErrChecksum, key, err)
	}
	return Info{Key: key, Size: st.Size(), SHA256: string(buf[:n]), Modified: st.ModTime()}, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// fsErr classes a filesystem error for key.
func fsErr(op, key string, err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("blobstore: %s %q: %w", op, key, err)
	case errors.Is(err, fs.ErrNotExist):
		return errdefs.Wrap(errdefs.ErrNotFound, err, "object %q not found", key)
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.EEXIST):
		// os.Rename answers EEXIST, not EISDIR, when the target is a
		// directory (one a longer key made, even if since deleted).
		return errdefs.Wrap(errdefs.ErrFailedPrecondition, err, "object key %q collides with another key's directory", key)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return errdefs.Wrap(errdefs.ErrNoSpace, err, "object store is out of space writing %q", key)
	}
	return fmt.Errorf("blobstore: %s %q: %w", op, key, err)
}

// ctxReader fails reads once ctx is done, so a cancelled Put stops promptly
// even when the source itself never blocks.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
