package redteam

// The build-quota attempts (issue 27: three build sandboxes ran while their
// tenant was at 2 of 2 sandboxes): a tenant at its sandboxes quota sends a
// burst of builds at once, each of which would run its step in a build
// sandbox of its own, through the native API and through E2B's build
// trigger. At most its builds quota (the node's default, 2) may be taken;
// the rest are refused with 403 naming builds before anything runs.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// rtBuildQuota is the red-team daemon's default builds quota (its
// SPACE_TENANT_MAX_BUILDS is not set).
const rtBuildQuota = 2

func buildQuotaAttempts() []attempt {
	const stops = "the tenant's builds quota (default 2), taken with the build's vCPUs and memory under the sandbox service's quota lock when a build is submitted (native or E2B trigger) and held until it ends; a build's sandboxes are not among the tenant's sandboxes, so a tenant at that quota still builds"
	const control = "the builds within the quota start and their step sandboxes run (a line the step prints is in the build's log) while the tenant is at its sandboxes quota; once they are canceled a new build starts"
	return []attempt{
		{id: "build-quota-burst", family: "build-quota", stops: stops, control: control,
			desc: fmt.Sprintf("a tenant at 2 of 2 sandboxes sends %d builds at once through POST /v1/builds, each of whose step runs in a build sandbox and sleeps", rtBuildQuota+2),
			run:  func(t *testing.T) error { return buildQuotaBurst(t, false) }},
		{id: "build-quota-burst-e2b", family: "build-quota", stops: stops, control: control,
			desc: fmt.Sprintf("the same with %d E2B builds requested (POST /v3/templates) and then triggered at once (POST /v2/templates/{id}/builds/{build})", rtBuildQuota+2),
			run:  func(t *testing.T) error { return buildQuotaBurst(t, true) }},
	}
}

// TestBuildQuota runs the build-quota attempts, each with a tenant of its
// own.
func TestBuildQuota(t *testing.T) {
	need(t)
	t.Parallel()
	for _, a := range buildQuotaAttempts() {
		t.Run(a.id, func(t *testing.T) {
			if err := a.run(t); err != nil {
				t.Errorf("%s: %v", a.desc, err)
			}
		})
	}
}

