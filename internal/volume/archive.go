package volume

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/spacesandbox/space/internal/errdefs"
)

// A backup's data is one zstd-compressed tar of the volume's files:
// directories, regular files and symlinks with their owners, modes and
// times (hard links become separate files; sockets, FIFOs and devices are
// left out). A tar, not the filesystem image: a backup restores into a
// volume of another size, and no image a backup carried is ever mounted.

// archiveStats counts what an archive holds.
type archiveStats struct {
	Files int
	Bytes int64
}

// writeArchive writes the tree under root to w. It reads through root, so
// nothing outside the volume is read whatever its symlinks say.
func writeArchive(root *os.Root, w io.Writer) (archiveStats, error) {
	var st archiveStats
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		return st, err
	}
	tw := tar.NewWriter(zw)
	var walk func(name string) error
	walk = func(name string) error {
		f, err := root.Open(name)
		if err != nil {
			return err
		}
		des, err := f.ReadDir(-1)
		f.Close()
		if err != nil {
			return err
		}
		for _, de := range des {
			child := path.Join(name, de.Name())
			if name == "." {
				child = de.Name()
			}
			fi, err := root.Lstat(child)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			hdr, err := tar.FileInfoHeader(fi, "")
			if err != nil {
				continue // a socket, FIFO or device
			}
			hdr.Name, hdr.Uname, hdr.Gname = child, "", ""
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				if hdr.Linkname, err = root.Readlink(child); err != nil {
					return err
				}
			case fi.IsDir():
				hdr.Name += "/"
			case fi.Mode().IsRegular():
			default:
				continue
			}
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			st.Files++
			switch {
			case fi.Mode().IsRegular():
				if err := copyFile(root, child, tw, hdr.Size); err != nil {
					return err
				}
				st.Bytes += hdr.Size
			case fi.IsDir():
				if err := walk(child); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk("."); err != nil {
		return st, err
	}
	if err := tw.Close(); err != nil {
		return st, err
	}
	return st, zw.Close()
}

// copyFile writes exactly size bytes of file name (opened without
// following a symlink) to w.
func copyFile(root *os.Root, name string, w io.Writer, size int64) error {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(w, io.LimitReader(f, size))
	if err == nil && n < size {
		// It shrank since the header was written: pad, the tar needs size.
		_, err = io.CopyN(w, zeros{}, size-n)
	}
	return err
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// readArchive extracts the archive in r under root, which is empty. Every
// name is checked (relative, no "..") and every write goes through root,
// so an archive, even a crafted one, writes nothing outside the volume.
func readArchive(root *os.Root, r io.Reader) (archiveStats, error) {
	var st archiveStats
	zr, err := zstd.NewReader(r)
	if err != nil {
		return st, err
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	type dirTime struct {
		name  string
		mtime time.Time
	}
	var dirs []dirTime
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return st, errdefs.Wrap(errdefs.ErrFailedPrecondition, err, "the backup's archive is damaged")
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if name == "" || name == "." || path.IsAbs(name) || path.Clean(name) != name || name == ".." || strings.HasPrefix(name, "../") {
			return st, errdefs.New(errdefs.ErrFailedPrecondition, "the backup's archive holds a bad name %q", hdr.Name)
		}
		if dir := path.Dir(name); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return st, err
			}
		}
		mode := fs.FileMode(hdr.Mode) & 0o777
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return st, err
			}
			if err := root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
				return st, err
			}
			if err := root.Chmod(name, mode); err != nil {
				return st, err
			}
			dirs = append(dirs, dirTime{name, hdr.ModTime})
		case tar.TypeReg:
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
			if err != nil {
				return st, err
			}
			_, err = io.CopyN(f, tr, hdr.Size)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return st, err
			}
			if err := root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
				return st, err
			}
			if err := root.Chmod(name, mode); err != nil {
				return st, err
			}
			if err := root.Chtimes(name, hdr.ModTime, hdr.ModTime); err != nil {
				return st, err
			}
			st.Bytes += hdr.Size
		case tar.TypeSymlink:
			// The target is only text in the volume: sandboxes resolve it in
			// their own filesystem, the host never follows it.
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return st, err
			}
			if err := root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
				return st, err
			}
		default:
			continue
		}
		st.Files++
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := root.Chtimes(dirs[i].name, dirs[i].mtime, dirs[i].mtime); err != nil {
			return st, fmt.Errorf("restore times: %w", err)
		}
	}
	return st, nil
}
