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
	"unicode/utf8"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/spacesandbox/space/api/envd/filesystem"
	"github.com/spacesandbox/space/internal/agent/users"
)

// MetadataPrefix is the xattr namespace of E2B file metadata (envd's).
const MetadataPrefix = "user.e2b."

// entryInfo describes the file at path (not following a final symlink),
// reporting it under the name shown. A symlink is reported as envd reports
// it: is_symlink set, its target resolved to the end (an absolute path, every
// link in a chain followed) with that target's type and permission bits,
// and, when it cannot be resolved (broken, looping), its own path as the
// target, no type and no permission bits. Permissions are the link's own
// ("Lrwxrwxrwx").
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
		e.IsSymlink = true
		e.Type, e.Mode = filesystem.FileType_FILE_TYPE_UNSPECIFIED, 0
		target, err := filepath.EvalSymlinks(path)
		if err != nil {
			target = shown
		} else if st, err := os.Stat(target); err == nil {
			e.Type, e.Mode = fileType(st.Mode()), uint32(st.Mode().Perm())
		}
		e.SymlinkTarget = &target
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

// readMetadata returns the user.e2b.* xattrs of path (a symlink's target's),
// keys without prefix; nil when there are none or xattrs are unsupported.
// Entries that are not UTF-8 (set inside the sandbox by other means) are
// left out: they could not be carried in a proto string map.
func readMetadata(path string) map[string]string {
	names, err := listXattrs(path)
	if err != nil {
		return nil
	}
	var out map[string]string
	for _, name := range names {
		key, ok := strings.CutPrefix(name, MetadataPrefix)
		if !ok {
			continue
		}
		val, err := getXattr(path, name)
		if err != nil || !utf8.ValidString(key) || !utf8.Valid(val) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[key] = string(val)
	}
	return out
}

// writeMetadata makes md the whole of path's metadata: user.e2b.* xattrs
// whose key md lacks are removed (an overwrite keeps a file's xattrs, so an
// upload without metadata would otherwise keep the previous upload's), and
// md's keys are set. md must have passed ValidateMetadata.
func writeMetadata(path string, md map[string]string) error {
	names, err := listXattrs(path)
	if err != nil {
		return err
	}
	for _, name := range names {
		key, ok := strings.CutPrefix(name, MetadataPrefix)
		if !ok {
			continue
		}
		if _, keep := md[key]; keep {
			continue
		}
		if err := unix.Removexattr(path, name); err != nil && !errors.Is(err, unix.ENODATA) {
			return fmt.Errorf("remove xattr %s: %w", name, err)
		}
	}
	for k, v := range md {
		if err := unix.Setxattr(path, MetadataPrefix+k, []byte(v), 0); err != nil {
			return fmt.Errorf("set xattr %s: %w", MetadataPrefix+k, err)
		}
	}
	return nil
}

// Metadata limits, envd's: a key is at most what fits in an xattr name
// (255 bytes with the prefix); all names and values of a file together at
// most 4 KiB (what ext4 keeps in one block, so envd's own limit). Well
// under 1 MiB, past which a file's xattrs no longer fit the tar header of
// gVisor's disk snapshots (runsc fscheckpoint fails: see gvisor-notes).
const (
	MaxMetadataKeyLen   = 255 - len(MetadataPrefix)
	MaxMetadataTotalLen = 4096
)

// ValidateMetadata checks md as envd does (keys and values printable
// US-ASCII, the limits above), with envd's texts.
func ValidateMetadata(md map[string]string) error {
	total := 0
	for k, v := range md {
		if k == "" {
			return errors.New("metadata key must not be empty")
		}
		if len(k) > MaxMetadataKeyLen {
			return fmt.Errorf("metadata key %q exceeds %d bytes", k, MaxMetadataKeyLen)
		}
		if err := printableASCII("key", k); err != nil {
			return err
		}
		if err := printableASCII(fmt.Sprintf("value for key %q", k), v); err != nil {
			return err
		}
		total += len(MetadataPrefix) + len(k) + len(v)
	}
	if total > MaxMetadataTotalLen {
		return fmt.Errorf("total metadata size %d exceeds %d bytes", total, MaxMetadataTotalLen)
	}
	return nil
}

func printableASCII(what, s string) error {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("metadata %s contains non-printable-ASCII byte 0x%02x at offset %d", what, c, i)
		}
	}
	return nil
}

// xattrUnsupported: the filesystem keeps no xattrs (procfs, sysfs).
func xattrUnsupported(err error) bool {
	return errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP)
}

func listXattrs(path string) ([]string, error) {
	for {
		size, err := unix.Listxattr(path, nil)
		if err != nil || size == 0 {
			return nil, err
		}
		buf := make([]byte, size)
		n, err := unix.Listxattr(path, buf)
		if errors.Is(err, unix.ERANGE) {
			continue // grew in between
		}
		if err != nil {
			return nil, err
		}
		return strings.FieldsFunc(string(buf[:n]), func(r rune) bool { return r == 0 }), nil
	}
}

func getXattr(path, name string) ([]byte, error) {
	for {
		size, err := unix.Getxattr(path, name, nil)
		if err != nil || size == 0 {
			return nil, err
		}
		buf := make([]byte, size)
		n, err := unix.Getxattr(path, name, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
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
