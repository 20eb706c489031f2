// Package ociimage reads the images a template can start from: an image in
// any registry that speaks the distribution protocol (with credentials),
// or an uploaded `docker save` or OCI layout archive. It uses
// go-containerregistry, which handles manifests, indexes, platforms,
// media types, compression and whiteouts. spaced pulls on the host, on
// the tenant's behalf, so the puller connects only through the tenant
// dialer (package egress/dialer): no registry on this node's own
// addresses, its cluster's, loopback, private or metadata addresses
// unless the operator allowed it. A registry that cannot be reached, for
// whatever reason, gets one answer, so a pull tells a tenant nothing of
// which ports are open where.
package ociimage

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/spacesandbox/space/internal/egress/dialer"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/recipe"
)

// Auth is a registry credential.
type Auth struct {
	Username string
	Password string
}

// Image is a resolved source image.
type Image struct {
	// Digest is the manifest's digest ("sha256:..."): the image's identity.
	Digest string
	// Config is what the image's config says of env, workdir and user.
	Config recipe.Config
	// Bytes is the sum of its layers' sizes as the manifest gives them
	// (compressed): less than the image unpacks to.
	Bytes int64
	// open gives the image for reading its layers, within ctx (a pull
	// outlives the request that resolved it).
	open func(ctx context.Context) (v1.Image, error)
}

// Puller pulls from registries.
type Puller struct {
	dial *dialer.Dialer
	log  *slog.Logger
}

// NewPuller returns a puller that connects through d (whose allow list
// holds the operator's trusted registries) and logs why a registry could
// not be reached to log.
func NewPuller(d *dialer.Dialer, log *slog.Logger) *Puller {
	return &Puller{dial: d, log: log}
}

// platform is the host's: a sandbox runs the template's binaries on the
// host's CPU.
var platform = v1.Platform{OS: "linux", Architecture: runtime.GOARCH}

// Resolve reads an image's manifest and config from its registry (not its
// layers): a missing image, a refused credential or an unreachable
// registry is found here, before a build is accepted.
func (p *Puller) Resolve(ctx context.Context, ref string, auth *Auth) (*Image, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "image %q is not a valid reference: %v", ref, err)
	}
	opts := func(ctx context.Context) []remote.Option {
		o := []remote.Option{remote.WithContext(ctx), remote.WithPlatform(platform),
			remote.WithTransport(p.dial.Apply(remote.DefaultTransport.(*http.Transport).Clone())),
			remote.WithUserAgent("spaced"), remote.WithRetryBackoff(remote.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 3})}
		if auth != nil && (auth.Username != "" || auth.Password != "") {
			o = append(o, remote.WithAuth(&authn.Basic{Username: auth.Username, Password: auth.Password}))
		}
		return o
	}
	img, err := remote.Image(r, opts(ctx)...)
	if err != nil {
		return nil, p.registryError(ref, auth, err)
	}
	out, err := newImage(img, ref)
	if err != nil {
		return nil, err
	}
	// Later reads pin the digest resolved now: a tag moved meanwhile does
	// not change what the build gets.
	pinned := r.Context().Digest(out.Digest)
	out.open = func(ctx context.Context) (v1.Image, error) {
		img, err := remote.Image(pinned, opts(ctx)...)
		if err != nil {
			return nil, p.registryError(ref, auth, err)
		}
		return img, nil
	}
	return out, nil
}

func newImage(img v1.Image, what string) (*Image, error) {
	d, err := img.Digest()
	if err != nil {
		return nil, errdefs.Wrap(errdefs.ErrInvalidArgument, err, "image %s: cannot read its manifest", what)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, errdefs.Wrap(errdefs.ErrInvalidArgument, err, "image %s: cannot read its config", what)
	}
	if cf.OS != "" && cf.OS != platform.OS || cf.Architecture != "" && cf.Architecture != platform.Architecture {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "image %s is for %s/%s; templates here run %s/%s", what, cf.OS, cf.Architecture, platform.OS, platform.Architecture)
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, errdefs.Wrap(errdefs.ErrInvalidArgument, err, "image %s: cannot read its manifest", what)
	}
	out := &Image{Digest: d.String(), open: func(context.Context) (v1.Image, error) { return img, nil }}
	for _, l := range m.Layers {
		out.Bytes += l.Size
	}
	out.Config.Workdir = cf.Config.WorkingDir
	out.Config.User = cf.Config.User
	for _, kv := range cf.Config.Env {
		k, v, _ := strings.Cut(kv, "=")
		out.Config = out.Config.Apply(recipe.Step{Env: []recipe.EnvVar{{Name: k, Value: v}}})
	}
	return out, nil
}

// registryError says what to fix. Every failure to reach the registry
// (an address the dialer refuses, a closed port, a timeout, a server that
// does not speak HTTP or TLS) gives one text, so that a tenant learns
// nothing of what listens where; the cause goes to the log.
func (p *Puller) registryError(ref string, auth *Auth, err error) error {
	var terr *transport.Error
	if errors.As(err, &terr) {
		switch terr.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			if auth == nil {
				return errdefs.Wrap(errdefs.ErrInvalidArgument, err, "registry refused to serve %s without credentials: give a registry username and password", ref)
			}
			return errdefs.Wrap(errdefs.ErrInvalidArgument, err, "registry refused the credentials given for %s", ref)
		case http.StatusNotFound:
			return errdefs.Wrap(errdefs.ErrInvalidArgument, err, "image %s not found in its registry", ref)
		}
		return errdefs.Wrap(errdefs.ErrInvalidArgument, err, "registry answered %d for %s", terr.StatusCode, ref)
	}
	if strings.Contains(err.Error(), "no child with platform") {
		return errdefs.Wrap(errdefs.ErrInvalidArgument, err, "image %s has no %s/%s variant", ref, platform.OS, platform.Architecture)
	}
	p.log.Warn("cannot reach a registry", "ref", ref, "refused", dialer.IsRefused(err), "err", err)
	return errdefs.Wrap(errdefs.ErrInvalidArgument, err, "%s", unreachable(ref))
}

