package files

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spacesandbox/space/internal/agent/users"
)

// Extract serves POST /files/extract: a tar (gzip or not) written under the
// directory path, as a template build's COPY does. Every entry gets one
// owner ("owner", user[:group] by name or number; root when not given;
// the tar's own ids are ignored) and, if "mode" is given, that octal mode;
// directories the copy makes get them too. With single=1 the tar holds one
// file or link, written at path itself, or inside it if path is an
// existing directory (Docker's rule for COPY of one file).
func (s *Service) Extract(w http.ResponseWriter, r *http.Request) {
	n, err := s.extract(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]int{"entries": n})
}

type extraction struct {
	dest     string
	uid, gid int
	mode     os.FileMode
	hasMode  bool
	single   bool
}

func (s *Service) extract(r *http.Request) (int, error) {
	q := r.URL.Query()
	dest := q.Get("path")
	if dest == "" || !filepath.IsAbs(dest) {
		return 0, statusErr(http.StatusBadRequest, nil, "path must be an absolute path")
	}
	x := extraction{dest: filepath.Clean(dest), single: q.Get("single") == "1"}
	var err error
	if x.uid, x.gid, err = owner(q.Get("owner")); err != nil {
		return 0, statusErr(http.StatusBadRequest, err, "owner: %v", err)
	}
	if m := q.Get("mode"); m != "" {
		v, err := strconv.ParseUint(m, 8, 32)
		if err != nil || v > 0o7777 {
			return 0, statusErr(http.StatusBadRequest, err, "mode %q is not an octal file mode", m)
		}
		x.mode, x.hasMode = modeBits(uint32(v)), true
	}
	br := bufio.NewReader(r.Body)
	body := io.Reader(br)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return 0, statusErr(http.StatusBadRequest, err, "invalid gzip body: %v", err)
		}
		defer zr.Close()
		body = zr
	}
	return x.run(tar.NewReader(body))
}

// owner resolves "user[:group]"; a user alone takes its own primary group.
func owner(spec string) (uid, gid int, err error) {
	if spec == "" {
		return 0, 0, nil
	}
	name, group, hasGroup := strings.Cut(spec, ":")
	if n, err := strconv.Atoi(name); err == nil && n >= 0 {
		uid, gid = n, n
	} else {
		u, err := users.Lookup(name)
		if err != nil {
			return 0, 0, err
		}
		uid, gid = int(u.UID), int(u.GID)
	}
	if hasGroup {
		if gid, err = groupID(group); err != nil {
			return 0, 0, err
		}
	}
	return uid, gid, nil
}

func groupID(name string) (int, error) {
	if n, err := strconv.Atoi(name); err == nil && n >= 0 {
		return n, nil
	}
	data, err := os.ReadFile("/etc/group")
	if err != nil {
		return 0, fmt.Errorf("group %q: %w", name, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 3 && f[0] == name {
			if n, err := strconv.Atoi(f[2]); err == nil {
				return n, nil
			}
		}
	}
	return 0, fmt.Errorf("unknown group %q", name)
}

func modeBits(v uint32) os.FileMode {
	m := os.FileMode(v & 0o777)
	if v&syscall.S_ISUID != 0 {
		m |= os.ModeSetuid
	}
	if v&syscall.S_ISGID != 0 {
		m |= os.ModeSetgid
	}
	if v&syscall.S_ISVTX != 0 {
		m |= os.ModeSticky
	}
	return m
}

func (x extraction) run(tr *tar.Reader) (int, error) {
	n := 0
	type dirTime struct {
		path string
		mod  time.Time
	}
	var dirs []dirTime
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return n, statusErr(http.StatusBadRequest, err, "invalid tar: %v", err)
		}
		target, err := x.target(h, n)
		if err != nil {
			return n, err
		}
		if err := x.mkParents(filepath.Dir(target)); err != nil {
			return n, osError(err, filepath.Dir(target))
		}
		if err := x.write(tr, h, target); err != nil {
			return n, err
		}
		if h.Typeflag == tar.TypeDir {
			dirs = append(dirs, dirTime{target, h.ModTime})
		}
		n++
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Chtimes(dirs[i].path, dirs[i].mod, dirs[i].mod)
	}
	if x.single && n != 1 {
		return n, statusErr(http.StatusBadRequest, nil, "single=1 needs exactly one entry, got %d", n)
	}
	return n, nil
}

