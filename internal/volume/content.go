package volume

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

// The content methods read and write a volume's files from the host,
// without a sandbox. Every path is resolved by os.Root under the volume's
// root: ".." cannot climb out, and a symlink (which a sandbox can plant)
// is followed only while it stays inside the volume; one that points out
// (at /etc/shadow, say) is refused, never followed on the host. What
// clients see of a path is the path they asked for, relative to the
// volume's root; host paths appear in no answer and no error.

// Entry describes one file or directory of a volume.
type Entry struct {
	Name string
	// Type is "file", "directory", "symlink" or "unknown".
	Type string
	// Path is relative to the volume's root, starting with "/".
	Path  string
	Size  int64
	Mode  uint32 // permission bits
	UID   uint32
	GID   uint32
	Atime time.Time
	Mtime time.Time
	Ctime time.Time
	// Target is a symlink's target, as written in the link.
	Target string
}

// Attrs are the owner and mode to give a file or directory; nil fields
// take the defaults (the sandboxes' user, 0644 files, 0755 directories).
type Attrs struct {
	UID, GID *uint32
	Mode     *uint32
}

// maxDepth bounds a recursive listing; maxEntries its size.
const (
	maxDepth   = 32
	maxEntries = 100000
)

// openRoot opens volume ref's root for a content call and takes its content
// lock shared; done closes both.
func (s *Service) openRoot(ctx context.Context, ref string) (*os.Root, *string, func(), error) {
	v, err := s.lookup(ctx, ref)
	if err != nil {
		return nil, nil, nil, err
	}
	unlock := s.lockContent(v.ID, false)
	root, err := os.OpenRoot(s.disk.root(v.ID))
	if err != nil {
		unlock()
		return nil, nil, nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "volume %q is not available on this node", v.Name)
	}
	return root, &v.Name, func() { root.Close(); unlock() }, nil
}

// fsError classes an error of a content operation on shown; its message
// names only the path the client gave.
func fsError(err error, shown string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return errdefs.New(errdefs.ErrNotFound, "path %s not found in the volume", shown)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return errdefs.Wrap(errdefs.ErrNoSpace, err, "the volume is full: %s was not written", shown)
	case errors.Is(err, fs.ErrExist):
		return errdefs.New(errdefs.ErrAlreadyExists, "path %s already exists in the volume", shown)
	case errors.Is(err, syscall.EISDIR):
		return errdefs.New(errdefs.ErrInvalidArgument, "path %s is a directory", shown)
	case errors.Is(err, syscall.ELOOP), strings.Contains(err.Error(), "escapes"):
		return errdefs.Wrap(errdefs.ErrInvalidArgument, err, "path %s leads outside the volume (through a symlink): refused", shown)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return errdefs.New(errdefs.ErrInvalidArgument, "path %s is too long", shown)
	}
	return errdefs.Wrap(errdefs.ErrUnavailable, err, "volume operation on %s failed", shown)
}

// Stat describes path p of volume ref (a symlink is described, not
// followed).
func (s *Service) Stat(ctx context.Context, ref, p string) (*Entry, error) {
	name, shown, err := contentPath(p)
	if err != nil {
		return nil, err
	}
	root, _, done, err := s.openRoot(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer done()
	return entry(root, name, shown)
}

func entry(root *os.Root, name, shown string) (*Entry, error) {
	fi, err := root.Lstat(name)
	if err != nil {
		return nil, fsError(err, shown)
	}
	e := &Entry{Name: path.Base(shown), Path: shown, Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), Mtime: fi.ModTime().UTC()}
	if shown == "/" {
		e.Name = "/"
	}
	switch {
	case fi.Mode().IsRegular():
		e.Type = "file"
	case fi.IsDir():
		e.Type = "directory"
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Type = "symlink"
		if t, err := root.Readlink(name); err == nil {
			e.Target = t
		}
	default:
		e.Type = "unknown"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.UID, e.GID = st.Uid, st.Gid
		e.Atime = time.Unix(st.Atim.Sec, st.Atim.Nsec).UTC()
		e.Ctime = time.Unix(st.Ctim.Sec, st.Ctim.Nsec).UTC()
	}
	return e, nil
}

