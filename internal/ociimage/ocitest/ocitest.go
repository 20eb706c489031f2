// Package ocitest makes OCI images from files and serves them from a real
// registry (go-containerregistry's implementation of the distribution
// protocol) on loopback, for tests of template builds. Nothing here
// reaches outside the machine.
package ocitest

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one entry of a layer: a regular file (Body), a directory (Dir),
// a symlink (Link) or a whiteout (a name starting with ".wh.").
type File struct {
	Name string
	Body string
	Mode int64
	Dir  bool
	Link string
}

// Layer makes an uncompressed-tar layer of files.
func Layer(t testing.TB, files ...File) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.Name, Mode: f.Mode, Typeflag: tar.TypeReg, Size: int64(len(f.Body))}
		switch {
		case f.Dir:
			h.Typeflag, h.Size = tar.TypeDir, 0
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, f.Link, 0
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if f.Dir {
				h.Mode = 0o755
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, f.Body)
	}
	tw.Close()
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Image stacks layers into an image for this host (linux, its
// architecture) with env, workdir, user.
func Image(t testing.TB, env []string, workdir, user string, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Env, cf.Config.WorkingDir, cf.Config.User = env, workdir, user
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// Registry is a registry on loopback.
type Registry struct {
	// Host is "127.0.0.1:port".
	Host   string
	srv    *httptest.Server
	user   string
	pass   string
	served atomic.Int64
}

// NewRegistry starts a registry that, when user is set, wants Basic auth
// with user and pass on every request (401 with a challenge otherwise).
func NewRegistry(t testing.TB, user, pass string) *Registry {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return NewRegistryOn(t, ln, user, pass)
}

// NewRegistryOn is NewRegistry on ln: an address of the test's choosing.
func NewRegistryOn(t testing.TB, ln net.Listener, user, pass string) *Registry {
	t.Helper()
	r := &Registry{user: user, pass: pass}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.served.Add(1)
		if r.user != "" {
			u, p, ok := req.BasicAuth()
			if !ok || u != r.user || p != r.pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
		}
		reg.ServeHTTP(w, req)
	}))
	r.srv.Listener.Close()
	r.srv.Listener = ln
	r.srv.Start()
	t.Cleanup(r.srv.Close)
	r.Host = strings.TrimPrefix(r.srv.URL, "http://")
	return r
}

// Served counts the requests the registry answered (pushes included).
func (r *Registry) Served() int64 { return r.served.Load() }

// Push stores img as repo:tag and returns its reference.
func (r *Registry) Push(t testing.TB, repo, tag string, img v1.Image) string {
	t.Helper()
	ref := fmt.Sprintf("%s/%s:%s", r.Host, repo, tag)
	tagRef, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	opts := []remote.Option{}
	if r.user != "" {
		opts = append(opts, remote.WithAuth(&authn.Basic{Username: r.user, Password: r.pass}))
	}
	if err := remote.Write(tagRef, img, opts...); err != nil {
		t.Fatal(err)
	}
	return ref
}
