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
)

// TestLeftovers: many concurrent create/kill cycles, then failed creates,
// leave nothing on the host and no record.
func TestLeftovers(t *testing.T) {
	need(t)
	t.Parallel()
	d := ownDaemon(t, daemonOptions{name: "cycles", cidr: "10.241.32.0/20", noPool: true})

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
				ctx := ctxT(t, time.Minute)
				sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{})
				if err != nil {
					t.Errorf("cycle %d: %v", i, err)
					return
				}
				mu.Lock()
				made = append(made, sb.ID)
				mu.Unlock()
				if err := d.c.KillSandbox(ctx, sb.ID); err != nil {
					t.Errorf("cycle %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
		for _, id := range made {
			if left := hostLeftovers(d, id); len(left) > 0 {
				t.Errorf("%s left: %v", id, left)
			}
		}
		if n := len(dirEntries(filepath.Join(d.dataDir, "sandboxes"))); n != 0 {
			t.Errorf("%d bundle dirs left", n)
		}
	})

	t.Run("failed creates", func(t *testing.T) {
		// A template whose agent can never start: /bin/true is a dynamic
		// binary, so it cannot even be loaded there.
		tdir := t.TempDir()
		real, err := filepath.EvalSymlinks(filepath.Join(env.templatesDir, "base", "current"))
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(tdir, "base"), 0o755)
		if err := os.Symlink(real, filepath.Join(tdir, "base", "current")); err != nil {
			t.Fatal(err)
		}
		agent := filepath.Join(tdir, "broken", "current", "usr", "local", "bin", "space-agent")
		os.MkdirAll(filepath.Dir(agent), 0o755)
		data, err := os.ReadFile("/bin/true")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(agent, data, 0o755); err != nil {
			t.Fatal(err)
		}
		bd := ownDaemon(t, daemonOptions{name: "broken", cidr: "10.241.64.0/20", templatesDir: tdir, bootTimeout: 3 * time.Second, noPool: true})
		netnsBefore, linksBefore := hostNetNames()

		start := time.Now()
		resp, body := do(t, bd, "POST", "/v1/sandboxes", `{"template":"broken"}`, nil)
		wantError(t, resp, body, 503, "unavailable")
		t.Logf("broken create answered in %s", time.Since(start).Round(time.Millisecond))
		resp, body = do(t, bd, "POST", "/v1/sandboxes", `{"template":"nope"}`, nil)
		wantError(t, resp, body, 404, "not_found")

		list, err := bd.c.ListAllSandboxes(ctxT(t, 5*time.Second), client.ListOptions{States: []string{"creating", "running", "killed", "lost"}})
		if err != nil || len(list) != 0 {
			t.Errorf("after failed creates the daemon lists %s %v, want nothing", ids(list), err)
		}
		if n := dirEntries(filepath.Join(bd.dataDir, "sandboxes")); len(n) != 0 {
			t.Errorf("bundle dirs left: %v", n)
		}
		for _, e := range dirEntries(filepath.Join(bd.dataDir, "runsc")) {
			if strings.HasSuffix(e, ".state") || !strings.Contains(e, "null-netns") {
				t.Errorf("runsc state left: %s", e)
			}
		}
		// The failed sandbox's id is only in the daemon's log.
		log, _ := os.ReadFile(bd.logPath)
		for _, m := range regexp.MustCompile(`sandbox=([a-z0-9]{8,64})`).FindAllStringSubmatch(string(log), -1) {
			if left := hostLeftovers(bd, m[1]); len(left) > 0 {
				t.Errorf("failed sandbox %s left: %v", m[1], left)
			}
		}
		// Anything new since the failed create must belong to a live sandbox
		// of another daemon (other tests run concurrently).
		netnsAfter, linksAfter := hostNetNames()
		for name := range netnsAfter {
			if !netnsBefore[name] && !liveAnywhere(t, strings.TrimPrefix(name, "space-")) {
				// Possibly another process's (other spaced instances may run on this host).
				t.Logf("netns %s appeared and belongs to no live sandbox of ours", name)
			}
		}
		for name := range linksAfter {
			if !linksBefore[name] && !liveAnywhere(t, name) && inRange(name, "10.241.64.") {
				t.Errorf("link %s of the broken daemon's range is left", name)
			} else if !linksBefore[name] && !liveAnywhere(t, name) {
				t.Logf("link %s appeared and belongs to no live sandbox of ours", name)
			}
		}
	})
}

func dirEntries(dir string) []string {
	es, _ := os.ReadDir(dir)
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// hostNetNames lists the space-* namespaces and vse* links on the host.
func hostNetNames() (netns, links map[string]bool) {
	netns, links = map[string]bool{}, map[string]bool{}
	for _, n := range dirEntries("/var/run/netns") {
		if strings.HasPrefix(n, "space-") {
			netns[n] = true
		}
	}
	for _, n := range dirEntries("/sys/class/net") {
		if strings.HasPrefix(n, "vse") {
			links[n] = true
		}
	}
	return netns, links
}

// liveAnywhere reports whether an id (or a vse link name) is a live
// sandbox of any daemon this package started.
func liveAnywhere(t *testing.T, idOrLink string) bool {
	daemonsMu.Lock()
	ds := append([]*daemon(nil), daemons...)
	daemonsMu.Unlock()
	for _, d := range ds {
		list, err := d.c.ListAllSandboxes(ctxT(t, 5*time.Second), client.ListOptions{States: []string{"creating", "running"}})
		if err != nil {
			continue
		}
		for _, sb := range list {
			if sb.ID == idOrLink || hostIf(sb.ID) == idOrLink {
				return true
			}
		}
	}
	return false
}

// inRange reports whether link has an IPv4 address starting with prefix.
func inRange(link, prefix string) bool {
	out, _ := exec.Command("ip", "-4", "-o", "addr", "show", "dev", link).Output()
	return strings.Contains(string(out), "inet "+prefix)
}
