package console

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// deniedEgress has sandbox id (one with internet access: its TCP goes to
// the egress gateway) try a connection the gateway refuses (a private
// address, in the platform floor), so spaced logs an "egress denied" line
// for it.
func deniedEgress(t *testing.T, c *client.Client, id string) {
	t.Helper()
	s, err := c.RunCommand(context.Background(), id, client.CommandRequest{Cmd: "curl -s -m 3 http://192.168.77.1/ || true"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for {
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("the denied request in %s: %v", id, err)
		}
		if ev.Type == client.EventEnd {
			return
		}
	}
}

// auditSandboxes is what the page's session reads of /ui/audit: the
// sandboxes its egress denials name.
const auditSandboxes = `fetch("audit").then(r => r.json()).then(b => b.entries.map(e => e.attrs.sandbox).join(","))`

// sampledSandboxes reads the page's session's event stream with samples
// (what the list's CPU and memory follow) until it has had three samples
// of sandbox id, or 20 s passed, and answers the sandboxes of every
// sample it had, comma-separated. The suite samples every second, so
// three of one sandbox's span a round of every running sandbox.
func sampledSandboxes(id string) string {
	return `(async () => {
	  const ctl = new AbortController();
	  const res = await fetch("api/v1/events?metrics=true", { signal: ctl.signal });
	  const rd = res.body.getReader(), dec = new TextDecoder();
	  let text = "", ids = [];
	  const deadline = Date.now() + 20000;
	  while (Date.now() < deadline && ids.filter(x => x == "` + id + `").length < 3) {
	    const { value, done } = await rd.read();
	    if (done) break;
	    text += dec.decode(value, { stream: true });
	    const events = text.split("\n\n");
	    text = events.pop();
	    for (const e of events) {
	      const data = e.split("\n").find(l => l.startsWith("data: "));
	      if (e.includes("event: metrics") && data) ids.push(JSON.parse(data.slice(6)).id);
	    }
	  }
	  ctl.abort();
	  return ids.join(",");
	})()`
}

// TestTenantSignIn signs in with a tenant's key: the console shows that
// tenant's sandboxes and not another tenant's, its Platform page its usage
// and not the node's metrics, its egress denials only; the admin key's
// session, in the same browser afterwards, shows both tenants' (the
// positive control). Revoking the key ends its session at once.
func TestTenantSignIn(t *testing.T) {
	d := need(t)
	killAtEnd(t, d)
	ctx := harness.Ctx(t, 2*time.Minute)
	id := "console-" + harness.RandHex(4)
	if _, err := d.Client.CreateTenant(ctx, id, "", client.Quotas{}); err != nil {
		t.Fatal(err)
	}
	key, err := d.Client.IssueKey(ctx, id, "console test")
	if err != nil {
		t.Fatal(err)
	}
	tc := client.New(d.Addr, key.Key)
	online := &client.Network{Internet: true}
	mine, err := tc.CreateSandbox(ctx, client.CreateSandboxRequest{Network: online, Metadata: map[string]string{"owner": id}})
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Network: online, Metadata: map[string]string{"owner": "admin"}})
	if err != nil {
		t.Fatal(err)
	}
	deniedEgress(t, tc, mine.ID)
	deniedEgress(t, d.Client, theirs.ID)

	b := browser(t)
	urls := requests(b)
	signIn(t, b, d, key.Key)
	mineRow := fmt.Sprintf(`document.querySelector('tr[data-id="%s"]')`, mine.ID)
	theirsRow := fmt.Sprintf(`document.querySelector('tr[data-id="%s"]')`, theirs.ID)
	waitFor(t, b, "the tenant's sandbox in the list", mineRow, 15*time.Second)
	if eval[bool](t, b, theirsRow+` !== null`) {
		t.Errorf("the tenant's console lists the default tenant's sandbox %s", theirs.ID)
	}
	if who := eval[string](t, b, `document.querySelector("[data-testid=who]").innerText`); who != "tenant "+id {
		t.Errorf("the header says %q, want %q", who, "tenant "+id)
	}
	waitFor(t, b, "the tenant's sandbox's usage in the list", mineRow+`.querySelector("[data-testid=mem-usage]")`, 30*time.Second)
	screenshot(t, b, "tenant-sandboxes")
	// The samples the page follows are its tenant's only.
	sampled, err := chromedp.Run(b, chromedp.Evaluate[string](sampledSandboxes(mine.ID), chromedp.EvalAwaitPromise))
	if err != nil || strings.Count(sampled, mine.ID) < 3 || strings.Contains(sampled, theirs.ID) {
		t.Errorf("the tenant's session followed samples of %q (%v); want its sandbox %s's and none of %s", sampled, err, mine.ID, theirs.ID)
	}

	// Its Platform page: its usage and quotas, not the node's metrics.
	do(t, b, "open the platform page", chromedp.Navigate("http://"+d.Addr+"/ui/#/platform"))
	waitFor(t, b, "the tenant's usage", `document.querySelector('[data-testid=usage] tr[data-quota=sandboxes]')`, 10*time.Second)
	if got := eval[string](t, b, `document.querySelector('[data-testid=usage] tr[data-quota=sandboxes] td').innerText`); !strings.HasPrefix(got, "1") {
		t.Errorf("the usage says %q running sandboxes, want 1", got)
	}
	if eval[bool](t, b, `!!document.querySelector("[data-testid=pools]") || !!document.querySelector("[data-testid=chart-create]") || !!document.querySelector("[data-testid=admission]") || !!document.querySelector("[data-testid=tenants]")`) {
		t.Errorf("the tenant's Platform page shows the node's pools, latencies or budget, or the tenants")
	}
	status, err := chromedp.Run(b, chromedp.Evaluate[int](`fetch("api/metrics").then(r => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil || status != http.StatusForbidden {
		t.Errorf("/metrics through the tenant's session: %d, %v; want 403", status, err)
	}
	// Its egress denials only (they are logged as they happen).
	var seen string
	harness.WaitFor(10*time.Second, func() bool {
		seen, _ = chromedp.Run(b, chromedp.Evaluate[string](auditSandboxes, chromedp.EvalAwaitPromise))
		return strings.Contains(seen, mine.ID)
	})
	if !strings.Contains(seen, mine.ID) || strings.Contains(seen, theirs.ID) {
		t.Errorf("the tenant's session reads egress denials of %q; want its sandbox %s and not %s", seen, mine.ID, theirs.ID)
	}
	screenshotPage(t, b, "tenant-platform")

	// The positive control: the admin key's session sees both.
	do(t, b, "sign out", chromedp.Navigate("http://"+d.Addr+"/ui/#/sandboxes"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=signout]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=signout]`)))
	signIn(t, b, d, d.APIKey)
	waitFor(t, b, "both tenants' sandboxes in the admin's list", mineRow+" && "+theirsRow, 15*time.Second)
	harness.WaitFor(10*time.Second, func() bool {
		seen, _ = chromedp.Run(b, chromedp.Evaluate[string](auditSandboxes, chromedp.EvalAwaitPromise))
		return strings.Contains(seen, mine.ID) && strings.Contains(seen, theirs.ID)
	})
	if !strings.Contains(seen, mine.ID) || !strings.Contains(seen, theirs.ID) {
		t.Errorf("control: the admin's session reads egress denials of %q; want both %s and %s", seen, mine.ID, theirs.ID)
	}
	sampled, err = chromedp.Run(b, chromedp.Evaluate[string](sampledSandboxes(mine.ID), chromedp.EvalAwaitPromise))
	if err != nil || !strings.Contains(sampled, mine.ID) || !strings.Contains(sampled, theirs.ID) {
		t.Errorf("control: the admin's session followed samples of %q (%v); want both %s and %s", sampled, err, mine.ID, theirs.ID)
	}

	// A revoked key's session ends at once: a new browser signed in with
	// it gets 401 on its next call.
	b2 := browser(t)
	signIn(t, b2, d, key.Key)
	waitFor(t, b2, "the tenant's list again", mineRow, 15*time.Second)
	if _, err := d.Client.RevokeKey(ctx, key.ID); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"session", "api/v1/sandboxes"} {
		status, err := chromedp.Run(b2, chromedp.Evaluate[int](`fetch("`+path+`").then(r => r.status)`, chromedp.EvalAwaitPromise))
		if err != nil || status != http.StatusUnauthorized {
			t.Errorf("%s after the key's revocation: %d, %v; want 401", path, status, err)
		}
	}
	for _, u := range urls() {
		if strings.Contains(u, key.Key) {
			t.Errorf("the tenant's key was in a URL: %s", u)
		}
	}
}