// ListDir lists directory p of volume ref, depth levels deep (1: its
// entries only). Symlinked directories are listed, not entered.
func (s *Service) ListDir(ctx context.Context, ref, p string, depth int) ([]*Entry, error) {
	if depth == 0 {
		depth = 1
	}
	if depth < 1 || depth > maxDepth {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "depth must be between 1 and %d", maxDepth)
	}
	name, shown, err := contentPath(p)
	if err != nil {
		return nil, err
	}
	root, _, done, err := s.openRoot(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer done()
	top, err := entry(root, name, shown)
	if err != nil {
		return nil, err
	}
	if top.Type != "directory" {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "path %s is not a directory", shown)
	}
	var out []*Entry
	var walk func(name, shown string, level int) error
	walk = func(name, shown string, level int) error {
		f, err := root.Open(name)
		if err != nil {
			return fsError(err, shown)
		}
		des, err := f.ReadDir(-1)
		f.Close()
		if err != nil {
			return fsError(err, shown)
		}
		sort.Slice(des, func(i, j int) bool { return des[i].Name() < des[j].Name() })
		for _, de := range des {
			cn, cs := path.Join(name, de.Name()), path.Join(shown, de.Name())
			e, err := entry(root, cn, cs)
			if err != nil {
				continue // gone since the listing
			}
			if out = append(out, e); len(out) > maxEntries {
				return errdefs.New(errdefs.ErrTooLarge, "more than %d entries: list a smaller part or less deep", maxEntries)
			}
			if e.Type == "directory" && level < depth {
				if err := walk(cn, cs, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(name, shown, 1); err != nil {
		return nil, err
	}
	return out, nil
}

// Open opens regular file p of volume ref for reading; the caller closes
// it. Entry describes it.
func (s *Service) Open(ctx context.Context, ref, p string) (io.ReadCloser, *Entry, error) {
	name, shown, err := contentPath(p)
	if err != nil {
		return nil, nil, err
	}
	root, _, done, err := s.openRoot(ctx, ref)
	if err != nil {
		return nil, nil, err
	}
	f, err := root.Open(name)
	if err != nil {
		done()
		return nil, nil, fsError(err, shown)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = syscall.EISDIR
		if !fi.IsDir() {
			err = errdefs.New(errdefs.ErrInvalidArgument, "path %s is not a regular file", shown)
		}
	}
	if err != nil {
		f.Close()
		done()
		if errdefs.Class(err) != nil {
			return nil, nil, err
		}
		return nil, nil, fsError(err, shown)
	}
	e := &Entry{Name: path.Base(shown), Type: "file", Path: shown, Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), Mtime: fi.ModTime().UTC()}
	return &contentFile{File: f, done: done}, e, nil
}

type contentFile struct {
	*os.File
	done func()
}

func (f *contentFile) Close() error {
	err := f.File.Close()
	f.done()
	return err
}

// Write writes r to file p of volume ref, whole or not at all: into a
// temporary file beside it, renamed over p once complete. An existing file
// is replaced; the parent directory must exist.
func (s *Service) Write(ctx context.Context, ref, p string, r io.Reader, a Attrs) (*Entry, error) {
	name, shown, err := contentPath(p)
	if err != nil {
		return nil, err
	}
	if name == "." {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "path / is the volume's root directory")
	}
	root, _, done, err := s.openRoot(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer done()
	dir := path.Dir(name)
	if fi, err := root.Stat(dir); err != nil {
		return nil, fsError(err, path.Dir(shown))
	} else if !fi.IsDir() {
		return nil, errdefs.New(errdefs.ErrNotFound, "path %s is not a directory", path.Dir(shown))
	}
	if fi, err := root.Lstat(name); err == nil && fi.IsDir() {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "path %s is a directory", shown)
	}
	tmp := path.Join(dir, ".space-upload-"+newToken()[3:19])
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fsError(err, shown)
	}
	keep := false
	defer func() {
		if !keep {
			root.Remove(tmp)
		}
	}()
	_, err = io.Copy(f, contextReader{ctx, r})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if errors.Is(err, context.Canceled) || errdefs.Class(err) != nil {
			return nil, err
		}
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, fs.ErrNotExist) {
			return nil, fsError(err, shown)
		}
		return nil, errdefs.Wrap(errdefs.ErrInvalidArgument, err, "upload of %s failed", shown)
	}
	if err := setAttrs(root, tmp, a, 0o644); err != nil {
		return nil, fsError(err, shown)
	}
	if err := root.Rename(tmp, name); err != nil {
		return nil, fsError(err, shown)
	}
	keep = true
	return entry(root, name, shown)
}

