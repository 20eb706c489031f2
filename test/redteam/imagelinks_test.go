package redteam

// Image-link attempts: a build step links a directory of the image that
// host code reads or writes (/usr/local/bin, where spaced puts the agent;
// /tmp, where it may put a marker) out of the image, to a host directory.
// Host code that resolved the image's paths with the host's resolver would
// follow the link: the build would then end one way when the host has the
// path and another when it does not (issue 27: "ready" against "rename ...
// file exists"), and the next bug in the same spot would read or write
// there. Each attempt builds twice, to a host directory that exists (with
// a space-agent in it) and to one that does not: both must end ready, with
// the agent where the link leads inside the image, and nothing on the host
// read or written.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/test/harness"
)

const imageLinkStops = "host code resolves every path inside an image within it (openat2 RESOLVE_IN_ROOT in rootfs.Stat, os.Root, and containerd's in-root resolution when layers and the agent are applied): the link leads to the same name inside the image, never on the host; a rename onto an image made meanwhile (content-addressed) is a success"

const imageLinkControl = "a build that links /usr/local/bin to a directory of the image ends ready, and its sandboxes run the platform's agent from that directory"

func imageLinkAttempts() []attempt {
	// boots says whether the image can boot: a link through /proc, or a
	// /tmp that is not a directory, leaves one that runsc cannot start
	// (both builds then end in the same error).
	link := func(id, desc, linkPath string, boots bool, target func(hostDir string) string) attempt {
		return attempt{id: id, category: "build", family: "build-image-links", desc: desc,
			stops: imageLinkStops, control: imageLinkControl,
			run: func(t *testing.T) error { return imageLinkCheck(t, linkPath, boots, target) }}
	}
	return []attempt{
		link("build-link-bin-absolute", "a step replaces /usr/local/bin with an absolute link to a host directory (one with a space-agent in it, then one that does not exist)",
			"/usr/local/bin", true, func(dir string) string { return dir }),
		link("build-link-bin-relative", "a step replaces /usr/local/bin with a relative link that climbs out with a chain of '..' to a host directory",
			"/usr/local/bin", true, func(dir string) string { return "../../.." + strings.Repeat("/..", 6) + dir }),
		link("build-link-bin-proc-root", "a step replaces /usr/local/bin with a link through /proc/self/root to a host directory",
			"/usr/local/bin", false, func(dir string) string { return "/proc/self/root" + dir }),
		link("build-link-tmp", "a step replaces /tmp (where spaced puts a marker file if a layer leaves it empty) with a link to a host directory",
			"/tmp", false, func(dir string) string { return dir }),
	}
}

// TestImageLinks runs the image-link attempts.
func TestImageLinks(t *testing.T) {
	need(t)
	for _, a := range imageLinkAttempts() {
		t.Run(a.id, func(t *testing.T) {
			if err := a.run(t); err != nil {
				t.Errorf("%s: %v", a.desc, err)
			}
		})
	}
	if err := env.canary.check(); err != nil {
		t.Errorf("host canaries after the builds: %v", err)
	}
}

// hostFileState is what shows a host file was read or written: its size,
// mtime, ctime and atime (the content is compared after, as reading it
// moves the atime).
func hostFileState(p string) string {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("size %d mtime %v ctime %v atime %v", st.Size, st.Mtim, st.Ctim, st.Atim)
}

var imageLinkCtl struct {
	once sync.Once
	err  error
}

// imageLinkControl builds the positive control once: /usr/local/bin linked
// to a directory inside the image.
func imageLinkControlBuild(t *testing.T) error {
	d := env.d
	name := "rt-link-ctl-" + harness.RandHex(4)
	dir := "/opt/rt-bin-" + harness.RandHex(4)
	b := rtBuild(t, d, nil, client.BuildRequest{
		Name: name, From: &client.BuildFrom{Template: "base"}, NoCache: true,
		Steps: []client.BuildStep{{Run: fmt.Sprintf("mv /usr/local/bin %[1]s && ln -s %[1]s /usr/local/bin", dir), User: "root"}},
	})
	if b.State != client.BuildStateReady {
		return fmt.Errorf("positive control: the build with an in-image link ended %s: %+v", b.State, b.Error)
	}
	want, err := fileSum(filepath.Join(testenv.BaseRootfs(), "usr/local/bin/space-agent"))
	if err != nil {
		return err
	}
	sb := d.NewSandbox(t, client.CreateSandboxRequest{Template: name})
	got := sh(t, d, sb.ID, "root", fmt.Sprintf("readlink /usr/local/bin; sha256sum %s/space-agent", dir))
	if f := strings.Fields(got); len(f) < 2 || f[0] != dir || f[1] != want {
		return fmt.Errorf("positive control: inside, %q; want the link to %s and the platform's agent %s there", got, dir, want)
	}
	return nil
}

