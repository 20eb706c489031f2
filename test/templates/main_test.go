// Package templates builds templates with a real spaced and real gVisor
// sandboxes: Dockerfiles with every supported instruction, the layer cache
// (a second build runs no step; a changed COPY'd file reruns only the steps
// from it on), images pulled from a real registry on loopback
// (go-containerregistry's implementation, with credentials) and uploaded as
// archives, start commands already running when a create answers,
// versions, tags, deletion while in use and collection, warm pools per
// template, and what goes wrong: failing steps, bad input, time and disk
// limits, a restart of spaced in the middle of a build. Each test runs its
// own spaced (test/harness) on its own range inside 10.247.0.0/16, with a
// templates directory of its own that shares only the base template.
package templates

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/ociimage/ocitest"
	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/test/harness"
)

func TestMain(m *testing.M) {
	os.Exit(harness.Main(m, harness.Suite{
		Name: "templates",
		Root: "they run spaced, runsc, netns and nftables",
	}))
}

// ownDaemon starts a spaced for the test: no warm pool unless asked, pulls
// allowed from loopback (the test's registry), and a templates directory
// of its own (its image cache is the test's alone) holding the base. The
// base is a directory of links to the shared base's entries, not a link to
// it: a daemon here that collects old base images (the GC tests run with a
// 1 s TTL) removes links, never an image another suite's spaced restores
// its started templates onto.
func ownDaemon(t *testing.T, o harness.Options) *harness.Daemon {
	t.Helper()
	harness.Need(t)
	dir := t.TempDir()
	shared := filepath.Join(testenv.TemplatesDir(), "base")
	entries, err := os.ReadDir(shared)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "base"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Symlink(filepath.Join(shared, e.Name()), filepath.Join(dir, "base", e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	o.TemplatesDir = dir
	o.NoPool = o.Pool == ""
	o.BootTimeout = 10 * time.Second
	o.Env = append([]string{"SPACE_REGISTRY_ALLOW=127.0.0.1/32"}, o.Env...)
	return harness.Own(t, o)
}

// writeTree writes files (path -> content) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// built is a build that ended, with its log.
type built struct {
	*client.Build
	log []client.LogEntry
}

// messages are the log's messages of step (all steps when step < 0).
func (b *built) messages(step int) string {
	var out []string
	for _, e := range b.log {
		if step < 0 || e.Step == step {
			out = append(out, e.Message)
		}
	}
	return strings.Join(out, "\n")
}

// build uploads dir (if given) and builds req, following its log to the end.
func build(t *testing.T, d *harness.Daemon, dir string, req client.BuildRequest) *built {
	t.Helper()
	ctx := harness.Ctx(t, 5*time.Minute)
	if dir != "" {
		up, err := d.Client.UploadContext(ctx, dir)
		if err != nil {
			t.Fatalf("upload context: %v", err)
		}
		req.Context = up.Hash
	}
	b, err := d.Client.StartBuild(ctx, req)
	if err != nil {
		t.Fatalf("start build %s: %v", req.Name, err)
	}
	return follow(t, d, b.ID)
}

// follow reads build id's log until the build ends.
func follow(t *testing.T, d *harness.Daemon, id string) *built {
	t.Helper()
	ctx := harness.Ctx(t, 5*time.Minute)
	s, err := d.Client.BuildLogs(ctx, id, 0)
	if err != nil {
		t.Fatalf("build logs: %v", err)
	}
	defer s.Close()
	out := &built{}
	for {
		e, err := s.Next()
		if errors.Is(err, io.EOF) && s.End != nil {
			out.Build = s.End
			return out
		}
		if err != nil {
			t.Fatalf("build log of %s broke: %v", id, err)
		}
		out.log = append(out.log, *e)
	}
}

// mustBuild builds and fails the test unless the build is ready.
func mustBuild(t *testing.T, d *harness.Daemon, dir string, req client.BuildRequest) *built {
	t.Helper()
	b := build(t, d, dir, req)
	if b.State != client.BuildStateReady {
		t.Fatalf("build %s: %s, error %+v\nlog:\n%s", req.Name, b.State, b.Error, b.messages(-1))
	}
	return b
}

// sh runs a command in a sandbox and returns its stdout; it fails unless
// the command exits 0.
func sh(t *testing.T, d *harness.Daemon, id, user, cmd string) string {
	t.Helper()
	r, err := d.Exec(harness.Ctx(t, time.Minute), id, client.CommandRequest{Cmd: cmd, User: user})
	if err != nil {
		t.Fatalf("%q in %s: %v", cmd, id, err)
	}
	if r.Exit.Code() != 0 {
		t.Fatalf("%q in %s: exit %d\nstdout: %s\nstderr: %s", cmd, id, r.Exit.Code(), harness.Clip(r.Stdout), harness.Clip(r.Stderr))
	}
	return r.Stdout
}

// busybox is a small image the tests push to their registry: the static
// busybox of the host (Debian's busybox-static) with a shell and the
// usual tools as links, and root and nobody accounts.
func busybox(t *testing.T, files ...ocitest.File) v1.Image {
	t.Helper()
	bin, err := os.ReadFile("/bin/busybox")
	if err != nil {
		testenv.Skipf(t, "no static busybox at /bin/busybox (install busybox-static): %v", err)
	}
	layer := []ocitest.File{
		{Name: "bin/", Dir: true}, {Name: "bin/busybox", Body: string(bin), Mode: 0o755},
		{Name: "etc/", Dir: true}, {Name: "root/", Dir: true}, {Name: "tmp/", Dir: true, Mode: 0o1777},
		{Name: "etc/passwd", Body: "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n"},
		{Name: "etc/group", Body: "root:x:0:\nnogroup:x:65534:\n"},
	}
	for _, app := range []string{"sh", "ls", "cat", "echo", "id", "mkdir", "touch", "sleep", "env", "test", "true", "false", "dd", "wc", "grep", "chmod", "stat", "rm", "pwd", "head"} {
		layer = append(layer, ocitest.File{Name: "bin/" + app, Link: "busybox"})
	}
	return ocitest.Image(t, []string{"PATH=/bin", "IMAGE_VAR=from-the-image"}, "/", "",
		ocitest.Layer(t, layer...), ocitest.Layer(t, files...))
}

// tarOf makes a tar of files (path -> content).
func tarOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, body)
	}
	tw.Close()
	return buf.Bytes()
}
