package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/spacesandbox/space/internal/egress/dialer"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/ociimage/ocitest"
	"github.com/spacesandbox/space/internal/rootfs"
)

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// puller pulls through a tenant dialer that allows allow.
func puller(allow []netip.Prefix) *Puller {
	return NewPuller(dialer.New(dialer.Config{Allow: allow}), slog.New(slog.DiscardHandler))
}

// testImage has two layers; the second deletes a file of the first.
func testImage(t *testing.T) v1.Image {
	return ocitest.Image(t, []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}, "/srv", "app",
		ocitest.Layer(t, ocitest.File{Name: "etc/", Dir: true}, ocitest.File{Name: "etc/os-release", Body: "ID=test\n"},
			ocitest.File{Name: "tmp/old", Body: "old"}),
		ocitest.Layer(t, ocitest.File{Name: "srv/", Dir: true}, ocitest.File{Name: "srv/app.py", Body: "print(1)\n"},
			ocitest.File{Name: "tmp/.wh.old"}),
	)
}

// unpack flattens img into a fresh directory.
func unpack(t *testing.T, img *Image) string {
	t.Helper()
	var buf bytes.Buffer
	if err := img.Flatten(context.Background(), &buf, 1<<30); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := rootfs.Apply(context.Background(), dir, &buf, rootfs.ApplyOptions{Private: true}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func checkImage(t *testing.T, img *Image, dir string) {
	t.Helper()
	if img.Config.Workdir != "/srv" || img.Config.User != "app" || len(img.Config.Env) != 2 || img.Config.Env[1].Value != "C.UTF-8" {
		t.Errorf("config = %+v", img.Config)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "srv/app.py")); string(got) != "print(1)\n" {
		t.Errorf("srv/app.py = %q", got)
	}
	if _, err := os.Lstat(filepath.Join(dir, "tmp/old")); !os.IsNotExist(err) {
		t.Errorf("a file the top layer deleted is there: %v", err)
	}
}

func TestPullFromRegistry(t *testing.T) {
	reg := ocitest.NewRegistry(t, "", "")
	ref := reg.Push(t, "team/app", "v1", testImage(t))
	ctx := context.Background()

	img, err := puller(loopback).Resolve(ctx, ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(img.Digest, "sha256:") {
		t.Errorf("digest %q", img.Digest)
	}
	checkImage(t, img, unpack(t, img))

	// The same image by digest has the same identity.
	byDigest, err := puller(loopback).Resolve(ctx, reg.Host+"/team/app@"+img.Digest, nil)
	if err != nil || byDigest.Digest != img.Digest {
		t.Errorf("by digest: %v, %v", byDigest, err)
	}
}

func TestPullRefusals(t *testing.T) {
	open := ocitest.NewRegistry(t, "", "")
	ref := open.Push(t, "app", "v1", testImage(t))
	locked := ocitest.NewRegistry(t, "alice", "s3cret")
	lockedRef := locked.Push(t, "app", "v1", testImage(t))
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		p     *Puller
		ref   string
		auth  *Auth
		want  string
		works bool
	}{
		{"loopback is in the floor", puller(nil), ref, nil, "cannot reach the registry of", false},
		{"missing image", puller(loopback), open.Host + "/nope:v1", nil, "not found", false},
		{"bad reference", puller(loopback), "UPPER CASE", nil, "not a valid reference", false},
		{"credentials needed", puller(loopback), lockedRef, nil, "without credentials", false},
		{"wrong credentials", puller(loopback), lockedRef, &Auth{"alice", "wrong"}, "refused the credentials", false},
		{"right credentials", puller(loopback), lockedRef, &Auth{"alice", "s3cret"}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.p.Resolve(ctx, tc.ref, tc.auth)
			if tc.works {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || errdefs.Class(err) != errdefs.ErrInvalidArgument || !strings.Contains(errdefs.PublicMessage(err), tc.want) {
				t.Fatalf("err = %v (%q), want invalid argument saying %q", err, errdefs.PublicMessage(err), tc.want)
			}
			if tc.auth != nil && strings.Contains(errdefs.PublicMessage(err), tc.auth.Password) {
				t.Error("the message shows the password")
			}
		})
	}
}

// TestUnreachableOneText: whatever stands in the way of a registry (an
// address the dialer refuses, a closed port, an open port that is no
// registry), a tenant gets one text; a refusal is not retried.
func TestUnreachableOneText(t *testing.T) {
	ctx := context.Background()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedHost := closed.Addr().String()
	closed.Close()
	silent := listenAndDo(t, func(c net.Conn) { c.Close() })
	garbage := listenAndDo(t, func(c net.Conn) { io.WriteString(c, "SSH-2.0-OpenSSH_9.2\r\n"); c.Close() })
	refused := listenAndDo(t, func(c net.Conn) { t.Errorf("the refused pull reached its listener"); c.Close() })
	var got []string
	for _, tc := range []struct {
		name string
		p    *Puller
		host string
	}{
		{"refused address", puller(nil), refused},
		{"closed port", puller(loopback), closedHost},
		{"open port that closes", puller(loopback), silent},
		{"open port that is no HTTP server", puller(loopback), garbage},
	} {
		ref := tc.host + "/x/y:latest"
		_, err := tc.p.Resolve(ctx, ref, nil)
		msg := strings.Replace(errdefs.PublicMessage(err), ref, "REF", 1)
		t.Logf("%s: %q (cause: %v)", tc.name, msg, err)
		if errdefs.Class(err) != errdefs.ErrInvalidArgument {
			t.Errorf("%s: class %v", tc.name, errdefs.Class(err))
		}
		got = append(got, msg)
	}
	for i := range got {
		if got[i] != unreachable("REF") {
			t.Errorf("answer %d differs: %q", i, got[i])
		}
	}

	// A refusal is tried once: the dialer logs each refused connect.
	var log bytes.Buffer
	p := NewPuller(dialer.New(dialer.Config{Logger: slog.New(slog.NewTextHandler(&log, nil))}), slog.New(slog.DiscardHandler))
	// An address outside loopback, so the registry's scheme is https
	// alone (one ping); refused before any packet is sent.
	if _, err := p.Resolve(ctx, "169.254.169.254/x/y:latest", nil); !dialer.IsRefused(err) {
		t.Fatalf("err = %v, want refused", err)
	}
	if n := strings.Count(log.String(), "refused a connection"); n != 1 {
		t.Errorf("%d refused connects, want 1:\n%s", n, log.String())
	}
}

// listenAndDo serves every connection to a loopback listener with do and
// returns its address.
func listenAndDo(t *testing.T, do func(net.Conn)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			do(c)
		}
	}()
	return ln.Addr().String()
}

