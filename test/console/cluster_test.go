package console

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/store/pgtest"
	"github.com/spacesandbox/space/test/harness"
)

// TestClusterPlatform runs two spaced nodes in cluster mode (a real
// PostgreSQL catalog) and opens the admin's Platform page on the first:
// it lists both nodes, alive, the one serving the page marked as this
// node, beside this node's admission budget.
func TestClusterPlatform(t *testing.T) {
	need(t)
	pg := pgtest.Start(t)
	db := pg.NewDatabase(t)
	key := harness.NewAPIKey()
	// Nodes share the platform key (the first makes it): the catalog's
	// secrets are sealed under it.
	keyFile := filepath.Join(t.TempDir(), "platform.json")
	var nodes []*harness.Daemon
	for i, name := range []string{"c1", "c2"} {
		// The suite's spaced has 10.249.0.0/22; these take the next two.
		nodes = append(nodes, harness.Own(t, harness.Options{Name: name, CIDR: fmt.Sprintf("10.249.%d.0/22", 4+4*i), NoPool: true,
			APIKey: key, Catalog: db, BootTimeout: 10 * time.Second, Env: []string{"SPACE_PLATFORM_KEY_FILE=" + keyFile}}))
	}
	n1 := nodes[0]

	b := browser(t, nodes[0].Addr, nodes[1].Addr)
	signIn(t, b, n1, key)
	waitFor(t, b, "the live list", `document.querySelector("[data-testid=live]") && document.querySelector("[data-testid=live]").innerText == "live"`, 15*time.Second)
	do(t, b, "open the platform page", chromedp.Navigate("http://"+n1.Addr+"/ui/#/platform"))
	row := func(node string) string {
		return `document.querySelector('[data-testid=nodes] tr[data-node="` + node + `"]')`
	}
	waitFor(t, b, "both nodes alive", row("c1")+` && `+row("c1")+`.dataset.alive == "true" && `+row("c2")+` && `+row("c2")+`.dataset.alive == "true"`, 30*time.Second)
	if !eval[bool](t, b, row("c1")+`.innerText.includes("this node") && !`+row("c2")+`.innerText.includes("this node")`) {
		t.Errorf("the node serving the page is not the one marked: c1 %q, c2 %q", eval[string](t, b, row("c1")+`.innerText`), eval[string](t, b, row("c2")+`.innerText`))
	}
	if !eval[bool](t, b, `!!document.querySelector('[data-testid=admission] tr[data-resource=memory]')`) {
		t.Errorf("no admission budget on a cluster node's platform page")
	}
	screenshotPage(t, b, "platform-cluster")

	// The console of one node drives a sandbox of another: its calls go
	// through the cluster's forwarding like any API call (a file listing
	// reaches only the owner's agent). Placement picks the owner; the
	// console of the other node is the one asked.
	sb := n1.NewSandbox(t, client.CreateSandboxRequest{})
	owner, viewer := nodes[0], nodes[1]
	if sb.Node == "c2" {
		owner, viewer = nodes[1], nodes[0]
	}
	if _, err := owner.Client.Upload(harness.Ctx(t, 30*time.Second), sb.ID, "/tmp/on-owner.txt", strings.NewReader("here")); err != nil {
		t.Fatalf("upload to %s through its node %s: %v", sb.ID, sb.Node, err)
	}
	t.Logf("%s runs on %s; the console of %s is asked", sb.ID, sb.Node, viewer.Addr)
	if viewer != n1 {
		// Signed in once the page shows its live list (signIn only clicks).
		signIn(t, b, viewer, key)
		waitFor(t, b, "the live list on "+viewer.Addr, `document.querySelector("[data-testid=live]") && document.querySelector("[data-testid=live]").innerText == "live"`, 15*time.Second)
	}
	listed, err := chromedp.Run(b, chromedp.Evaluate[string](`fetch("api/v1/sandboxes/`+sb.ID+`/files/list?path=/tmp").then(async r => r.status + " " + await r.text()).catch(e => String(e))`, chromedp.EvalAwaitPromise))
	if err != nil || !strings.HasPrefix(listed, "200 ") || !strings.Contains(listed, "on-owner.txt") {
		t.Errorf("the console of %s listing /tmp of %s (on %s): %s (%v), want 200 with on-owner.txt", viewer.Addr, sb.ID, sb.Node, listed, err)
	}
}
