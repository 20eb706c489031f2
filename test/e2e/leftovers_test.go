package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/test/harness"
)

// TestLeftovers: many concurrent create/kill cycles, then failed creates,
// leave nothing on the host and no record.
func TestLeftovers(t *testing.T) {
	need(t)
	t.Parallel()
	d := ownDaemon(t, harness.Options{Name: "cycles", CIDR: "10.241.32.0/20", NoPool: true})

	t.Run("20 cycles, 5 at a time", func(t *testing.T) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var made []string
		sem := make(chan struct{}, 5)
		for i := range 20 {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				ctx := harness.Ctx(t, time.Minute)
				sb, err := d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
				if err != nil {
					t.Errorf("cycle %d: %v", i, err)
					return
				}
				mu.Lock()
				made = append(made, sb.ID)
				mu.Unlock()
				if err := d.Client.KillSandbox(ctx, sb.ID); err != nil {
					t.Errorf("cycle %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
		for _, id := range made {
			if left := d.Leftovers(id); len(left) > 0 {
				t.Errorf("%s left: %v", id, left)
			}
		}
		if n := len(harness.DirEntries(filepath.Join(d.DataDir, "sandboxes"))); n != 0 {
			t.Errorf("%d bundle dirs left", n)
		}
	})

	t.Run("failed creates", func(t *testing.T) {
		// A base template whose agent can never start: a hard-link copy of
		// the real one with /bin/true (a dynamic binary, which cannot even
		// be loaded as init there) in the agent's place.
		tdir := t.TempDir()
		real, err := filepath.EvalSymlinks(testenv.BaseRootfs())
		if err != nil {
			t.Fatal(err)
		}
		image := filepath.Join(tdir, "base", "rootfs-broken-a0")
		os.MkdirAll(filepath.Dir(image), 0o755)
		if out, err := exec.Command("cp", "-al", real, image).CombinedOutput(); err != nil {
			t.Fatalf("copy the base: %v: %s", err, out)
		}
		if err := os.Symlink("rootfs-broken-a0", filepath.Join(tdir, "base", "current")); err != nil {
			t.Fatal(err)
		}
		agent := filepath.Join(image, "usr", "local", "bin", "space-agent")
		data, err := os.ReadFile("/bin/true")
		if err != nil {
			t.Fatal(err)
		}
		// (a new file: the link to the real agent is removed, never written through)
		if err := os.Remove(agent); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(agent, data, 0o755); err != nil {
			t.Fatal(err)
		}
		bd := ownDaemon(t, harness.Options{Name: "broken", CIDR: "10.241.64.0/20", TemplatesDir: tdir, BootTimeout: 3 * time.Second, NoPool: true})
		netnsBefore, linksBefore := harness.HostNetNames()

		start := time.Now()
		resp, body := do(t, bd, "POST", "/v1/sandboxes", `{"template":"base"}`, nil)
		wantError(t, resp, body, 503, "unavailable")
		t.Logf("broken create answered in %s", time.Since(start).Round(time.Millisecond))
		resp, body = do(t, bd, "POST", "/v1/sandboxes", `{"template":"nope"}`, nil)
		wantError(t, resp, body, 404, "not_found")

		list, err := bd.Client.ListAllSandboxes(harness.Ctx(t, 5*time.Second), client.ListOptions{States: []string{"creating", "running", "killed", "lost"}})
		if err != nil || len(list) != 0 {
			t.Errorf("after failed creates the daemon lists %s %v, want nothing", ids(list), err)
		}
		if n := harness.DirEntries(filepath.Join(bd.DataDir, "sandboxes")); len(n) != 0 {
			t.Errorf("bundle dirs left: %v", n)
		}
		for _, e := range harness.DirEntries(filepath.Join(bd.DataDir, "runsc")) {
			if strings.HasSuffix(e, ".state") || !strings.Contains(e, "null-netns") {
				t.Errorf("runsc state left: %s", e)
			}
		}
		// The failed sandbox's id is only in the daemon's log.
		log, _ := os.ReadFile(bd.LogPath)
		for _, m := range regexp.MustCompile(`sandbox=([a-z0-9]{8,64})`).FindAllStringSubmatch(string(log), -1) {
			if left := bd.Leftovers(m[1]); len(left) > 0 {
				t.Errorf("failed sandbox %s left: %v", m[1], left)
			}
		}
		// Anything new since the failed create must belong to a live sandbox
		// of another daemon (other tests run concurrently).
		netnsAfter, linksAfter := harness.HostNetNames()
		for name := range netnsAfter {
			if !netnsBefore[name] && !harness.LiveAnywhere(t, strings.TrimPrefix(name, "space-")) {
				// Possibly another process's (other spaced instances may run on this host).
				t.Logf("netns %s appeared and belongs to no live sandbox of ours", name)
			}
		}
		for name := range linksAfter {
			if !linksBefore[name] && !harness.LiveAnywhere(t, name) && inRange(name, "10.241.64.") {
				t.Errorf("link %s of the broken daemon's range is left", name)
			} else if !linksBefore[name] && !harness.LiveAnywhere(t, name) {
				t.Logf("link %s appeared and belongs to no live sandbox of ours", name)
			}
		}
	})
}

// inRange reports whether link has an IPv4 address starting with prefix.
func inRange(link, prefix string) bool {
	out, _ := exec.Command("ip", "-4", "-o", "addr", "show", "dev", link).Output()
	return strings.Contains(string(out), "inet "+prefix)
}