// imageLinkCheck builds the image with linkPath linked to target(dir), for
// a host dir that exists and one that does not.
func imageLinkCheck(t *testing.T, linkPath string, boots bool, target func(string) string) error {
	d := env.d
	// Not under /tmp: the /tmp attempt's link would resolve through
	// itself inside the image.
	base, err := os.MkdirTemp("/var/tmp", "rt-imagelinks-")
	if err != nil {
		return err
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	present, missing := filepath.Join(base, "present"), filepath.Join(base, "missing")
	if err := os.MkdirAll(present, 0o755); err != nil {
		return err
	}
	hostFiles := map[string]string{}   // path -> state
	hostContent := map[string]string{} // path -> content
	for _, f := range []string{"space-agent", "canary"} {
		p := filepath.Join(present, f)
		hostContent[p] = "RT-HOST-" + f + "-" + harness.RandHex(8)
		if err := os.WriteFile(p, []byte(hostContent[p]), 0o755); err != nil {
			return err
		}
		// An atime older than the mtime: under relatime (or strictatime)
		// any read of the file moves it.
		if err := os.Chtimes(p, time.Now().Add(-time.Hour), time.Time{}); err != nil {
			return err
		}
		hostFiles[p] = hostFileState(p)
	}
	step := func(dir string) string {
		if linkPath == "/tmp" {
			return fmt.Sprintf("rm -rf /tmp && ln -s %s /tmp", target(dir))
		}
		return fmt.Sprintf("mv %[1]s %[1]s.orig && ln -s %[2]s %[1]s", linkPath, target(dir))
	}
	var ends []string
	for _, dir := range []string{present, missing} {
		name := "rt-link-" + harness.RandHex(4)
		b := rtBuild(t, d, nil, client.BuildRequest{
			Name: name, From: &client.BuildFrom{Template: "base"}, NoCache: true,
			Steps: []client.BuildStep{{Run: step(dir), User: "root"}},
		})
		end := string(b.State)
		if b.Error != nil {
			end += ": " + strings.ReplaceAll(b.Error.Message, dir, "<dir>")
		}
		t.Logf("link to %s: the build ended %s", dir, end)
		ends = append(ends, end)
		if b.State != client.BuildStateReady {
			continue
		}
		// The agent is where the link leads inside the image: the
		// template's sandboxes boot on it (they run nothing else).
		sb := d.NewSandbox(t, client.CreateSandboxRequest{Template: name})
		got := sh(t, d, sb.ID, "root", "readlink "+linkPath)
		if strings.TrimSpace(got) != target(dir) {
			return fmt.Errorf("inside, %s links to %q, want %q", linkPath, got, target(dir))
		}
	}
	if ends[0] != ends[1] {
		return fmt.Errorf("the build's end tells whether the host has %s: %q when it does, %q when it does not", present, ends[0], ends[1])
	}
	if boots && ends[0] != client.BuildStateReady {
		return fmt.Errorf("both builds ended %q: a link inside the image is the image's own business (the positive control's build ended ready)", ends[0])
	}
	for p, was := range hostFiles {
		if now := hostFileState(p); now != was {
			return fmt.Errorf("host file %s was read or written: %s, was %s", p, now, was)
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != hostContent[p] {
			return fmt.Errorf("host file %s holds %q (%v), was %q", p, b, err, hostContent[p])
		}
	}
	if entries, err := os.ReadDir(present); err != nil || len(entries) != len(hostFiles) {
		return fmt.Errorf("the host directory %s holds %d entries (%v), want %d", present, len(entries), err, len(hostFiles))
	}
	if _, err := os.Lstat(missing); err == nil {
		return fmt.Errorf("%s was made on the host", missing)
	}
	if err := env.canary.check(); err != nil {
		return err
	}
	// Last, so that a broken build path shows as the attempt's own
	// failure first.
	imageLinkCtl.once.Do(func() { imageLinkCtl.err = imageLinkControlBuild(t) })
	return imageLinkCtl.err
}
