package templates

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/ociimage/ocitest"
	"github.com/spacesandbox/space/test/harness"
)

// TestRegistryImage builds on an image the test made from tar layers and
// pushed to a registry on loopback that wants credentials: the image's
// env and files are the template's, steps run on it, and each way a pull
// can fail answers 400 saying what to fix, before a build starts.
func TestRegistryImage(t *testing.T) {
	t.Parallel()
	d := ownDaemon(t, harness.Options{Name: "registry", CIDR: "10.247.8.0/22"})
	reg := ocitest.NewRegistry(t, "alice", "s3cret")
	ref := reg.Push(t, "team/tiny", "v1", busybox(t, ocitest.File{Name: "etc/motd", Body: "from the registry\n"}))

	b := mustBuild(t, d, "", client.BuildRequest{
		Name: "tiny",
		From: &client.BuildFrom{Image: ref, Registry: &client.RegistryAuth{Username: "alice", Password: "s3cret"}},
		Steps: []client.BuildStep{
			{Run: "echo built-on-busybox > /root/marker"},
			{Env: map[string]string{"STEP_VAR": "from-a-step"}},
		},
	})
	if !strings.Contains(b.messages(0), "stored the image as one layer") {
		t.Errorf("the source was not stored as a layer:\n%s", b.messages(0))
	}
	sb := d.NewSandbox(t, client.CreateSandboxRequest{Template: "tiny"})
	if got := sh(t, d, sb.ID, "", "id -un; cat /etc/motd /root/marker; echo $IMAGE_VAR $STEP_VAR"); got != "root\nfrom the registry\nbuilt-on-busybox\nfrom-the-image from-a-step\n" {
		t.Errorf("sandbox of tiny: %q", got)
	}
	// The credentials are not stored: nothing of them in the build.
	data, _ := os.ReadFile(filepath.Join(d.DataDir, "state.db"))
	if bytes.Contains(data, []byte("s3cret")) {
		t.Error("the registry password is in spaced's state file")
	}

	// A second build reuses the stored source (no pull: the registry
	// could be gone).
	again := mustBuild(t, d, "", client.BuildRequest{
		Name: "tiny", Tags: []string{"again"},
		From:  &client.BuildFrom{Image: ref, Registry: &client.RegistryAuth{Username: "alice", Password: "s3cret"}},
		Steps: []client.BuildStep{{Run: "echo built-on-busybox > /root/marker"}, {Env: map[string]string{"STEP_VAR": "from-a-step"}}},
	})
	if again.Cached != 1 || strings.Contains(again.messages(0), "stored the image") {
		t.Errorf("rebuild: %d cached; source log:\n%s", again.Cached, again.messages(0))
	}

	ctx := harness.Ctx(t, time.Minute)
	for _, tc := range []struct {
		name string
		from client.BuildFrom
		want string
	}{
		{"no credentials", client.BuildFrom{Image: ref}, "without credentials"},
		{"wrong credentials", client.BuildFrom{Image: ref, Registry: &client.RegistryAuth{Username: "alice", Password: "nope"}}, "refused the credentials"},
		{"no such image", client.BuildFrom{Image: reg.Host + "/team/nothing:v1", Registry: &client.RegistryAuth{Username: "alice", Password: "s3cret"}}, "not found"},
		// 127.0.0.2 is loopback too, but only 127.0.0.1 is allowed.
		{"address in the floor", client.BuildFrom{Image: strings.Replace(ref, "127.0.0.1", "127.0.0.2", 1)}, "cannot reach the registry of"},
		{"bad reference", client.BuildFrom{Image: "Not A Ref"}, "not a valid image reference"},
		{"no such template", client.BuildFrom{Template: "nope"}, "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.Client.StartBuild(ctx, client.BuildRequest{Name: "refused", From: &tc.from})
			if client.ErrorStatus(err) != 400 || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want 400 saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "nope") && tc.from.Registry != nil && strings.Contains(err.Error(), tc.from.Registry.Password) {
				t.Error("the error shows the password")
			}
		})
	}
}

