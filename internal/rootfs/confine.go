package rootfs

import (
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// Host code never resolves a path inside an image with the host's
// resolver: an image's files are a tenant's (a build step or a registry
// layer made them), and a link there such as /usr/local/bin -> /var/lib
// would, followed by os.Stat on the host, tell the tenant whether a host
// path exists, and by os.Open or os.WriteFile read or write it. Every
// host-side access to a path inside an image, a layer or a rootfs goes
// through one of:
//
//   - Stat, here: the path resolved as the sandbox itself would see it,
//     with openat2(RESOLVE_IN_ROOT): absolute links, ".." chains and links
//     through /proc/self/root all resolve inside the image;
//   - os.Root (os.OpenRoot), where nothing needs following: it refuses
//     any name that would leave the directory, links included;
//   - containerd's archive.Apply (Apply and AddFile here), which resolves
//     every layer entry's parent inside the image root the same way
//     (lexically, by Lstat: safe because nothing else writes into an
//     image while it is being made, and none changes once made).
//
// Clone and Size walk an image without following links (WalkDir lstats,
// os.Link does not follow), and Clone writes only under directories it
// made itself.

// resolveInRoot is how Stat resolves: inside root, and never through a
// procfs magic link.
const resolveInRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// Stat describes the file at name (a path inside the image at root, "/"
// or not) as a process in a sandbox of the image would find it: every
// link on the way, the last one included, resolves inside root.
func Stat(root, name string) (fs.FileInfo, error) {
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(dir)
	fd, err := openat2(dir, name, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolveInRoot})
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s in image: %w", name, err)
	}
	return info, nil
}

// openat2 retries a few times while the kernel says a rename elsewhere
// raced the lookup (EAGAIN), as it asks callers to.
func openat2(dir int, name string, how *unix.OpenHow) (int, error) {
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dir, name, how)
		if err != unix.EAGAIN || i == 16 {
			return fd, err
		}
	}
}
