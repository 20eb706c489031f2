package volume

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// A volume's storage on the node: a sparse ext4 image, loop-mounted by
// spaced, whose size is the volume's limit. The filesystem itself enforces
// it: a write past it fails with ENOSPC, in a sandbox as on the host, and
// no accounting of ours can drift from what is on disk. The image is made
// by mkfs and written only by the host kernel (sandboxes and spaced write
// files through system calls, never blocks), so nothing untrusted is ever
// mounted.
//
//	<dir>/<id>/image.ext4       the filesystem (sparse: only used blocks take space)
//	<dir>/<id>/mnt/             its mount point (nosuid, nodev, noatime)
//	<dir>/<id>/mnt/data/        the volume's root, what sandboxes see
//	                            (the filesystem's root holds lost+found)
//
// Made in order under a record that says "creating", so a crash at any step
// leaves a record that Open finishes removing, never a half-made volume in
// use; the image is written under a temporary name and renamed when mkfs
// is done.

const (
	imageName = "image.ext4"
	mntName   = "mnt"
	dataName  = "data"
	// dataUID owns the volume's root: the sandboxes' default user ("user",
	// 1000 in every template), so a new volume is writable without sudo.
	dataUID = 1000
)

type disk struct {
	dir string
}

func (d disk) volDir(id string) string { return filepath.Join(d.dir, id) }
func (d disk) mnt(id string) string    { return filepath.Join(d.dir, id, mntName) }

// root is the directory sandboxes mount and the content API serves.
func (d disk) root(id string) string { return filepath.Join(d.dir, id, mntName, dataName) }

// make creates volume id's image of sizeMB, mounts it and makes its root.
func (d disk) make(ctx context.Context, id string, sizeMB int) error {
	dir := d.volDir(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("volume dir: %w", err)
	}
	tmp := filepath.Join(dir, imageName+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("volume image: %w", err)
	}
	err = f.Truncate(int64(sizeMB) << 20)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("size volume image: %w", err)
	}
	// -m 0: no blocks reserved for root (the limit is the limit for all);
	// lazy init and nodiscard keep mkfs of a sparse file fast.
	if err := run(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-L", "space-volume",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=0:0", tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, imageName)); err != nil {
		return fmt.Errorf("volume image: %w", err)
	}
	if err := d.mount(ctx, id); err != nil {
		return err
	}
	root := d.root(id)
	if err := os.Mkdir(root, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("volume root: %w", err)
	}
	if err := os.Chown(root, dataUID, dataUID); err != nil {
		return fmt.Errorf("volume root: %w", err)
	}
	return nil
}

// mount mounts id's image unless it is mounted already (a restart of
// spaced keeps the host's mounts).
func (d disk) mount(ctx context.Context, id string) error {
	mnt := d.mnt(id)
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return fmt.Errorf("volume mount point: %w", err)
	}
	if mounted(mnt) {
		return nil
	}
	if err := run(ctx, "mount", "-t", "ext4", "-o", "loop,nosuid,nodev,noatime", filepath.Join(d.volDir(id), imageName), mnt); err != nil {
		return err
	}
	// The filesystem's root: root's alone (the host sees it only through
	// spaced; sandboxes see data/ below it).
	return os.Chmod(mnt, 0o700)
}

// remove unmounts id's image (if mounted) and deletes everything of it.
func (d disk) remove(ctx context.Context, id string) error {
	mnt := d.mnt(id)
	if mounted(mnt) {
		if err := run(ctx, "umount", mnt); err != nil {
			// Busy (a sandbox's gofer still closing): detach it now; the
			// loop device goes when the last user does.
			if lerr := run(ctx, "umount", "-l", mnt); lerr != nil {
				return errors.Join(err, lerr)
			}
		}
	}
	if mounted(mnt) {
		return fmt.Errorf("volume %s is still mounted", id)
	}
	return os.RemoveAll(d.volDir(id))
}

// ids lists the volume directories on disk.
func (d disk) ids() ([]string, error) {
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, fmt.Errorf("volumes dir: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// usage is the bytes used and the capacity of id's filesystem.
func (d disk) usage(id string) (used, capacity int64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(d.mnt(id), &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, int64(st.Blocks) * st.Bsize, nil
}

// freeze stops every write to id's filesystem (writers block) until thaw:
// a backup copies it as it is at one instant.
func (d disk) freeze(ctx context.Context, id string) error {
	return run(ctx, "fsfreeze", "--freeze", d.mnt(id))
}

func (d disk) thaw(ctx context.Context, id string) error {
	return run(ctx, "fsfreeze", "--unfreeze", d.mnt(id))
}

// mounted reports whether path is a mount point: its device differs from
// its parent's.
func mounted(path string) bool {
	var st, parent syscall.Stat_t
	if syscall.Lstat(path, &st) != nil || syscall.Lstat(filepath.Dir(path), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// run runs a host tool; its output goes into the error (logged, never
// shown to clients: it may name host paths).
func run(ctx context.Context, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %v: %w: %s", name, args, err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}
