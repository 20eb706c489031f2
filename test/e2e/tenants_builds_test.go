package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// testTenantBuildQuota (issue 27: build sandboxes ran outside the tenant's
// quotas, three while it was at 2 of 2 sandboxes). At builds=1, with its one
// sandbox running (its sandboxes quota is 1), the tenant still builds: a
// build is not one of its sandboxes. A second build while the first runs is
// refused, native and E2B, with 403 naming builds, and nothing is made. The
// first one's end (canceled) frees the count, and so does a failed build's
// and a ready one's. The build's memory counts in the tenant's memory_mb
// while it lasts.
func testTenantBuildQuota(t *testing.T, d *harness.Daemon) {
	const id = "builds"
	c, key := newTenant(t, d, id, client.Quotas{Builds: 1, Sandboxes: 1, Templates: -1})
	createAs(t, d, c, client.CreateSandboxRequest{})
	base := &client.BuildFrom{Template: "base"}
	name := func() string {
		n := "quota-build-" + harness.RandHex(4)
		t.Cleanup(func() { d.Client.DeleteTemplate(harness.Ctx(t, 30*time.Second), n) })
		return n
	}

	// The held build: its step says it runs, then sleeps until canceled.
	marker := "held-build-runs-" + harness.RandHex(4)
	held := startBuildAs(t, c, client.BuildRequest{Name: name(), From: base, MemoryMB: 256,
		Steps: []client.BuildStep{{Run: "echo " + marker + "; sleep 600", NoCache: true}}})
	waitBuildLog(t, c, held.ID, marker) // positive control: its sandbox runs
	if u := usageOf(t, c); u.Sandboxes != 1 || u.Builds != 1 || u.MemoryMB != 512+256 {
		t.Errorf("usage with a sandbox and a build of 256 MiB: %+v, want 1 sandbox, 1 build, 768 MiB", u)
	}

	other := name()
	resp, body := do(t, d, "POST", "/v1/builds", client.BuildRequest{Name: other, From: base, Steps: []client.BuildStep{{Run: "true"}}}, bearer(key.Key))
	wantQuota(t, "native build while one runs", parseRefusal(t, resp, body, false), false, "builds", 1, 1, 1)
	if _, err := d.Client.GetTemplate(harness.Ctx(t, 10*time.Second), other); !client.IsNotFound(err) {
		t.Errorf("the refused build's template: %v, want none made", err)
	}
	e2bID, e2bBuild := e2bRequestBuild(t, d, key.Key, name())
	resp, body = do(t, d, "POST", "/v2/templates/"+e2bID+"/builds/"+e2bBuild,
		map[string]any{"fromTemplate": "base", "steps": []map[string]any{{"type": "RUN", "args": []string{"true"}}}}, xAPIKey(key.Key))
	wantQuota(t, "E2B build trigger while one runs", parseRefusal(t, resp, body, true), true, "builds", 1, 1, 1)

	ctx := harness.Ctx(t, 3*time.Minute)
	if _, err := c.CancelBuild(ctx, held.ID); err != nil {
		t.Fatal(err)
	}
	if b := waitBuildAs(t, c, held.ID); b.State != client.BuildStateCanceled {
		t.Fatalf("the held build after its cancel: %+v", b)
	}
	if u := usageAfterBuild(t, c, func(u client.Usage) bool { return u.Builds == 0 && u.MemoryMB == 512 }); u.Builds != 0 || u.MemoryMB != 512 {
		t.Errorf("usage after the build's end: %+v, want no build, the sandbox's 512 MiB", u)
	}
	// A failed build frees the count too, and a ready one.
	failed := startBuildAs(t, c, client.BuildRequest{Name: name(), From: base, Steps: []client.BuildStep{{Run: "exit 3", NoCache: true}}})
	if b := waitBuildAs(t, c, failed.ID); b.State != client.BuildStateFailed {
		t.Fatalf("a failing build: %+v, want error", b)
	}
	buildAs(t, c, name(), client.BuildStep{Run: "true", NoCache: true})
	buildAs(t, c, name(), client.BuildStep{Run: "true", NoCache: true})
	if u := usageAfterBuild(t, c, func(u client.Usage) bool { return u.Builds == 0 }); u.Builds != 0 {
		t.Errorf("usage after the builds ended: %+v, want no build", u)
	}
}

