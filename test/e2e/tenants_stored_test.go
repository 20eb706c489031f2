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

// What a tenant keeps rather than runs: snapshots, paused sandboxes'
// checkpoints and templates, counted and in MiB; and who may read the
// node's metrics.

// usageOf reads c's tenant's usage.
func usageOf(t *testing.T, c *client.Client) client.Usage {
	t.Helper()
	u, err := c.Usage(harness.Ctx(t, 10*time.Second))
	if err != nil || u.Usage == nil {
		t.Fatalf("usage: %+v, %v", u, err)
	}
	return *u.Usage
}

// setQuotas replaces tenant id's quotas (admin key).
func setQuotas(t *testing.T, d *harness.Daemon, id string, q client.Quotas) {
	t.Helper()
	if _, err := d.Client.SetQuotas(harness.Ctx(t, 10*time.Second), id, q); err != nil {
		t.Fatalf("set quotas of %s: %v", id, err)
	}
}

// testTenantSnapshotQuotas: at snapshots=1 a second snapshot is refused
// (both APIs) until the first is deleted; at snapshot_mb equal to what
// the tenant's snapshots take, the next one is refused.
func testTenantSnapshotQuotas(t *testing.T, d *harness.Daemon) {
	const id = "snapshots"
	c, key := newTenant(t, d, id, client.Quotas{Snapshots: 1})
	sb := createAs(t, d, c, client.CreateSandboxRequest{})
	ctx := harness.Ctx(t, 2*time.Minute)
	first, err := c.TakeSnapshot(ctx, sb.ID)
	if err != nil {
		t.Fatalf("first snapshot: %v", err)
	}
	u := usageOf(t, c)
	if u.Snapshots != 1 || u.SnapshotMB < 1 || u.SnapshotMB != int((first.Bytes+1<<20-1)>>20) {
		t.Errorf("usage after a snapshot of %d bytes: %+v, want 1 snapshot of its MiB", first.Bytes, u)
	}
	resp, body := do(t, d, "POST", "/v1/sandboxes/"+sb.ID+"/snapshots", "{}", bearer(key.Key))
	wantQuota(t, "native snapshot", parseRefusal(t, resp, body, false), false, "snapshots", 1, 1, 1)
	resp, body = do(t, d, "POST", "/sandboxes/"+sb.ID+"/snapshots", "{}", xAPIKey(key.Key))
	wantQuota(t, "E2B snapshot", parseRefusal(t, resp, body, true), true, "snapshots", 1, 1, 1)
	if sns, err := c.ListSnapshots(ctx, sb.ID); err != nil || len(sns) != 1 {
		t.Errorf("snapshots after the refusals: %d, %v; want the first only", len(sns), err)
	}
	if err := c.DeleteSnapshot(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	second, err := c.TakeSnapshot(ctx, sb.ID)
	if err != nil {
		t.Fatalf("a snapshot once the first is deleted: %v", err)
	}

	// The bytes: a limit of what the tenant's one snapshot takes.
	mb := usageOf(t, c).SnapshotMB
	setQuotas(t, d, id, client.Quotas{Snapshots: -1, SnapshotMB: mb})
	resp, body = do(t, d, "POST", "/v1/sandboxes/"+sb.ID+"/snapshots", "{}", bearer(key.Key))
	r := parseRefusal(t, resp, body, false)
	if r.Status != http.StatusForbidden || r.Details["quota"] != "snapshot_mb" || r.Details["limit"] != float64(mb) || r.Details["used"] != float64(mb) {
		t.Errorf("a snapshot at snapshot_mb=%d: %d %v (%s), want 403 naming snapshot_mb, its limit and use", mb, r.Status, r.Details, r.Message)
	}
	if err := c.DeleteSnapshot(ctx, second.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TakeSnapshot(ctx, sb.ID); err != nil {
		t.Errorf("a snapshot once the tenant holds none: %v", err)
	}
}

// testTenantPausedBytes: at paused_mb equal to what one paused sandbox's
// checkpoint takes, a pause of another is refused (403 naming paused_mb,
// both APIs) and that sandbox runs on; once the first is resumed a pause
// of the same size passes. The pauses that must pass keep the disk only,
// whose size a pause estimates well (a fresh sandbox's disk, as the
// first one's).
func testTenantPausedBytes(t *testing.T, d *harness.Daemon) {
	const id = "paused-bytes"
	c, key := newTenant(t, d, id, client.Quotas{})
	a := createAs(t, d, c, client.CreateSandboxRequest{})
	b := createAs(t, d, c, client.CreateSandboxRequest{})
	ctx := harness.Ctx(t, 3*time.Minute)
	if _, err := c.PauseSandboxWith(ctx, a.ID, client.PauseOptions{DiskOnly: true}); err != nil {
		t.Fatalf("pause %s: %v", a.ID, err)
	}
	mb := usageOf(t, c).PausedMB
	if mb < 1 {
		t.Fatalf("paused_mb after a pause: %d, want the checkpoint's MiB", mb)
	}
	setQuotas(t, d, id, client.Quotas{PausedMB: mb})
	for _, e2b := range []bool{false, true} {
		path, hdr := "/v1/sandboxes/"+b.ID+"/pause", bearer(key.Key)
		if e2b {
			path, hdr = "/sandboxes/"+b.ID+"/pause", xAPIKey(key.Key)
		}
		resp, body := do(t, d, "POST", path, nil, hdr)
		r := parseRefusal(t, resp, body, e2b)
		if asked, _ := r.Details["requested"].(float64); r.Status != http.StatusForbidden || r.Details["quota"] != "paused_mb" ||
			r.Details["limit"] != float64(mb) || r.Details["used"] != float64(mb) || asked < 1 {
			t.Errorf("pause at paused_mb=%d (e2b %v): %d %v (%s), want 403 naming paused_mb, its limit, use and the pause's estimate", mb, e2b, r.Status, r.Details, r.Message)
		}
	}
	if err := echoAs(ctx, c, b.ID, "still-running"); err != nil {
		t.Errorf("the sandbox whose pause was refused: %v", err)
	}
	if _, err := c.ResumeSandbox(ctx, a.ID, 0); err != nil {
		t.Fatalf("resume %s: %v", a.ID, err)
	}
	if u := usageOf(t, c); u.PausedSandboxes != 0 || u.PausedMB != 0 {
		t.Errorf("usage after the resume: %+v, want nothing paused", u)
	}
	if _, err := c.PauseSandboxWith(ctx, b.ID, client.PauseOptions{DiskOnly: true}); err != nil {
		t.Errorf("a pause once nothing is paused: %v", err)
	}
}

// buildAs starts a build of template name with c's key and waits until it
// is ready.
func buildAs(t *testing.T, c *client.Client, name string, steps ...client.BuildStep) *client.Build {
	t.Helper()
	ctx := harness.Ctx(t, 3*time.Minute)
	b, err := c.StartBuild(ctx, client.BuildRequest{Name: name, From: &client.BuildFrom{Template: "base"}, Steps: steps})
	if err != nil {
		t.Fatalf("build %s: %v", name, err)
	}
	for b.State != "ready" {
		if b.State == "error" || b.State == "canceled" {
			t.Fatalf("build %s: %+v", name, b)
		}
		time.Sleep(200 * time.Millisecond)
		if b, err = c.GetBuild(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// testTenantTemplateQuotas: at templates=1 the tenant rebuilds its own
// template but makes no second one (native and E2B); at template_mb equal
// to what its template takes, it builds nothing more until it deletes.
func testTenantTemplateQuotas(t *testing.T, d *harness.Daemon) {
	const id = "templates"
	c, key := newTenant(t, d, id, client.Quotas{Templates: 1})
	own := "quota-tpl-" + harness.RandHex(4)
	// A layer of a couple of MiB, so the template's size is not 0.
	blob := client.BuildStep{Run: "head -c 3000000 /dev/urandom > /home/user/blob", NoCache: true}
	buildAs(t, c, own, blob)
	t.Cleanup(func() { d.Client.DeleteTemplate(harness.Ctx(t, 30*time.Second), own) })
	u := usageOf(t, c)
	if u.Templates != 1 || u.TemplateMB < 2 {
		t.Errorf("usage after one build: %+v, want 1 template of at least 2 MiB", u)
	}
	other := "quota-tpl-" + harness.RandHex(4)
	resp, body := do(t, d, "POST", "/v1/builds", client.BuildRequest{Name: other, From: &client.BuildFrom{Template: "base"}, Steps: []client.BuildStep{{Env: map[string]string{"A": "1"}}}}, bearer(key.Key))
	wantQuota(t, "native build of a second template", parseRefusal(t, resp, body, false), false, "templates", 1, 1, 1)
	resp, body = do(t, d, "POST", "/v3/templates", map[string]any{"name": other}, xAPIKey(key.Key))
	wantQuota(t, "E2B request of a second template", parseRefusal(t, resp, body, true), true, "templates", 1, 1, 1)
	ctx := harness.Ctx(t, 30*time.Second)
	if _, err := d.Client.GetTemplate(ctx, other); !client.IsNotFound(err) {
		t.Errorf("the refused template: %v, want none made", err)
	}
	// Its own template again: no new name, so within templates=1.
	buildAs(t, c, own+":v2", client.BuildStep{Env: map[string]string{"V": "2"}})

	mb := usageOf(t, c).TemplateMB
	setQuotas(t, d, id, client.Quotas{Templates: -1, TemplateMB: mb})
	resp, body = do(t, d, "POST", "/v1/builds", client.BuildRequest{Name: own, From: &client.BuildFrom{Template: "base"}, Steps: []client.BuildStep{{Env: map[string]string{"V": "3"}}}}, bearer(key.Key))
	r := parseRefusal(t, resp, body, false)
	if r.Status != http.StatusForbidden || r.Details["quota"] != "template_mb" || r.Details["limit"] != float64(mb) || r.Details["used"] != float64(mb) {
		t.Errorf("a build at template_mb=%d: %d %v (%s), want 403 naming template_mb, its limit and use", mb, r.Status, r.Details, r.Message)
	}
	if err := c.DeleteTemplate(ctx, own); err != nil {
		t.Fatal(err)
	}
	if u := usageOf(t, c); u.Templates != 0 || u.TemplateMB != 0 {
		t.Errorf("usage after the delete: %+v, want no templates", u)
	}
	buildAs(t, c, other, client.BuildStep{Env: map[string]string{"A": "1"}})
	t.Cleanup(func() { d.Client.DeleteTemplate(harness.Ctx(t, 30*time.Second), other) })
}

// testTenantMetrics: /metrics names every tenant and its usage, so only
// the admin key and the metrics token read it; a tenant key gets 403 and
// no key 401. What it shows: the tenants' usage and the command start
// histogram.
func testTenantMetrics(t *testing.T, d *harness.Daemon) {
	c, key := newTenant(t, d, "metrics", client.Quotas{})
	sb := createAs(t, d, c, client.CreateSandboxRequest{})
	if err := echoAs(harness.Ctx(t, 30*time.Second), c, sb.ID, "counted"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		hdr    map[string]string
		status int
	}{
		{"no key", map[string]string{"Authorization": ""}, http.StatusUnauthorized},
		{"a tenant's key", bearer(key.Key), http.StatusForbidden},
		{"a tenant's key in X-API-Key", xAPIKey(key.Key), http.StatusForbidden},
		{"a wrong token", bearer("not-the-metrics-token-at-all"), http.StatusUnauthorized},
		{"the admin key", nil, http.StatusOK},
		{"the metrics token", bearer(metricsToken), http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := do(t, d, "GET", "/metrics", nil, tc.hdr)
			if tc.status != http.StatusOK {
				code := map[int]string{401: "unauthenticated", 403: "permission_denied"}[tc.status]
				wantError(t, resp, body, tc.status, code)
				if strings.Contains(string(body), "space_tenant") {
					t.Errorf("the refusal holds metrics: %.300s", body)
				}
				return
			}
			text := string(body)
			for _, want := range []string{`space_tenant_sandboxes{tenant="metrics"} 1`, `space_tenant_snapshots{tenant="metrics"} 0`,
				`space_tenant_templates{tenant="metrics"} 0`, `space_exec_seconds_count{kind="command"}`} {
				if resp.StatusCode != 200 || !strings.Contains(text, want) {
					t.Errorf("/metrics (%d) lacks %s", resp.StatusCode, want)
				}
			}
		})
	}
}

// testTenantAuditPublic: the E2B volume content routes check the volume's
// own token, not the API key, and are audited all the same: as the
// volume's tenant with key volume-token, or anonymous when refused.
func testTenantAuditPublic(t *testing.T, d *harness.Daemon) {
	from := time.Now().Add(-time.Second)
	_, key := newTenant(t, d, "audit-public", client.Quotas{})
	resp, body := do(t, d, "POST", "/volumes", map[string]string{"name": "audited-" + harness.RandHex(4)}, xAPIKey(key.Key))
	var vol struct {
		VolumeID string `json:"volumeID"`
		Token    string `json:"token"`
	}
	if err := json.Unmarshal(body, &vol); resp.StatusCode >= 300 || err != nil || vol.Token == "" {
		t.Fatalf("E2B volume create: %d %s %v", resp.StatusCode, body, err)
	}
	t.Cleanup(func() { do(t, d, "DELETE", "/volumes/"+vol.VolumeID, nil, xAPIKey(key.Key)) })
	file := "/volumecontent/" + vol.VolumeID + "/file?path=/audited.txt"
	if resp, body := do(t, d, "PUT", file, "hello", map[string]string{"Authorization": "Bearer " + vol.Token}); resp.StatusCode >= 300 {
		t.Fatalf("write with the volume's token: %d %s", resp.StatusCode, body)
	}
	if resp, _ := do(t, d, "PUT", file, "x", map[string]string{"Authorization": "Bearer wrong"}); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("write with a wrong token: %d, want 401", resp.StatusCode)
	}
	want := []client.AuditEntry{
		{Tenant: "audit-public", Key: "volume-token", Method: "PUT", Route: "PUT /volumecontent/{id}/file", Object: vol.VolumeID, Status: http.StatusCreated},
		{Tenant: "", Key: "anonymous", Method: "PUT", Route: "PUT /volumecontent/{id}/file", Object: vol.VolumeID, Status: http.StatusUnauthorized},
	}
	var got []client.AuditEntry
	ctx := harness.Ctx(t, 30*time.Second)
	harness.WaitFor(5*time.Second, func() bool {
		all, err := d.Client.Audit(ctx, client.AuditFilter{From: from})
		got = got[:0]
		for _, e := range all {
			if e.Route == "PUT /volumecontent/{id}/file" && e.Object == vol.VolumeID {
				got = append(got, e)
			}
		}
		return err == nil && len(got) >= len(want)
	})
	if len(got) != len(want) {
		t.Fatalf("audit of the volume's content calls: %+v, want %d entries", got, len(want))
	}
	for i, w := range want {
		g := got[i]
		w.Time, w.Remote, w.Created = g.Time, "127.0.0.1", g.Created
		if g != w {
			t.Errorf("audit entry %d: %+v\nwant %+v", i, g, w)
		}
	}
	if j, _ := json.Marshal(got); strings.Contains(string(j), vol.Token) {
		t.Errorf("the audit log holds the volume's token")
	}
}
