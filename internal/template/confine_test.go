package template

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spacesandbox/space/internal/rootfs"
)

// linkLayer is a layer whose /usr/local/bin and /tmp are links to target
// and tmpTarget, as `mv /usr/local/bin /usr/local/bin.orig && ln -s <dir>
// /usr/local/bin` leaves them.
func linkLayer(t *testing.T, target, tmpTarget string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "usr/local/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "usr/local/bin", Typeflag: tar.TypeSymlink, Linkname: target},
		{Name: "tmp", Typeflag: tar.TypeSymlink, Linkname: tmpTarget},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	return buf.Bytes()
}

func agentFor(t *testing.T) agentFile {
	t.Helper()
	p := filepath.Join(t.TempDir(), "space-agent")
	if err := os.WriteFile(p, []byte("THE AGENT"), 0o755); err != nil {
		t.Fatal(err)
	}
	a, err := loadAgent(p, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// A build whose /usr/local/bin links out of the image (to a host
// directory that has a space-agent, or not) must end the same way either
// way, make the image twice over (a later resolve looks it up again), put
// the agent where the link leads inside the image, and touch nothing on
// the host. Before the lookup was confined, the second make followed the
// link on the host and failed with "rename ... file exists" exactly when
// the host lacked the file.
func TestImageLinksStayInside(t *testing.T) {
	for _, link := range []struct{ name, target string }{
		{"absolute", "HOST"},
		{"relative", "../../../../../../../..HOST"},
		{"proc self root", "/proc/self/root/HOST"},
	} {
		t.Run(link.name, func(t *testing.T) {
			var outcomes []string
			for _, hostHas := range []bool{true, false} {
				// Not under /tmp: the image's /tmp link to a host path
				// under /tmp would resolve through itself inside.
				base, err := os.MkdirTemp("/var/tmp", "space-confine-")
				if err != nil {
					t.Fatal(err)
				}
				defer os.RemoveAll(base)
				host, emptyHost := filepath.Join(base, "host"), filepath.Join(base, "empty")
				os.MkdirAll(host, 0o755)
				os.MkdirAll(emptyHost, 0o755)
				os.WriteFile(filepath.Join(host, "canary"), []byte("CANARY"), 0o644)
				if hostHas {
					os.WriteFile(filepath.Join(host, "space-agent"), []byte("HOST AGENT"), 0o755)
				}
				before, emptyBefore := dirState(t, host), dirState(t, emptyHost)
				im, err := newImages(filepath.Join(base, "images"), agentFor(t), 0, slog.Default())
				if err != nil {
					t.Fatal(err)
				}
				defer im.close()
				data := linkLayer(t, strings.Replace(link.target, "HOST", host, 1), emptyHost)
				layer := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
				var got []string
				for range 2 {
					id, err := im.derive(context.Background(), "k", "", "", layer)
					got = append(got, errString(err))
					if err == nil && !im.has(id) {
						got = append(got, "made but not found")
					}
				}
				outcomes = append(outcomes, strings.Join(got, "; "))
				if after := dirState(t, host); after != before {
					t.Errorf("host has %v: the host directory changed:\n%s\n%s", hostHas, before, after)
				}
				if after := dirState(t, emptyHost); after != emptyBefore {
					t.Errorf("host has %v: the host's empty directory (the image's /tmp link) changed:\n%s", hostHas, after)
				}
				if info, err := rootfs.Stat(im.path(im.id("k")), "/usr/local/bin/space-agent"); err != nil || info.Size() != im.agent.size {
					t.Errorf("host has %v: the agent is not where the link leads inside the image: %v %v", hostHas, info, err)
				}
			}
			if outcomes[0] != outcomes[1] {
				t.Fatalf("the outcome tells whether the host has the file: %q with it, %q without", outcomes[0], outcomes[1])
			}
			if outcomes[0] != "<nil>; <nil>" {
				t.Fatalf("the image was not made: %s", outcomes[0])
			}
		})
	}
}

// Two processes sharing the images directory make the same image at once:
// both succeed (the image's id names its content), whichever renames last.
func TestDeriveSameImageTwice(t *testing.T) {
	dir := t.TempDir()
	agent := agentFor(t)
	var ims []*images
	for range 2 {
		im, err := newImages(dir, agent, 0, slog.Default())
		if err != nil {
			t.Fatal(err)
		}
		defer im.close()
		ims = append(ims, im)
	}
	data := layerTar(t, map[string]string{"etc/hostname": "x\n"})
	// Both past their "is it here?" before either renames: each opens the
	// layer only after it found the image missing.
	var entered sync.WaitGroup
	entered.Add(2)
	layer := func() (io.ReadCloser, error) {
		entered.Done()
		entered.Wait()
		return io.NopCloser(bytes.NewReader(data)), nil
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, im := range ims {
		wg.Go(func() { _, errs[i] = im.derive(context.Background(), "same", "", "", layer) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("make %d: %v", i, err)
		}
	}
	id := ims[0].id("same")
	if !ims[1].has(id) {
		t.Fatalf("image %s is not there", id)
	}
	if b, err := os.ReadFile(filepath.Join(ims[0].path(id), "etc/hostname")); err != nil || string(b) != "x\n" {
		t.Fatalf("the image holds %q, %v", b, err)
	}
	// Neither process left its copy behind.
	for _, im := range ims {
		if entries, _ := os.ReadDir(im.work); len(entries) != 0 {
			t.Errorf("work dir %s holds %d entries after the makes", im.work, len(entries))
		}
	}
}

// An image whose layer leaves /tmp an empty directory gets the marker that
// keeps it on the sandbox's disk; one whose /tmp is a link does not (the
// test above).
func TestImageKeepsEmptyTmp(t *testing.T) {
	im, err := newImages(t.TempDir(), agentFor(t), 0, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer im.close()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777})
	tw.Close()
	id, err := im.derive(context.Background(), "t", "", "", func() (io.ReadCloser, error) { return io.NopCloser(&buf), nil })
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(im.path(id), "tmp/.space-keep")); err != nil || string(b) != tmpKeep {
		t.Fatalf("/tmp/.space-keep: %q %v", b, err)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// dirState is each name under dir with its size, mtime and content.
func dirState(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		info, _ := e.Info()
		data, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		b.WriteString(e.Name() + " " + info.ModTime().String() + " " + string(data) + "\n")
	}
	return b.String()
}