// buildQuotaBurst: a new tenant fills its sandboxes quota (2), then sends
// rtBuildQuota+2 builds at once. At most rtBuildQuota are accepted, and each
// of those runs (the control); the others answer 403 naming builds. Once
// the accepted ones are canceled, another build is accepted.
func buildQuotaBurst(t *testing.T, e2b bool) error {
	d := env.d
	ctx := harness.Ctx(t, 5*time.Minute)
	tn := "rt-builds-" + harness.RandHex(4)
	if _, err := d.Client.CreateTenant(ctx, tn, "", client.Quotas{Sandboxes: 2}); err != nil {
		return err
	}
	k, err := d.Client.IssueKey(ctx, tn, "red team")
	if err != nil {
		return err
	}
	c := client.New(d.Addr, k.Key)
	for range 2 {
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
		if err != nil {
			return fmt.Errorf("the tenant's sandboxes: %w", err)
		}
		t.Cleanup(func() { d.Client.KillSandbox(harness.Ctx(t, 30*time.Second), sb.ID) })
	}
	if _, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{}); err == nil {
		return fmt.Errorf("a third sandbox was created: the tenant is not at its sandboxes quota, the attempt proves nothing")
	}
	marker := "rt-build-runs-" + harness.RandHex(4)
	n := rtBuildQuota + 2
	names := make([]string, n)
	var e2bIDs [][2]string // template id, build id
	for i := range names {
		names[i] = fmt.Sprintf("rt-bq-%s-%d", harness.RandHex(3), i)
		name := names[i]
		t.Cleanup(func() { d.Client.DeleteTemplate(harness.Ctx(t, 30*time.Second), name) })
		if e2b {
			tid, bid, err := e2bRequest(ctx, d, k.Key, name)
			if err != nil {
				return err
			}
			e2bIDs = append(e2bIDs, [2]string{tid, bid})
		}
	}

	// The burst: every build at once.
	type answer struct {
		status int
		body   []byte
		err    error
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			hdr := map[string]string{"Authorization": "Bearer " + k.Key}
			path, body := "/v1/builds", jsonBody(client.BuildRequest{Name: names[i], From: &client.BuildFrom{Template: "base"},
				Steps: []client.BuildStep{{Run: "echo " + marker + "; sleep 600", NoCache: true}}})
			if e2b {
				hdr = e2bKey(k.Key)
				path = "/v2/templates/" + e2bIDs[i][0] + "/builds/" + e2bIDs[i][1]
				body = jsonBody(map[string]any{"fromTemplate": "base", "steps": []map[string]any{
					{"type": "RUN", "args": []string{"echo " + marker + "; sleep 600"}, "force": true}}})
			}
			st, _, b, err := raw(ctx, d, "POST", path, body, hdr)
			answers[i] = answer{st, b, err}
		})
	}
	wg.Wait()

	var accepted []string // build ids
	for i, a := range answers {
		switch {
		case a.err != nil:
			return fmt.Errorf("build %d: %w", i, a.err)
		case a.status == http.StatusAccepted:
			id := ""
			if e2b {
				id = e2bIDs[i][1]
			} else {
				var b struct{ ID string }
				json.Unmarshal(a.body, &b)
				id = b.ID
			}
			accepted = append(accepted, id)
			t.Cleanup(func() { d.Client.CancelBuild(harness.Ctx(t, 30*time.Second), id) })
		case a.status == http.StatusForbidden && strings.Contains(string(a.body), `"quota":"builds"`):
			t.Logf("build %d refused: %.300s", i, a.body)
		default:
			return fmt.Errorf("build %d: %d %.300s, want 202 or 403 naming builds", i, a.status, a.body)
		}
	}
	if len(accepted) > rtBuildQuota {
		return fmt.Errorf("%d of %d builds at once were accepted, the tenant's builds quota is %d", len(accepted), n, rtBuildQuota)
	}
	if len(accepted) == 0 {
		return fmt.Errorf("positive control: no build was accepted: building is broken, or refused at the sandboxes quota")
	}
	// What the tenant holds, and the control: every accepted build's
	// step sandbox runs.
	if u, err := c.Usage(ctx); err != nil || u.Usage == nil || u.Usage.Builds != len(accepted) || u.Usage.Sandboxes != 2 {
		return fmt.Errorf("usage with %d builds: %+v, %v; want them and the 2 sandboxes", len(accepted), u, err)
	}
	for _, id := range accepted {
		if err := logHolds(ctx, d, id, marker); err != nil {
			return fmt.Errorf("positive control: %w", err)
		}
	}
	if !e2b {
		if bs, err := c.ListBuilds(ctx, ""); err != nil || len(bs) != len(accepted) {
			return fmt.Errorf("the tenant's builds: %d (%v), want only the %d accepted", len(bs), err, len(accepted))
		}
	}
	for _, id := range accepted {
		if _, err := d.Client.CancelBuild(ctx, id); err != nil {
			return err
		}
		if !harness.WaitFor(2*time.Minute, func() bool { b, err := d.Client.GetBuild(ctx, id); return err == nil && b.Done() }) {
			return fmt.Errorf("build %s did not end after its cancel", id)
		}
	}
	// Control: the refusals were the quota, which the ends gave back.
	after := "rt-bq-after-" + harness.RandHex(3)
	t.Cleanup(func() { d.Client.DeleteTemplate(harness.Ctx(t, 30*time.Second), after) })
	b, err := c.StartBuild(ctx, client.BuildRequest{Name: after, From: &client.BuildFrom{Template: "base"}, Steps: []client.BuildStep{{Run: "true", NoCache: true}}})
	if err != nil {
		return fmt.Errorf("positive control: a build after the others ended: %w", err)
	}
	t.Cleanup(func() { d.Client.CancelBuild(harness.Ctx(t, 30*time.Second), b.ID) })
	return nil
}

// e2bRequest asks for a waiting E2B build of template name with key.
func e2bRequest(ctx context.Context, d *harness.Daemon, key, name string) (string, string, error) {
	st, _, body, err := raw(ctx, d, "POST", "/v3/templates", jsonBody(map[string]any{"name": name}), e2bKey(key))
	var out struct {
		TemplateID string `json:"templateID"`
		BuildID    string `json:"buildID"`
	}
	if err == nil {
		err = json.Unmarshal(body, &out)
	}
	if err != nil || st != http.StatusAccepted || out.BuildID == "" {
		return "", "", fmt.Errorf("E2B build request of %s: %d %.300s %v", name, st, body, err)
	}
	return out.TemplateID, out.BuildID, nil
}

// e2bKey are the headers of an E2B call with key (not the admin's bearer).
func e2bKey(key string) map[string]string {
	return map[string]string{"Authorization": "", "X-API-Key": key}
}

// logHolds reads build id's log until a line holds want (or the build
// ends, or ctx does).
func logHolds(ctx context.Context, d *harness.Daemon, id, want string) error {
	s, err := d.Client.BuildLogs(ctx, id, 0)
	if err != nil {
		return err
	}
	defer s.Close()
	var seen []string
	for {
		e, err := s.Next()
		if err != nil {
			return fmt.Errorf("build %s's log ended without %q: %v (%.500s)", id, want, err, strings.Join(seen, " | "))
		}
		if strings.Contains(e.Message, want) {
			return nil
		}
		seen = append(seen, e.Message)
	}
}