// usageAfterBuild is c's usage once want holds of it, or after 10 s. A
// build gives its reservation back just after its end is recorded
// (template.Service's build goroutine), so a client that saw the end can
// still see the build counted for a moment: a CI run read Builds 1 right
// after a build showed ready.
func usageAfterBuild(t *testing.T, c *client.Client, want func(client.Usage) bool) client.Usage {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		u := usageOf(t, c)
		if want(u) || time.Now().After(deadline) {
			return u
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startBuildAs starts a build with c's key.
func startBuildAs(t *testing.T, c *client.Client, req client.BuildRequest) *client.Build {
	t.Helper()
	b, err := c.StartBuild(harness.Ctx(t, time.Minute), req)
	if err != nil {
		t.Fatalf("build %s: %v", req.Name, err)
	}
	return b
}

// waitBuildAs waits for build id's end and returns it.
func waitBuildAs(t *testing.T, c *client.Client, id string) *client.Build {
	t.Helper()
	ctx := harness.Ctx(t, 3*time.Minute)
	for {
		b, err := c.GetBuild(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if b.Done() {
			return b
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitBuildLog reads build id's log until a line holds want.
func waitBuildLog(t *testing.T, c *client.Client, id, want string) {
	t.Helper()
	s, err := c.BuildLogs(harness.Ctx(t, 3*time.Minute), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var seen []string
	for {
		e, err := s.Next()
		if err != nil {
			t.Fatalf("build %s's log ended without %q: %v (%s)", id, want, err, strings.Join(seen, " | "))
		}
		if strings.Contains(e.Message, want) {
			return
		}
		seen = append(seen, e.Message)
	}
}

// e2bRequestBuild asks for a build of template name through E2B's API with
// key: the template's id and the waiting build's.
func e2bRequestBuild(t *testing.T, d *harness.Daemon, key, name string) (string, string) {
	t.Helper()
	resp, body := do(t, d, "POST", "/v3/templates", map[string]any{"name": name}, xAPIKey(key))
	var out struct {
		TemplateID string `json:"templateID"`
		BuildID    string `json:"buildID"`
	}
	if err := json.Unmarshal(body, &out); resp.StatusCode != http.StatusAccepted || err != nil || out.BuildID == "" {
		t.Fatalf("E2B build request of %s: %d %s (%v)", name, resp.StatusCode, body, err)
	}
	return out.TemplateID, out.BuildID
}

// TestBuildQuotaRestart: the node's default builds quota
// (SPACE_TENANT_MAX_BUILDS=1) binds a tenant that sets none, and a build
// cut off by a restart of spaced (kill -9) ends failed and holds nothing
// after it: the tenant builds again.
func TestBuildQuotaRestart(t *testing.T) {
	need(t)
	t.Parallel()
	d := ownDaemon(t, harness.Options{Name: "buildquota", CIDR: "10.241.200.0/22", NoPool: true,
		Env: []string{"SPACE_TENANT_MAX_BUILDS=1"}})
	c, key := newTenant(t, d, "restarted", client.Quotas{})
	base := &client.BuildFrom{Template: "base"}
	marker := "held-build-runs-" + harness.RandHex(4)
	held := startBuildAs(t, c, client.BuildRequest{Name: "quota-restart-" + harness.RandHex(4), From: base,
		Steps: []client.BuildStep{{Run: "echo " + marker + "; sleep 600", NoCache: true}}})
	waitBuildLog(t, c, held.ID, marker)
	resp, body := do(t, d, "POST", "/v1/builds", client.BuildRequest{Name: "quota-restart-" + harness.RandHex(4), From: base,
		Steps: []client.BuildStep{{Run: "true"}}}, bearer(key.Key))
	wantQuota(t, "a second build at the node's default of 1", parseRefusal(t, resp, body, false), false, "builds", 1, 1, 1)

	d.Kill9()
	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	if b := waitBuildAs(t, c, held.ID); b.State != client.BuildStateFailed || b.Error == nil || !strings.Contains(b.Error.Message, "restart") {
		t.Fatalf("the build cut off by the restart: %+v, want failed by the restart", b)
	}
	if u := usageOf(t, c); u.Builds != 0 {
		t.Errorf("usage after the restart: %+v, want no build", u)
	}
	buildAs(t, c, "quota-restart-"+harness.RandHex(4), client.BuildStep{Run: "true", NoCache: true})
}
