package rootfs

import (
	"archive/tar"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// hostTree is what a host directory holds: each name with its mode, size,
// mtime and content, to show nothing there was written.
func hostTree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(&b, "%s %v %d %d", rel, info.Mode(), info.Size(), info.ModTime().UnixNano())
		if info.Mode().IsRegular() {
			data, _ := os.ReadFile(p)
			fmt.Fprintf(&b, " %q", data)
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// inodes are the inode numbers of the regular files under dir.
func inodes(t *testing.T, dir string) map[uint64]string {
	t.Helper()
	out := map[uint64]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				out[info.Sys().(*syscall.Stat_t).Ino] = p
			}
		}
		return nil
	})
	return out
}

// TestConfinedToImage plants links that lead out of an image (absolute,
// relative, ".." chains, through /proc/self/root) at /usr/local/bin and
// runs each host-side access to image paths through them: with the
// target's space-agent on the host and without, every access must end the
// same way (no oracle), write nothing outside (a canary tree), and what is
// written must land inside the image.
func TestConfinedToImage(t *testing.T) {
	type op struct {
		name string
		// run returns what the caller (and so a tenant) could observe.
		run func(t *testing.T, root string) string
		// inside, if set, is a path in the image (resolved there) that
		// must hold a file afterwards.
		inside string
	}
	ops := []op{
		{name: "Stat", run: func(t *testing.T, root string) string {
			_, err := Stat(root, "/usr/local/bin/space-agent")
			return fmt.Sprint(err == nil)
		}},
		{name: "AddFile", inside: "usr/local/bin/space-agent", run: func(t *testing.T, root string) string {
			err := AddFile(context.Background(), root, "/usr/local/bin/space-agent", 0o755, 0, 0, strings.NewReader("AGENT"), 5)
			return fmt.Sprint(err)
		}},
		{name: "Apply file and dir", inside: "usr/local/bin/sub/new", run: func(t *testing.T, root string) string {
			_, err := Apply(context.Background(), root, layer(t,
				ent{name: "usr/local/bin/new", typ: tar.TypeReg, body: "NEW"},
				ent{name: "usr/local/bin/sub/", typ: tar.TypeDir},
				ent{name: "usr/local/bin/sub/new", typ: tar.TypeReg, body: "NEW"},
			), ApplyOptions{})
			return fmt.Sprint(err)
		}},
		{name: "Apply whiteout", run: func(t *testing.T, root string) string {
			_, err := Apply(context.Background(), root, layer(t, ent{name: "usr/local/bin/.wh.space-agent", typ: tar.TypeReg}), ApplyOptions{})
			return fmt.Sprint(err)
		}},
		{name: "Apply opaque directory", run: func(t *testing.T, root string) string {
			_, err := Apply(context.Background(), root, layer(t, ent{name: "usr/local/bin/.wh..wh..opq", typ: tar.TypeReg}), ApplyOptions{})
			return fmt.Sprint(err)
		}},
		{name: "Apply hard link", run: func(t *testing.T, root string) string {
			_, err := Apply(context.Background(), root, layer(t, ent{name: "hl", typ: tar.TypeLink, link: "usr/local/bin/space-agent"}), ApplyOptions{Private: true})
			// The error names the path inside the image, the same
			// whether the host has the file or not.
			return fmt.Sprint(err != nil)
		}},
		{name: "Apply a layer that plants the link itself", inside: "esc/space-agent", run: func(t *testing.T, root string) string {
			_, err := Apply(context.Background(), root, layer(t,
				ent{name: "esc", typ: tar.TypeSymlink, link: "/usr/local/bin"},
				ent{name: "esc/space-agent", typ: tar.TypeReg, body: "LAYER"},
			), ApplyOptions{})
			return fmt.Sprint(err)
		}},
		{name: "Size and Clone", run: func(t *testing.T, root string) string {
			n, err := Size(root)
			if err != nil {
				return err.Error()
			}
			if err := Clone(root, root+"-clone"); err != nil {
				return err.Error()
			}
			defer os.RemoveAll(root + "-clone")
			m, err := Size(root + "-clone")
			return fmt.Sprint(n, m, err)
		}},
	}
	links := []struct {
		name   string
		target func(host string) string
		// odd: the link climbs out of a directory the image lacks
		// (/proc/self is procfs only in a sandbox): containerd resolves
		// it lexically, the kernel not at all, so where a write lands is
		// not compared, only that it stays inside.
		odd bool
	}{
		{"absolute", func(host string) string { return host }, false},
		{"relative", func(host string) string { return "../../.." + strings.Repeat("/..", 8) + host }, false},
		{"dotdot chain", func(host string) string { return "/up/up/up/up/up/up/up/up" + host }, false},
		{"proc self root", func(host string) string { return "/proc/self/root" + host }, false},
		{"proc self cwd", func(host string) string { return "/proc/self/cwd/../../../../../../../.." + host }, true},
	}
	for _, l := range links {
		for _, o := range ops {
			t.Run(l.name+"/"+o.name, func(t *testing.T) {
				var seen []string
				for _, hostHas := range []bool{true, false} {
					base := t.TempDir()
					host := filepath.Join(base, "host")
					canary := map[string]string{"canary": "CANARY"}
					if hostHas {
						canary["space-agent"] = "HOST AGENT"
					}
					write(t, host, canary)
					os.MkdirAll(filepath.Join(host, "sub"), 0o755)
					root := filepath.Join(base, "img")
					write(t, root, map[string]string{"usr/local/bin.orig/space-agent": "IMAGE AGENT"})
					os.MkdirAll(filepath.Join(root, "proc"), 0o755)
					os.Symlink("..", filepath.Join(root, "up"))
					if err := os.Symlink(l.target(host), filepath.Join(root, "usr/local/bin")); err != nil {
						t.Fatal(err)
					}
					before, hostInodes := hostTree(t, host), inodes(t, host)

					seen = append(seen, o.run(t, root))

					if after := hostTree(t, host); after != before {
						t.Fatalf("host has %v: the host directory changed:\nbefore\n%safter\n%s", hostHas, before, after)
					}
					for ino, p := range inodes(t, root) {
						if hostInodes[ino] != "" {
							t.Fatalf("%s in the image is the host's %s", p, hostInodes[ino])
						}
					}
					if o.inside != "" && !l.odd {
						if info, err := Stat(root, o.inside); err != nil || !info.Mode().IsRegular() {
							t.Fatalf("host has %v: /%s is not in the image: %v %v", hostHas, o.inside, info, err)
						}
					}
				}
				if seen[0] != seen[1] {
					t.Fatalf("the outcome tells whether the host has the file: %q with it, %q without", seen[0], seen[1])
				}
				t.Logf("outcome: %s", seen[0])
			})
		}
	}
}

// TestStatResolvesInside: Stat finds what a sandbox would, through links
// that stay inside (the positive control of the test above).
func TestStatResolvesInside(t *testing.T) {
	root := t.TempDir()
	write(t, root, map[string]string{"opt/bin/space-agent": "AGENT"})
	os.MkdirAll(filepath.Join(root, "usr/local"), 0o755)
	os.Symlink("/opt/bin", filepath.Join(root, "usr/local/bin"))
	os.Symlink("../../opt/bin/space-agent", filepath.Join(root, "usr/local/agent"))
	for _, name := range []string{"usr/local/bin/space-agent", "/usr/local/bin/space-agent", "usr/local/agent", "/../../usr/local/bin/space-agent"} {
		info, err := Stat(root, name)
		if err != nil || info.Size() != 5 {
			t.Errorf("Stat %s: %v %v", name, info, err)
		}
	}
	if _, err := Stat(root, "usr/local/bin/missing"); !os.IsNotExist(err) {
		t.Errorf("Stat of a missing file: %v", err)
	}
}
