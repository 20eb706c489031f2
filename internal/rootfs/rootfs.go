// Package rootfs makes and changes template images on the host: one root
// filesystem directory per image, shared read-only by every sandbox made
// from it. An image is cloned from its parent as a hard-link farm (a new
// image costs directory entries, not file data) and changed only by
// applying OCI layers with containerd's archive package. Applying never
// writes through an existing file: what a layer changes is unlinked and
// made anew, so the images a clone shares files with never change.
//
// Layers come from untrusted builds and registries. Paths resolve inside
// the image (a symlink cannot lead out of it), device nodes are left out,
// extended attributes other than user.* are dropped, and a hard link may
// point only at a file the same layer made (a link to an older, shared
// file would let the layer change that file's owner and mode in every
// image that shares it).
package rootfs

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/containerd/containerd/v2/pkg/archive"
	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Clone makes dst a copy of the tree at src in which every non-directory
// is a hard link to src's, and every directory is new with src's owner,
// mode and times. dst must not exist.
func Clone(src, dst string) error {
	if err := os.Mkdir(dst, 0o700); err != nil {
		return fmt.Errorf("clone %s: %w", src, err)
	}
	type dirMeta struct {
		path string
		info fs.FileInfo
	}
	var dirs []dirMeta
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			if rel != "." {
				if err := os.Mkdir(target, 0o700); err != nil {
					return err
				}
			}
			dirs = append(dirs, dirMeta{target, info})
			return nil
		}
		return os.Link(p, target) // linkat without following: a symlink is linked, not its target
	})
	if err != nil {
		return fmt.Errorf("clone %s: %w", src, err)
	}
	// Deepest first, so setting a directory's times is not undone by
	// making its children.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := copyDirMeta(dirs[i].path, dirs[i].info); err != nil {
			return fmt.Errorf("clone %s: %w", src, err)
		}
	}
	return nil
}

func copyDirMeta(p string, info fs.FileInfo) error {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no owner information", p)
	}
	if err := os.Lchown(p, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := os.Chmod(p, info.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
		return err
	}
	times := []unix.Timespec{unix.NsecToTimespec(st.Atim.Nano()), unix.NsecToTimespec(st.Mtim.Nano())}
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, times, unix.AT_SYMLINK_NOFOLLOW)
}

// ApplyOptions say what a layer may do.
type ApplyOptions struct {
	// Private is set when dir shares no files with another image (it is
	// being unpacked from a registry image into an empty directory): hard
	// links may then point at files of earlier layers.
	Private bool
	// MaxBytes, if not 0, bounds the file data the layer may write: an
	// entry that would take it past stops the apply with ErrTooLarge,
	// before it is written.
	MaxBytes int64
	// Logger gets a line for each entry left out.
	Logger *slog.Logger
}

// Apply applies the OCI layer (an uncompressed tar changeset) read from r
// to the image at dir and returns the bytes of file data it held.
func Apply(ctx context.Context, dir string, r io.Reader, o ApplyOptions) (int64, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	made := map[string]bool{} // what this layer made, for its hard links
	var total int64
	filter := func(h *tar.Header) (bool, error) {
		name := path.Clean("/" + h.Name)
		if total += h.Size; o.MaxBytes > 0 && total > o.MaxBytes {
			return false, errdefs.New(errdefs.ErrTooLarge, "the layer holds more than %d bytes of files (at %s), the limit", o.MaxBytes, name)
		}
		switch h.Typeflag {
		case tar.TypeBlock, tar.TypeChar:
			log.Debug("layer: device node left out", "path", name)
			return false, nil
		case tar.TypeLink:
			target := path.Clean("/" + h.Linkname)
			if !o.Private && !made[target] {
				return false, errdefs.New(errdefs.ErrInvalidArgument,
					"layer entry %s is a hard link to %s, which an earlier layer made: hard links must stay within one layer", name, target)
			}
		}
		for k := range h.PAXRecords {
			if strings.HasPrefix(k, "SCHILY.xattr.") && !strings.HasPrefix(k, "SCHILY.xattr.user.") {
				delete(h.PAXRecords, k)
			}
		}
		h.Xattrs = nil //nolint:staticcheck // the attributes come through PAXRecords
		made[name] = true
		return true, nil
	}
	n, err := archive.Apply(ctx, dir, r, archive.WithFilter(filter))
	if err != nil {
		if errdefs.Class(err) != nil {
			return n, err
		}
		// The cause names host paths; the client sees them from the root.
		msg := strings.ReplaceAll(err.Error(), strings.TrimSuffix(dir, "/"), "")
		return n, errdefs.Wrap(errdefs.ErrInvalidArgument, err, "layer cannot be applied: %s", msg)
	}
	return n, nil
}

// AddFile puts one file into the image at dir (at a path inside it, with
// mode and owner), as a one-entry layer: an existing file there is
// replaced, never written through.
func AddFile(ctx context.Context, dir, name string, mode int64, uid, gid int, data io.Reader, size int64) error {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(path.Clean("/"+name), "/"), Mode: mode, Uid: uid, Gid: gid, Size: size})
		if err == nil {
			_, err = io.Copy(tw, data)
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	_, err := Apply(ctx, dir, pr, ApplyOptions{})
	pr.CloseWithError(err) // unblocks the writer if Apply stopped early
	return err
}

// Remove deletes an image directory. Images are immutable once made, so
// nothing is written into one while it is removed.
func Remove(dir string) error {
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove image %s: %w", dir, err)
	}
	return nil
}

// Size is the bytes of file data in the image at dir, each file counted
// once however many names it has there.
func Size(dir string) (int64, error) {
	seen := map[uint64]bool{}
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		total += info.Size()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("size of image %s: %w", dir, err)
	}
	return total, nil
}