// MakeDir makes directory p of volume ref; with parents, the missing
// directories above it too, and an existing directory is no error.
func (s *Service) MakeDir(ctx context.Context, ref, p string, parents bool, a Attrs) (*Entry, error) {
	name, shown, err := contentPath(p)
	if err != nil {
		return nil, err
	}
	root, _, done, err := s.openRoot(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer done()
	if name == "." {
		if parents {
			return entry(root, name, shown)
		}
		return nil, errdefs.New(errdefs.ErrAlreadyExists, "path / already exists in the volume")
	}
	parts := strings.Split(name, "/")
	for i := range parts {
		n := strings.Join(parts[:i+1], "/")
		last := i == len(parts)-1
		fi, err := root.Lstat(n)
		switch {
		case err == nil && fi.IsDir() && (!last || parents):
			continue
		case err == nil && fi.IsDir():
			return nil, errdefs.New(errdefs.ErrAlreadyExists, "path %s already exists in the volume", shown)
		case err == nil:
			return nil, errdefs.New(errdefs.ErrAlreadyExists, "path /%s exists and is not a directory", n)
		case !errors.Is(err, fs.ErrNotExist):
			return nil, fsError(err, "/"+n)
		case !last && !parents:
			return nil, errdefs.New(errdefs.ErrNotFound, "path /%s not found in the volume (make parents with force)", n)
		}
		if err := root.Mkdir(n, 0o700); err != nil {
			return nil, fsError(err, "/"+n)
		}
		if err := setAttrs(root, n, a, 0o755); err != nil {
			return nil, fsError(err, "/"+n)
		}
	}
	return entry(root, name, shown)
}

// Remove deletes p of volume ref, a directory with everything in it.
func (s *Service) Remove(ctx context.Context, ref, p string) error {
	name, shown, err := contentPath(p)
	if err != nil {
		return err
	}
	if name == "." {
		return errdefs.New(errdefs.ErrInvalidArgument, "the volume's root cannot be removed (remove what is in it, or delete the volume)")
	}
	root, _, done, err := s.openRoot(ctx, ref)
	if err != nil {
		return err
	}
	defer done()
	if _, err := root.Lstat(name); err != nil {
		return fsError(err, shown)
	}
	return fsError(root.RemoveAll(name), shown)
}

// SetAttrs changes the owner and mode of p of volume ref (nil: unchanged).
func (s *Service) SetAttrs(ctx context.Context, ref, p string, a Attrs) (*Entry, error) {
	name, shown, err := contentPath(p)
	if err != nil {
		return nil, err
	}
	root, _, done, err := s.openRoot(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer done()
	fi, err := root.Lstat(name)
	if err != nil {
		return nil, fsError(err, shown)
	}
	if a.UID != nil || a.GID != nil {
		uid, gid := -1, -1
		if a.UID != nil {
			uid = int(*a.UID)
		}
		if a.GID != nil {
			gid = int(*a.GID)
		}
		if err := root.Lchown(name, uid, gid); err != nil {
			return nil, fsError(err, shown)
		}
	}
	if a.Mode != nil && fi.Mode()&fs.ModeSymlink == 0 {
		if err := root.Chmod(name, fs.FileMode(*a.Mode&0o777)); err != nil {
			return nil, fsError(err, shown)
		}
	}
	return entry(root, name, shown)
}

// setAttrs gives a file or directory made by the content methods its
// owner and mode (defaults: the sandboxes' user and def). Set-user-ID,
// set-group-ID and sticky bits are never set from outside.
func setAttrs(root *os.Root, name string, a Attrs, def fs.FileMode) error {
	uid, gid, mode := dataUID, dataUID, def
	if a.UID != nil {
		uid = int(*a.UID)
	}
	if a.GID != nil {
		gid = int(*a.GID)
	}
	if a.Mode != nil {
		mode = fs.FileMode(*a.Mode & 0o777)
	}
	if err := root.Lchown(name, uid, gid); err != nil {
		return err
	}
	return root.Chmod(name, mode)
}

// contextReader stops a copy when ctx ends (a client that went away).
type contextReader struct {
	ctx context.Context
	r   io.Reader
}

func (c contextReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