// target is where entry h goes.
func (x extraction) target(h *tar.Header, n int) (string, error) {
	name := path.Clean("/" + h.Name)
	for _, part := range strings.Split(h.Name, "/") {
		if part == ".." {
			return "", statusErr(http.StatusBadRequest, nil, "tar entry %q leaves the destination", h.Name)
		}
	}
	if !x.single {
		return filepath.Join(x.dest, name), nil
	}
	if n > 0 || h.Typeflag == tar.TypeDir {
		return "", statusErr(http.StatusBadRequest, nil, "single=1 needs exactly one file or link")
	}
	if st, err := os.Stat(x.dest); err == nil && st.IsDir() {
		return filepath.Join(x.dest, path.Base(name)), nil
	}
	return x.dest, nil
}

// mkParents makes dir and its missing parents, owned like the entries.
func (x extraction) mkParents(dir string) error {
	st, err := os.Stat(dir)
	if err == nil {
		if !st.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := x.mkParents(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	// The copy's owner, but not its mode: that is for what it copies.
	if err := x.chown(dir); err != nil {
		return err
	}
	return os.Chmod(dir, 0o755)
}

func (x extraction) write(tr *tar.Reader, h *tar.Header, target string) error {
	mode := h.FileInfo().Mode()
	switch h.Typeflag {
	case tar.TypeDir:
		if st, err := os.Lstat(target); err == nil && !st.IsDir() {
			if err := os.Remove(target); err != nil {
				return osError(err, target)
			}
		}
		if err := os.Mkdir(target, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return osError(err, target)
		}
	case tar.TypeReg:
		// Replace, never write through: target may be a symlink.
		if err := removeNonDir(target); err != nil {
			return osError(err, target)
		}
		f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return osError(err, target)
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return osError(err, target)
		}
	case tar.TypeSymlink:
		if err := removeNonDir(target); err != nil {
			return osError(err, target)
		}
		if err := os.Symlink(h.Linkname, target); err != nil {
			return osError(err, target)
		}
		return x.chown(target)
	case tar.TypeLink:
		if x.single {
			return statusErr(http.StatusBadRequest, nil, "single=1 cannot take a hard link")
		}
		src := filepath.Join(x.dest, path.Clean("/"+h.Linkname))
		if err := removeNonDir(target); err != nil {
			return osError(err, target)
		}
		if err := os.Link(src, target); err != nil {
			return osError(err, target)
		}
		return nil
	default:
		return nil // devices, fifos: not copied
	}
	if err := x.finish(target, mode); err != nil {
		return osError(err, target)
	}
	return os.Chtimes(target, h.ModTime, h.ModTime)
}

func removeNonDir(p string) error {
	st, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.IsDir() {
		return &fs.PathError{Op: "replace", Path: p, Err: syscall.EISDIR}
	}
	return os.Remove(p)
}

func (x extraction) chown(p string) error {
	if os.Getuid() != 0 {
		return nil
	}
	return os.Lchown(p, x.uid, x.gid)
}

// finish sets owner, then mode (chown clears set-id bits).
func (x extraction) finish(p string, mode os.FileMode) error {
	if err := x.chown(p); err != nil {
		return err
	}
	if x.hasMode {
		mode = x.mode
	}
	return os.Chmod(p, mode&(os.ModePerm|os.ModeSetuid|os.ModeSetgid|os.ModeSticky))
}