func TestArchives(t *testing.T) {
	img := testImage(t)
	dir := t.TempDir()

	// docker save
	docker := filepath.Join(dir, "docker.tar")
	tag, _ := name.NewTag("app:v1")
	if err := tarball.WriteToFile(docker, tag, img); err != nil {
		t.Fatal(err)
	}
	got, err := FromArchive(docker, filepath.Join(dir, "scratch1"))
	if err != nil {
		t.Fatal(err)
	}
	checkImage(t, got, unpack(t, got))

	// OCI layout, tarred
	lp, err := layout.Write(filepath.Join(dir, "layout"), emptyIndex())
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	oci := filepath.Join(dir, "oci.tar")
	tarDir(t, filepath.Join(dir, "layout"), oci)
	got, err = FromArchive(oci, filepath.Join(dir, "scratch2"))
	if err != nil {
		t.Fatal(err)
	}
	checkImage(t, got, unpack(t, got))

	// Neither
	junk := filepath.Join(dir, "junk.tar")
	tarDir(t, filepath.Join(dir, "scratch2", "blobs"), junk)
	if _, err := FromArchive(junk, filepath.Join(dir, "scratch3")); err == nil || !strings.Contains(errdefs.PublicMessage(err), "neither") {
		t.Errorf("junk archive: %v", err)
	}
	// Not a tar at all
	os.WriteFile(junk, []byte("\x1f\x8bnot a tar"), 0o600)
	if _, err := FromArchive(junk, filepath.Join(dir, "scratch4")); err == nil || errdefs.Class(err) != errdefs.ErrInvalidArgument {
		t.Errorf("gzip junk: %v", err)
	}
}

