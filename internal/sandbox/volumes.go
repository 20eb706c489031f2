package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/store"
)

// Volumes mounted into sandboxes. A sandbox's record keeps its mounts for
// its whole life, paused included: that is its claim on each volume, which
// the volume service checks every other claim against (one read-write
// holder of a volume at a time). Every path that makes a record with
// mounts (create, fork, a create from a full snapshot, a resume on another
// node) claims them under the volume service's lock and writes the record
// before releasing it. A checkpoint holds none of a volume's contents (the
// gofer serves them from the host); a restore mounts the volumes again,
// from wherever they are on this node.

// VolumeMount is one volume mounted into a sandbox.
type VolumeMount struct {
	// VolumeID is the volume's ID (set once the mount is resolved); Name
	// its name when the mount was made.
	VolumeID string
	Name     string
	// Path is where the sandbox sees it (absolute, clean).
	Path     string
	ReadOnly bool
}

// Volumes is what sandboxes need of the volume service (package volume).
type Volumes interface {
	// CheckMounts refuses mount paths that are not allowed, saying why.
	CheckMounts(mounts []store.VolumeMount) error
	// Claim resolves mounts by volume name for sandbox id and checks them
	// against every other sandbox's claims; it holds the claim lock until
	// release, which the caller calls once it has written the record.
	Claim(ctx context.Context, id string, mounts []store.VolumeMount) (resolved []store.VolumeMount, release func(), err error)
	// Source is the host directory of volume id, mounted into sandboxes.
	Source(ctx context.Context, id string) (string, error)
}

// metaVolumes is the manifest Meta key that lists a checkpoint's mounts (by
// volume name: another node resolves them to its own volumes).
const metaVolumes = "volumes"

// nodeVolumes is vs, or the error of a node without volumes.
func nodeVolumes(vs Volumes) (Volumes, error) {
	if vs == nil {
		return nil, errdefs.New(errdefs.ErrFailedPrecondition, "this node has no volumes")
	}
	return vs, nil
}

// readWrite names the first volume of vols mounted read-write, if any.
func readWrite(vols []store.VolumeMount) (string, bool) {
	for _, v := range vols {
		if !v.ReadOnly {
			return v.Name, true
		}
	}
	return "", false
}

// volumesMeta is what a manifest keeps of a sandbox's mounts.
func volumesMeta(vols []store.VolumeMount) (string, error) {
	if len(vols) == 0 {
		return "", nil
	}
	byName := make([]store.VolumeMount, len(vols))
	for i, v := range vols {
		byName[i] = store.VolumeMount{Name: v.Name, Path: v.Path, ReadOnly: v.ReadOnly}
	}
	b, err := json.Marshal(byName)
	if err != nil {
		return "", fmt.Errorf("encode volume mounts: %w", err)
	}
	return string(b), nil
}

// manifestVolumes are the mounts (by name) a checkpoint or snapshot was
// taken with.
func manifestVolumes(m *checkpoint.Manifest) ([]store.VolumeMount, error) {
	raw := m.Meta[metaVolumes]
	if raw == "" {
		return nil, nil
	}
	var out []store.VolumeMount
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		return nil, errdefs.Wrap(errdefs.ErrFailedPrecondition, err, "the volume mounts recorded in %s do not decode", m.ID)
	}
	return out, nil
}

// restoreError explains a restore that failed on a volume: gVisor reopens
// the files and directories a sandbox held open, by path, and one removed
// from its volume while the sandbox was paused cannot be.
func restoreError(err error, mounts []runtime.Mount) error {
	if len(mounts) > 0 && strings.Contains(err.Error(), "failed to walk") {
		return errdefs.Wrap(errdefs.ErrFailedPrecondition, err,
			"the sandbox could not be restored: a file or directory it held open in one of its volumes was removed after the checkpoint (put it back, or kill the sandbox)")
	}
	return err
}

// checkVolumes refuses a create's mounts that can never work, before
// anything else is looked up.
func (s *Service) checkVolumes(mounts []VolumeMount) error {
	if len(mounts) == 0 {
		return nil
	}
	vs, err := nodeVolumes(s.cfg.Volumes)
	if err != nil {
		return err
	}
	return vs.CheckMounts(mountRows(mounts))
}

// checkImagePaths refuses a mount path that crosses a symlink or a file of
// the template's image (root, on the host; read with Lstat through
// os.Root, never followed nor left): runsc would resolve the link inside
// the sandbox and mount the volume somewhere else (a link to /usr/bin,
// say). A missing directory is fine: runsc makes it in the sandbox's own
// layer.
func checkImagePaths(root string, mounts []VolumeMount) error {
	if root == "" {
		return nil
	}
	img, err := os.OpenRoot(root)
	if err != nil {
		return fmt.Errorf("template image: %w", err)
	}
	defer img.Close()
	for _, m := range mounts {
		name, shown := ".", ""
		for _, c := range strings.Split(strings.TrimPrefix(m.Path, "/"), "/") {
			name, shown = path.Join(name, c), shown+"/"+c
			fi, err := img.Lstat(name)
			if err != nil {
				break
			}
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				return errdefs.New(errdefs.ErrInvalidArgument, "mount path %q is refused: %s is a symlink in the template's image; mount at the directory it names", m.Path, shown)
			case !fi.IsDir():
				return errdefs.New(errdefs.ErrInvalidArgument, "mount path %q is refused: %s is a file in the template's image", m.Path, shown)
			}
		}
	}
	return nil
}
