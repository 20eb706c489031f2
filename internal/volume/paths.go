package volume

import (
	"path"
	"regexp"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
)

// namePattern is E2B's rule for volume names (letters, digits, _ and -),
// with a length bound.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,63}$`)

// libDir matches the top-level library directories (/lib, /lib64, ...).
var libDir = regexp.MustCompile(`^lib(32|64|x32|exec)?$`)

// CheckName refuses a volume name that is not 1-63 of A-Z a-z 0-9 _ -.
func CheckName(name string) error {
	if !namePattern.MatchString(name) {
		return errdefs.New(errdefs.ErrInvalidArgument, "volume name %q is not valid: use 1 to 63 of A-Z a-z 0-9 _ -", name)
	}
	return nil
}

// MaxMounts bounds the volumes of one sandbox.
const MaxMounts = 16

// reserved are the directories a volume may neither cover nor be mounted
// inside, and why. Covering them would hide the sandbox's own system (its
// programs, libraries, configuration), the agent that is its PID 1
// (/usr/local/bin/space-agent) and its runtime state (/run: the agent's
// token), or the kernel's interfaces.
var reserved = []struct{ dir, why string }{
	{"/proc", "the kernel's process interface"},
	{"/sys", "the kernel's system interface"},
	{"/dev", "the sandbox's devices"},
	{"/usr", "the sandbox's programs, and the space agent (/usr/local/bin/space-agent)"},
	{"/bin", "the sandbox's programs"},
	{"/sbin", "the sandbox's programs"},
	{"/etc", "the sandbox's configuration (users, resolver, certificates)"},
	{"/run", "the agent's runtime state"},
	{"/var/run", "the agent's runtime state"},
	{"/boot", "the system's boot files"},
}

// CheckMountPath refuses a mount path that is not absolute and clean, or
// that would cover or sit inside a reserved directory, and says why.
func CheckMountPath(p string) error {
	bad := func(format string, args ...any) error {
		return errdefs.New(errdefs.ErrInvalidArgument, "mount path %q is refused: "+format, append([]any{p}, args...)...)
	}
	switch {
	case p == "":
		return errdefs.New(errdefs.ErrInvalidArgument, "a volume mount needs a path")
	case len(p) > 256:
		return bad("longer than 256 bytes")
	case !strings.HasPrefix(p, "/"):
		return bad("it must be absolute")
	case strings.ContainsAny(p, "\x00\n\\"):
		return bad("it holds a NUL, newline or backslash")
	case path.Clean(p) != p:
		return bad("it must be clean (no '.', '..', '//' or trailing '/'); %q is its clean form", path.Clean(p))
	case p == "/":
		return bad("it would cover the whole filesystem")
	}
	if top := strings.SplitN(p[1:], "/", 2)[0]; libDir.MatchString(top) {
		return bad("/%s holds the sandbox's libraries", top)
	}
	for _, r := range reserved {
		if p == r.dir || strings.HasPrefix(p, r.dir+"/") {
			return bad("%s holds %s", r.dir, r.why)
		}
		if strings.HasPrefix(r.dir, p+"/") {
			return bad("it would cover %s, which holds %s", r.dir, r.why)
		}
	}
	return nil
}

// CheckMountPaths checks the mount paths of one sandbox: each alone, and that
// no two are the same or one inside another.
func CheckMountPaths(paths []string) error {
	if len(paths) > MaxMounts {
		return errdefs.New(errdefs.ErrInvalidArgument, "at most %d volume mounts per sandbox", MaxMounts)
	}
	for i, p := range paths {
		if err := CheckMountPath(p); err != nil {
			return err
		}
		for _, q := range paths[:i] {
			if p == q || strings.HasPrefix(p, q+"/") || strings.HasPrefix(q, p+"/") {
				return errdefs.New(errdefs.ErrInvalidArgument, "mount paths %q and %q overlap: mount each volume at its own path, none inside another", q, p)
			}
		}
	}
	return nil
}

// contentPath turns a path of E2B's volume content API (relative to the
// volume's root, with or without a leading "/") into the name os.Root
// takes ("." for the root) and the path reported back ("/a/b").
func contentPath(p string) (name, shown string, err error) {
	if p == "" || strings.ContainsRune(p, 0) || len(p) > 4096 {
		return "", "", errdefs.New(errdefs.ErrInvalidArgument, "path must be 1 to 4096 bytes without NUL")
	}
	clean := path.Clean("/" + p)
	if clean == "/" {
		return ".", "/", nil
	}
	return clean[1:], clean, nil
}
