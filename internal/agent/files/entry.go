// Package files serves envd's filesystem.Filesystem service, its watchers and
// the /files upload and download endpoints.
package files

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/spacesandbox/space/api/envd/filesystem"
	"github.com/spacesandbox/space/internal/agent/users"
)

// metadataPrefix is the xattr namespace of E2B file metadata.
const metadataPrefix = "user.e2b."

// entryInfo describes the file at path (not following a final symlink),
// reporting it under the name shown.
func entryInfo(path, shown string) (*filesystem.EntryInfo, error) {
	lst, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	e := &filesystem.EntryInfo{
		Name:         filepath.Base(shown),
		Path:         shown,
		Type:         fileType(lst.Mode()),
		Size:         lst.Size(),
		Mode:         uint32(lst.Mode().Perm()),
		Permissions:  lst.Mode().String(),
		ModifiedTime: timestamppb.New(lst.ModTime()),
		Metadata:     readMetadata(path),
	}
	if sys, ok := lst.Sys().(*syscall.Stat_t); ok {
		e.Owner = users.UserName(sys.Uid)
		e.Group = users.GroupName(sys.Gid)
	}
	if lst.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(path)
		if err == nil {
			e.SymlinkTarget = &target
		}
		if st, err := os.Stat(path); err == nil {
			e.Type = fileType(st.Mode())
		}
	}
	return e, nil
}

func fileType(m fs.FileMode) filesystem.FileType {
	switch {
	case m.IsDir():
		return filesystem.FileType_FILE_TYPE_DIRECTORY
	case m&fs.ModeSymlink != 0:
		return filesystem.FileType_FILE_TYPE_SYMLINK
	default:
		return filesystem.FileType_FILE_TYPE_FILE
	}
}

// readMetadata returns the user.e2b.* xattrs of path, keys without prefix.
func readMetadata(path string) map[string]string {
	size, err := unix.Llistxattr(path, nil)
	if err != nil || size <= 0 {
		return nil
	}
	buf := make([]byte, size)
	size, err = unix.Llistxattr(path, buf)
	if err != nil {
		return nil
	}
	var out map[string]string
	for _, name := range strings.Split(string(buf[:size]), "\x00") {
		if !strings.HasPrefix(name, metadataPrefix) {
			continue
		}
		val := make([]byte, 4096)
		n, err := unix.Lgetxattr(path, name, val)
		if err != nil {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[strings.TrimPrefix(name, metadataPrefix)] = string(val[:n])
	}
	return out
}

// writeMetadata stores md as user.e2b.* xattrs; failures are returned joined
// so callers can treat them as best effort.
func writeMetadata(path string, md map[string]string) error {
	var errs []error
	for k, v := range md {
		if err := unix.Setxattr(path, metadataPrefix+k, []byte(v), 0); err != nil {
			errs = append(errs, fmt.Errorf("set xattr %s: %w", k, err))
		}
	}
	return errors.Join(errs...)
}

// mkdirAll creates dir and its missing parents, each owned by u.
func mkdirAll(dir string, u *users.User) error {
	st, err := os.Stat(dir)
	if err == nil {
		if !st.IsDir() {
			return fmt.Errorf("%s: %w", dir, syscall.ENOTDIR)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirAll(parent, u); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	chown(dir, u)
	return nil
}

// chown gives path to u when running as root; best effort.
func chown(path string, u *users.User) {
	if u != nil && os.Getuid() == 0 {
		_ = os.Lchown(path, int(u.UID), int(u.GID))
	}
}