// unreachable is what a client is told of any registry that could
// not be reached.
func unreachable(ref string) string {
	return fmt.Sprintf("cannot reach the registry of %s (spaced pulls only from registries it can reach outside its own and private addresses; an operator can trust one with SPACE_REGISTRY_ALLOW)", ref)
}

// FromArchive reads an uploaded `docker save` tar or OCI layout tar (not
// compressed). A layout is unpacked into scratch, which the caller
// removes after the image is no longer read.
func FromArchive(file, scratch string) (*Image, error) {
	kind, err := archiveKind(file)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "docker":
		img, err := tarball.ImageFromPath(file, nil)
		if err != nil {
			return nil, errdefs.Wrap(errdefs.ErrInvalidArgument, err, "the archive is not a readable docker save tar: %v", err)
		}
		return newImage(img, "from the archive")
	case "oci":
		if err := unpackLayout(file, scratch); err != nil {
			return nil, err
		}
		idx, err := layout.ImageIndexFromPath(scratch)
		if err != nil {
			return nil, errdefs.Wrap(errdefs.ErrInvalidArgument, err, "the archive is not a readable OCI layout: %v", err)
		}
		img, err := pickImage(idx)
		if err != nil {
			return nil, err
		}
		return newImage(img, "from the archive")
	}
	return nil, errdefs.New(errdefs.ErrInvalidArgument, "the archive is neither a docker save tar (manifest.json) nor an OCI layout (oci-layout, index.json)")
}

// archiveKind looks at the names at the archive's root.
func archiveKind(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("open archive: %w", err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	var hasLayout, hasIndex bool
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", errdefs.Wrap(errdefs.ErrInvalidArgument, err, "the archive is not a tar (gzip is not accepted here): %v", err)
		}
		switch path.Clean(h.Name) {
		case "manifest.json":
			return "docker", nil
		case "oci-layout":
			hasLayout = true
		case "index.json":
			hasIndex = true
		}
	}
	if hasLayout && hasIndex {
		return "oci", nil
	}
	return "", nil
}

// unpackLayout writes the archive's regular files and directories under
// dir, through os.Root so that no name leaves it (links are not needed
// by a layout and are skipped).
func unpackLayout(file, dir string) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("open archive: %w", err)
	}
	defer f.Close()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	// What is unpacked is bounded by the archive's own size: a layout's
	// blobs are stored, not compressed, by tar, so only a sparse entry
	// (whose holes are not in the archive) could unpack to more.
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat archive: %w", err)
	}
	left := st.Size()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return errdefs.Wrap(errdefs.ErrInvalidArgument, err, "read the OCI layout archive: %v", err)
		}
		if left -= max(h.Size, 0); left < 0 {
			return errdefs.New(errdefs.ErrTooLarge, "the OCI layout archive unpacks to more than its own %d bytes (a sparse entry?): refused", st.Size())
		}
		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		if name == "" {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = root.MkdirAll(name, 0o700)
		case tar.TypeReg:
			if d := path.Dir(name); d != "." {
				if err = root.MkdirAll(d, 0o700); err != nil {
					break
				}
			}
			var out *os.File
			if out, err = root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
				_, err = io.Copy(out, tr)
				if cerr := out.Close(); err == nil {
					err = cerr
				}
			}
		}
		if err != nil {
			return errdefs.Wrap(errdefs.ErrInvalidArgument, err, "unpack the OCI layout archive at %s: %v", name, err)
		}
	}
}

// pickImage is the image of an index for this platform (descending into nested
// indexes), or its only image.
func pickImage(idx v1.ImageIndex) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, errdefs.Wrap(errdefs.ErrInvalidArgument, err, "read the layout's index: %v", err)
	}
	var images []v1.Descriptor
	for _, d := range m.Manifests {
		switch {
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err == nil {
				if img, err := pickImage(child); err == nil {
					return img, nil
				}
			}
		case d.MediaType.IsImage():
			if d.Platform == nil || d.Platform.Satisfies(platform) {
				images = append(images, d)
			}
		}
	}
	if len(images) == 0 {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "the archive holds no %s/%s image", platform.OS, platform.Architecture)
	}
	return idx.Image(images[0].Digest)
}

// Flatten writes the image's whole filesystem as one tar (what its layers
// leave, whiteouts applied): a template keeps its source as this one
// layer, so no node needs the registry again. It stops, with ErrTooLarge,
// before the tar grows past max bytes: layers are unpacked as they
// stream, so a small download may unpack to much more (a hostile one to
// far more than any disk).
func (i *Image) Flatten(ctx context.Context, w io.Writer, max int64) error {
	img, err := i.open(ctx)
	if err != nil {
		return err
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	capped := &capWriter{w: w, left: max}
	if _, err := io.Copy(capped, rc); err != nil {
		if errors.Is(err, errOverCap) {
			return errdefs.New(errdefs.ErrTooLarge, "the image unpacks to more than %d bytes, the limit for images (SPACE_TEMPLATE_MAX_IMAGE): use a smaller image", max)
		}
		return errdefs.Wrap(errdefs.ErrUnavailable, err, "download the image's layers: %v", err)
	}
	return nil
}

var errOverCap = errors.New("over the size limit")

// capWriter passes at most left bytes on, then fails.
type capWriter struct {
	w    io.Writer
	left int64
}

func (c *capWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		return 0, errOverCap
	}
	n, err := c.w.Write(p)
	c.left -= int64(n)
	return n, err
}
