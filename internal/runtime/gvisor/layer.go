package gvisor

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/runtime"
)

var _ runtime.LayerExporter = (*Runtime)(nil)

// ExportLayer writes the sandbox's writable layer as an OCI layer. runsc
// serialises the overlay's upper layer (a gVisor tmpfs, so there is no host
// directory to read) in overlayfs form; ociLayer rewrites it.
func (r *Runtime) ExportLayer(ctx context.Context, id string, w io.Writer) error {
	if !idPattern.MatchString(id) {
		return errdefs.New(errdefs.ErrInvalidArgument, "invalid sandbox id %q", id)
	}
	tmp, err := os.CreateTemp(r.sandboxDir(id), "upper-*.tar")
	if err != nil {
		return fmt.Errorf("export layer of %s: %w", id, err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if _, err := r.run(ctx, append(r.savedFlags(id), "tar", "rootfs-upper", "--file", tmp.Name(), id)...); err != nil {
		return checkpointError(err, "layer export")
	}
	if err := ociLayer(tmp, w); err != nil {
		return fmt.Errorf("export layer of %s: %w", id, err)
	}
	return nil
}

// Overlay and OCI spellings of a deletion and of a directory that hides
// what was below it.
const (
	opaqueXattr  = "SCHILY.xattr.trusted.overlay.opaque"
	overlayXattr = "SCHILY.xattr.trusted.overlay."
	whiteoutPfx  = ".wh."
	opaqueMarker = ".wh..wh..opq"
)

// runtimeOwned are files the agent rewrites at every boot (the resolver
// pointed at the node's gateway): they belong to the machine that ran the
// step, not to the layer, as a container build leaves its resolv.conf out.
var runtimeOwned = map[string]bool{
	"etc/resolv.conf":       true,
	"etc/resolv.conf.space": true,
}

// ociLayer copies runsc's tar of an overlay upper layer to w as an OCI
// changeset. In runsc's tar a deletion is a character device 0/0, later
// deletions are hard links to the first one (they share its inode), and a
// directory that replaced a lower one has the trusted.overlay.opaque
// attribute. The root entry and the overlay attributes are dropped.
func ociLayer(r io.Reader, w io.Writer) error {
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	whiteouts := map[string]bool{}
	dropped := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read upper layer: %w", err)
		}
		name, err := entryName(hdr.Name)
		if err != nil {
			return err
		}
		if name == "" {
			continue // the root directory
		}
		link := ""
		if hdr.Typeflag == tar.TypeLink {
			if link, err = entryName(hdr.Linkname); err != nil {
				return err
			}
		}
		isWhiteout := (hdr.Typeflag == tar.TypeChar && hdr.Devmajor == 0 && hdr.Devminor == 0) ||
			(hdr.Typeflag == tar.TypeLink && whiteouts[link])
		switch {
		case isWhiteout:
			whiteouts[name] = true
			if !runtimeOwned[name] {
				if err := writeMarker(tw, path.Join(path.Dir(name), whiteoutPfx+path.Base(name)), hdr); err != nil {
					return err
				}
			}
		case runtimeOwned[name]:
			dropped[name] = true
		case hdr.Typeflag == tar.TypeLink && dropped[link]:
			return fmt.Errorf("%s is a hard link to /%s, which a layer leaves out", name, link)
		default:
			if err := copyEntry(tw, tr, hdr, name, link); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write layer: %w", err)
	}
	return nil
}

// copyEntry writes one non-deletion entry under its clean name, without
// overlay attributes, and after a directory that hid the one below it the
// opaque marker.
func copyEntry(tw *tar.Writer, tr *tar.Reader, hdr *tar.Header, name, link string) error {
	opaque := hdr.PAXRecords[opaqueXattr] == "y"
	out := *hdr
	out.Name, out.Linkname = name, hdr.Linkname
	if hdr.Typeflag == tar.TypeLink {
		out.Linkname = link
	}
	if hdr.Typeflag == tar.TypeDir {
		out.Name += "/"
	}
	out.PAXRecords = nil
	for k, v := range hdr.PAXRecords {
		if !strings.HasPrefix(k, overlayXattr) {
			if out.PAXRecords == nil {
				out.PAXRecords = map[string]string{}
			}
			out.PAXRecords[k] = v
		}
	}
	out.Xattrs = nil //nolint:staticcheck // PAXRecords carries them
	out.Format = tar.FormatPAX
	if err := tw.WriteHeader(&out); err != nil {
		return fmt.Errorf("write layer entry %s: %w", name, err)
	}
	if _, err := io.Copy(tw, tr); err != nil {
		return fmt.Errorf("write layer entry %s: %w", name, err)
	}
	if opaque && hdr.Typeflag == tar.TypeDir {
		return writeMarker(tw, path.Join(name, opaqueMarker), hdr)
	}
	return nil
}

// writeMarker writes an empty OCI whiteout or opaque marker file.
func writeMarker(tw *tar.Writer, name string, like *tar.Header) error {
	err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg, Name: name, Mode: 0o600,
		ModTime: like.ModTime, Format: tar.FormatPAX,
	})
	if err != nil {
		return fmt.Errorf("write layer marker %s: %w", name, err)
	}
	return nil
}

// entryName is a tar entry's path relative to the root ("" for the root),
// refusing names that leave it.
func entryName(name string) (string, error) {
	clean := path.Clean("/" + filepath.ToSlash(name))
	if strings.Contains(name, "\x00") {
		return "", fmt.Errorf("layer entry name %q is not valid", name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("layer entry %q leaves the root", name)
		}
	}
	return strings.TrimPrefix(clean, "/"), nil
}