// tarDir writes the tree at src as a tar.
func tarDir(t *testing.T, src, dst string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." {
			return nil
		}
		h, _ := tar.FileInfoHeader(fi, "")
		h.Name = rel
		if fi.IsDir() {
			h.Name += "/"
		}
		tw.WriteHeader(h)
		if fi.Mode().IsRegular() {
			f, _ := os.Open(p)
			io.Copy(tw, f)
			f.Close()
		}
		return nil
	})
	tw.Close()
	if err := os.WriteFile(dst, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

func emptyIndex() v1.ImageIndex { return empty.Index }

// TestFlattenLimit: an image whose layers unpack past the limit stops
// there with ErrTooLarge, however small its download (a layer of zeros
// compresses to almost nothing), and what was written stays under the
// limit; its manifest's sizes are the compressed ones.
func TestFlattenLimit(t *testing.T) {
	reg := ocitest.NewRegistry(t, "", "")
	zeros := strings.Repeat("\x00", 2<<20)
	ref := reg.Push(t, "team/bomb", "v1", ocitest.Image(t, nil, "/", "",
		ocitest.Layer(t, ocitest.File{Name: "a", Body: zeros}), ocitest.Layer(t, ocitest.File{Name: "b", Body: zeros})))
	ctx := context.Background()
	img, err := puller(loopback).Resolve(ctx, ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	if img.Bytes <= 0 || img.Bytes > 256<<10 {
		t.Errorf("compressed size %d: want the layers' gzip sizes (a few KB)", img.Bytes)
	}
	for _, tc := range []struct {
		max      int64
		tooLarge bool
	}{{512 << 10, true}, {3 << 20, true}, {8 << 20, false}} {
		var out countWriter
		err := img.Flatten(ctx, &out, tc.max)
		switch {
		case tc.tooLarge && (errdefs.Class(err) != errdefs.ErrTooLarge || !strings.Contains(err.Error(), "SPACE_TEMPLATE_MAX_IMAGE")):
			t.Errorf("limit %d: %v, want too large naming SPACE_TEMPLATE_MAX_IMAGE", tc.max, err)
		case !tc.tooLarge && err != nil:
			t.Errorf("limit %d: %v", tc.max, err)
		}
		if out.n > tc.max {
			t.Errorf("limit %d: %d bytes written", tc.max, out.n)
		}
		if !tc.tooLarge && out.n < 4<<20 {
			t.Errorf("limit %d: only %d bytes of a 4 MiB image", tc.max, out.n)
		}
	}
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// TestPlatform: an image is taken for the host's architecture (the
// sandbox runs its binaries on the host's CPU) and refused, naming both,
// for another.
func TestPlatform(t *testing.T) {
	other := map[string]string{"amd64": "arm64"}[runtime.GOARCH]
	if other == "" {
		other = "amd64"
	}
	for _, tc := range []struct {
		arch  string
		works bool
	}{{runtime.GOARCH, true}, {"", true}, {other, false}} {
		t.Run("arch "+tc.arch, func(t *testing.T) {
			img := testImage(t)
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			cf = cf.DeepCopy()
			cf.Architecture = tc.arch
			if img, err = mutate.ConfigFile(img, cf); err != nil {
				t.Fatal(err)
			}
			_, err = newImage(img, "test")
			if tc.works {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			want := "is for linux/" + other + "; templates here run linux/" + runtime.GOARCH
			if errdefs.Class(err) != errdefs.ErrInvalidArgument || !strings.Contains(errdefs.PublicMessage(err), want) {
				t.Fatalf("err = %v, want invalid argument saying %q", err, want)
			}
		})
	}
}