// TestImageArchives builds on images uploaded as a docker save tar and as
// an OCI layout tar.
func TestImageArchives(t *testing.T) {
	t.Parallel()
	d := ownDaemon(t, harness.Options{Name: "archives", CIDR: "10.247.12.0/22"})
	img := busybox(t, ocitest.File{Name: "etc/origin", Body: "archive\n"})
	dir := t.TempDir()

	docker := filepath.Join(dir, "docker.tar")
	tag, _ := name.NewTag("tiny:v1")
	if err := tarball.WriteToFile(docker, tag, img); err != nil {
		t.Fatal(err)
	}
	lp, err := layout.Write(filepath.Join(dir, "layout"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	oci := filepath.Join(dir, "oci.tar")
	tarTree(t, filepath.Join(dir, "layout"), oci)

	ctx := harness.Ctx(t, time.Minute)
	for _, file := range []string{docker, oci} {
		t.Run(filepath.Base(file), func(t *testing.T) {
			hash := upload(t, d, file)
			name := strings.TrimSuffix(filepath.Base(file), ".tar")
			mustBuild(t, d, "", client.BuildRequest{Name: name, From: &client.BuildFrom{Archive: hash}})
			sb := d.NewSandbox(t, client.CreateSandboxRequest{Template: name})
			if got := sh(t, d, sb.ID, "", "cat /etc/origin"); got != "archive\n" {
				t.Errorf("sandbox of %s: %q", name, got)
			}
		})
	}
	// Neither kind of archive: refused before the build.
	junk := filepath.Join(dir, "junk.tar")
	os.WriteFile(junk, tarOf(t, map[string]string{"hello.txt": "hi"}), 0o600)
	_, err = d.Client.StartBuild(ctx, client.BuildRequest{Name: "junk", From: &client.BuildFrom{Archive: upload(t, d, junk)}})
	if client.ErrorStatus(err) != 400 || !strings.Contains(err.Error(), "neither a docker save tar") {
		t.Errorf("junk archive: %v", err)
	}
	// An upload whose hash is not its content's: refused, nothing stored.
	err = d.Client.PutFiles(ctx, strings.Repeat("0", 64), strings.NewReader("data"), 4)
	if client.ErrorStatus(err) != 400 || !strings.Contains(err.Error(), "SHA-256") {
		t.Errorf("mismatched hash: %v", err)
	}
	if ok, _ := d.Client.HasFiles(ctx, strings.Repeat("0", 64)); ok {
		t.Error("a refused upload was stored")
	}
}

// upload puts a file as a file set and returns its hash.
func upload(t *testing.T, d *harness.Daemon, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	hash := hex.EncodeToString(sum[:])
	if err := d.Client.PutFiles(harness.Ctx(t, time.Minute), hash, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("upload %s: %v", file, err)
	}
	return hash
}

// tarTree tars the tree at src into dst.
func tarTree(t *testing.T, src, dst string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." {
			return nil
		}
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, f)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tw.Close()
	if err := os.WriteFile(dst, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestImageSizeLimit: what a build unpacks on the host is bounded by
// SPACE_TEMPLATE_MAX_IMAGE. An image whose compressed layers alone are
// over it is refused with 413 when the build is asked for, from a
// registry or an upload; one that only unpacks past it (a small download
// of zeros) and a step whose layer is over it fail the build at that
// point, saying so. Nothing of them is left: no layer stored, no image,
// no unpacked archive or partial tar in the work directory.
func TestImageSizeLimit(t *testing.T) {
	t.Parallel()
	const limit = 4 << 20
	d := ownDaemon(t, harness.Options{Name: "sizelimit", CIDR: "10.247.40.0/22",
		Env: []string{"SPACE_TEMPLATE_MAX_IMAGE=" + strconv.Itoa(limit)}})
	ctx := harness.Ctx(t, 5*time.Minute)
	reg := ocitest.NewRegistry(t, "", "")
	noise := make([]byte, 6<<20)
	rand.Read(noise)
	big := ocitest.Image(t, nil, "/", "", ocitest.Layer(t, ocitest.File{Name: "noise", Body: string(noise)}))
	bomb := ocitest.Image(t, nil, "/", "", ocitest.Layer(t, ocitest.File{Name: "zeros", Body: strings.Repeat("\x00", 8<<20)}))
	archive := func(img v1.Image) string {
		file := filepath.Join(t.TempDir(), "image.tar")
		tag, _ := name.NewTag("img:v1")
		if err := tarball.WriteToFile(file, tag, img); err != nil {
			t.Fatal(err)
		}
		return upload(t, d, file)
	}

	for _, from := range map[string]client.BuildFrom{
		"registry": {Image: reg.Push(t, "team/big", "v1", big)},
		"archive":  {Archive: archive(big)},
	} {
		_, err := d.Client.StartBuild(ctx, client.BuildRequest{Name: "big", From: &from})
		if client.ErrorStatus(err) != 413 || !strings.Contains(err.Error(), "SPACE_TEMPLATE_MAX_IMAGE") {
			t.Errorf("an image over the limit from %+v: %v, want 413 naming SPACE_TEMPLATE_MAX_IMAGE", from, err)
		}
	}
	for what, req := range map[string]client.BuildRequest{
		"a registry image": {Name: "bomb", From: &client.BuildFrom{Image: reg.Push(t, "team/bomb", "v1", bomb)}},
		"an archive":       {Name: "bomb", From: &client.BuildFrom{Archive: archive(bomb)}},
		"a step":           {Name: "bigstep", From: &client.BuildFrom{Template: "base"}, Steps: []client.BuildStep{{Run: "head -c 6291456 /dev/zero > /home/user/big"}}},
	} {
		b := build(t, d, "", req)
		if b.State != client.BuildStateFailed || b.Error == nil || !strings.Contains(b.Error.Message, "SPACE_TEMPLATE_MAX_IMAGE") {
			t.Errorf("%s unpacking past the limit: %s, %+v; want failed naming SPACE_TEMPLATE_MAX_IMAGE\n%s", what, b.State, b.Error, b.messages(-1))
		}
	}
	if n := storedBytes(t, d); n != 0 {
		t.Errorf("%d bytes of layers stored by builds over the limit", n)
	}
	for _, e := range harness.DirEntries(filepath.Join(d.Opts.TemplatesDir, "_images")) {
		if !strings.HasPrefix(e, ".tmp-") {
			t.Errorf("image %s left", e)
		}
	}
	if !harness.WaitFor(10*time.Second, func() bool { return len(workLeft(d)) == 0 }) {
		t.Errorf("left in the template work directory: %v", workLeft(d))
	}
}

// workLeft is what d's template work directory holds besides its uploads.
func workLeft(d *harness.Daemon) []string {
	var out []string
	for _, e := range harness.DirEntries(filepath.Join(d.DataDir, "template-work")) {
		if e != "files" {
			out = append(out, e)
		}
	}
	return out
}
