package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// allStates are every state the list filter takes: a half-made sandbox
// would show in one of them.
var allStates = []string{"creating", "running", "paused", "resuming", "killed", "lost"}

// TestTenants runs the multi-tenant checks against one daemon of their
// own, whose node defaults bind every tenant that sets no quota of its
// own. The parts run in parallel; each uses tenants of its own.
func TestTenants(t *testing.T) {
	d := ownDaemon(t, harness.Options{Name: "tenants", CIDR: "10.244.0.0/22", NoPool: true,
		// Creates of tenants in parallel on a small machine: boots are slower.
		BootTimeout: 15 * time.Second,
		Env: []string{
			"SPACE_DEFAULT_CPU=2", "SPACE_DEFAULT_MEMORY_MB=512",
			"SPACE_TENANT_MAX_SANDBOXES=4", "SPACE_TENANT_MAX_MEMORY_MB=4096", "SPACE_TENANT_MAX_PAUSED=2",
			"SPACE_TENANT_MAX_SNAPSHOTS=50", "SPACE_TENANT_MAX_TEMPLATES=5",
			"SPACE_TENANT_CREATES_PER_SECOND=10", "SPACE_TENANT_CREATES_BURST=10",
			"SPACE_METRICS_TOKEN=" + metricsToken,
		}})
	for _, part := range []struct {
		name string
		run  func(*testing.T, *harness.Daemon)
	}{
		{"Quotas", testTenantQuotas},
		{"PausedQuota", testTenantPausedQuota},
		{"AutoResumeQuota", testTenantAutoResumeQuota},
		{"Rate", testTenantRate},
		{"Storm", testTenantStorm},
		{"Revocation", testTenantRevocation},
		{"Audit", testTenantAudit},
		{"AdminRoutes", testTenantAdminRoutes},
		{"SnapshotQuotas", testTenantSnapshotQuotas},
		{"PausedBytes", testTenantPausedBytes},
		{"TemplateQuotas", testTenantTemplateQuotas},
		{"BuildQuota", testTenantBuildQuota},
		{"Metrics", testTenantMetrics},
		{"AuditPublic", testTenantAuditPublic},
		{"CLI", testTenantCLI},
	} {
		t.Run(part.name, func(t *testing.T) {
			t.Parallel()
			part.run(t, d)
		})
	}
}

// metricsToken is the TestTenants daemon's SPACE_METRICS_TOKEN.
const metricsToken = "space-metrics-token-of-the-tenants-test"

// newTenant makes tenant id with quotas q and issues it a key; it returns
// a client of that key and the key.
func newTenant(t *testing.T, d *harness.Daemon, id string, q client.Quotas) (*client.Client, *client.APIKey) {
	t.Helper()
	if _, err := d.Client.CreateTenant(harness.Ctx(t, 30*time.Second), id, "", q); err != nil {
		t.Fatalf("create tenant %s: %v", id, err)
	}
	k := issueKey(t, d, id)
	return client.New(d.Addr, k.Key), k
}

func issueKey(t *testing.T, d *harness.Daemon, tenant string) *client.APIKey {
	t.Helper()
	k, err := d.Client.IssueKey(harness.Ctx(t, 30*time.Second), tenant, "")
	if err != nil {
		t.Fatalf("issue a key of %s: %v", tenant, err)
	}
	if !strings.HasPrefix(k.Key, "e2b_") || !strings.HasPrefix(k.Key, k.ID) || k.ID == k.Key || k.Tenant != tenant {
		t.Fatalf("issued key %+v: want the key once, starting with e2b_ and its id, of %s", k, tenant)
	}
	return k
}

// bearer and xAPIKey are the headers of do for a key of the native and
// the E2B API.
func bearer(key string) map[string]string { return map[string]string{"Authorization": "Bearer " + key} }
func xAPIKey(key string) map[string]string {
	return map[string]string{"Authorization": "", "X-API-Key": key}
}

// createAs creates a sandbox with c's key and kills it (as admin) when t ends.
func createAs(t *testing.T, d *harness.Daemon, c *client.Client, req client.CreateSandboxRequest) *client.Sandbox {
	t.Helper()
	sb, err := c.CreateSandbox(harness.Ctx(t, 60*time.Second), req)
	if err != nil {
		t.Fatalf("create sandbox %+v: %v", req, err)
	}
	killAtEnd(t, d, sb.ID)
	return sb
}

func killAtEnd(t *testing.T, d *harness.Daemon, id string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Client.KillSandbox(ctx, id); err != nil && !client.IsNotFound(err) {
			t.Errorf("cleanup: kill %s: %v", id, err)
		}
	})
}

// echoAs runs "echo word" in sandbox id with c's key.
func echoAs(ctx context.Context, c *client.Client, id, word string) error {
	s, err := c.RunCommand(ctx, id, client.CommandRequest{Cmd: "echo " + word})
	if err != nil {
		return err
	}
	defer s.Close()
	var out strings.Builder
	for {
		ev, err := s.Next()
		if err != nil {
			return fmt.Errorf("echo in %s: %w (stdout %q)", id, err, out.String())
		}
		switch ev.Type {
		case client.EventStdout:
			out.Write(ev.Data)
		case client.EventEnd:
			if ev.Exit.Code() != 0 || out.String() != word+"\n" {
				return fmt.Errorf("echo %s in %s: exit %+v, stdout %q", word, id, *ev.Exit, out.String())
			}
			return nil
		}
	}
}

// refusal is a quota or rate error answer of either API, with its details.
type refusal struct {
	Status     int
	Code       string // the native code; E2B's body has the status only
	Message    string
	Details    map[string]any
	RetryAfter string // the Retry-After header
}

func parseRefusal(t *testing.T, resp *http.Response, body []byte, e2b bool) refusal {
	t.Helper()
	r := refusal{Status: resp.StatusCode, RetryAfter: resp.Header.Get("Retry-After")}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s %s: content type %q, want JSON; body %s", resp.Request.Method, resp.Request.URL.Path, ct, body)
	}
	var err error
	if e2b {
		var b struct {
			Code    int            `json:"code"`
			Message string         `json:"message"`
			Details map[string]any `json:"details"`
		}
		err = json.Unmarshal(body, &b)
		if b.Code != resp.StatusCode {
			t.Errorf("E2B error body code %d, status %d: %s", b.Code, resp.StatusCode, body)
		}
		r.Message, r.Details = b.Message, b.Details
	} else {
		var b struct {
			Error struct {
				Code    string         `json:"code"`
				Message string         `json:"message"`
				Details map[string]any `json:"details"`
			} `json:"error"`
		}
		err = json.Unmarshal(body, &b)
		r.Code, r.Message, r.Details = b.Error.Code, b.Error.Message, b.Error.Details
	}
	if err != nil || r.Message == "" {
		t.Errorf("%s %s: error body %s: %v (want a message)", resp.Request.Method, resp.Request.URL.Path, body, err)
	}
	return r
}

// wantQuota checks a 403 quota_exceeded answer and its details.
func wantQuota(t *testing.T, what string, r refusal, e2b bool, quota string, limit, used, requested int) {
	t.Helper()
	if r.Status != http.StatusForbidden || (!e2b && r.Code != "quota_exceeded") {
		t.Errorf("%s: status %d code %q (%s), want 403 quota_exceeded", what, r.Status, r.Code, r.Message)
		return
	}
	want := map[string]any{"quota": quota, "limit": float64(limit), "used": float64(used), "requested": float64(requested)}
	for k, v := range want {
		if r.Details[k] != v {
			t.Errorf("%s: details %v, want %s=%v (all of %v)", what, r.Details, k, v, want)
			break
		}
	}
}

func sandboxIDs(sbs []client.Sandbox) []string {
	var out []string
	for _, s := range sbs {
		out = append(out, s.ID)
	}
	slices.Sort(out)
	return out
}

// testTenantQuotas: a create that would cross a quota is refused with 403
// quota_exceeded naming it, through both APIs, leaves nothing behind, a
// create within the quota then passes, and the refused request itself
// passes once a kill lowers the use.
func testTenantQuotas(t *testing.T, d *harness.Daemon) {
	for _, tc := range []struct {
		quota              string
		q                  client.Quotas
		fill               []client.CreateSandboxRequest // then the default request (2 vCPU, 512 MB) is one too many
		limit, used, asked int
		killFirst          bool                        // kill fill[0] before fits
		fits               client.CreateSandboxRequest // passes after the refusals
	}{
		{quota: "sandboxes", q: client.Quotas{Sandboxes: 2}, fill: []client.CreateSandboxRequest{{}, {}},
			limit: 2, used: 2, asked: 1, killFirst: true},
		{quota: "memory_mb", q: client.Quotas{MemoryMB: 1024, Sandboxes: -1}, fill: []client.CreateSandboxRequest{{MemoryMB: 768}},
			limit: 1024, used: 768, asked: 512, fits: client.CreateSandboxRequest{MemoryMB: 256}},
		{quota: "vcpu", q: client.Quotas{VCPU: 3, Sandboxes: -1}, fill: []client.CreateSandboxRequest{{CPU: 2}},
			limit: 3, used: 2, asked: 2, fits: client.CreateSandboxRequest{CPU: 1}},
	} {
		t.Run(tc.quota, func(t *testing.T) {
			t.Parallel()
			id := "quota-" + strings.ReplaceAll(tc.quota, "_", "-")
			c, key := newTenant(t, d, id, tc.q)
			var made []client.Sandbox
			var want client.Usage
			for _, req := range tc.fill {
				sb := createAs(t, d, c, req)
				made = append(made, *sb)
				want = addUse(want, sb, 1)
			}
			checkUsage(t, c, want)

			probe := harness.RandHex(8)
			resp, body := do(t, d, "POST", "/v1/sandboxes", client.CreateSandboxRequest{Metadata: map[string]string{"probe": probe}}, bearer(key.Key))
			wantQuota(t, "native create", parseRefusal(t, resp, body, false), false, tc.quota, tc.limit, tc.used, tc.asked)
			resp, body = do(t, d, "POST", "/sandboxes", map[string]any{"templateID": "base", "metadata": map[string]string{"probe": probe}}, xAPIKey(key.Key))
			wantQuota(t, "E2B create", parseRefusal(t, resp, body, true), true, tc.quota, tc.limit, tc.used, tc.asked)

			// Nothing half-made: no sandbox of the probe in any state, the
			// tenant lists only its own, and its usage has not moved.
			ctx := harness.Ctx(t, 30*time.Second)
			if got, err := d.Client.ListAllSandboxes(ctx, client.ListOptions{States: allStates, Metadata: map[string]string{"probe": probe}}); err != nil || len(got) != 0 {
				t.Errorf("sandboxes of the refused creates: %v, %v; want none", sandboxIDs(got), err)
			}
			if got, err := c.ListAllSandboxes(ctx, client.ListOptions{States: allStates}); err != nil || !slices.Equal(sandboxIDs(got), sandboxIDs(made)) {
				t.Errorf("tenant %s lists %v (%v), want %v", id, sandboxIDs(got), err, sandboxIDs(made))
			}
			resp, body = do(t, d, "GET", "/sandboxes", nil, xAPIKey(key.Key))
			var e2bList []struct {
				SandboxID string `json:"sandboxID"`
			}
			if err := json.Unmarshal(body, &e2bList); resp.StatusCode != 200 || err != nil || len(e2bList) != len(made) {
				t.Errorf("E2B list of %s: %d %s, want %d sandboxes", id, resp.StatusCode, body, len(made))
			}
			checkUsage(t, c, want)

			if tc.killFirst {
				if err := c.KillSandbox(ctx, made[0].ID); err != nil {
					t.Fatalf("kill %s: %v", made[0].ID, err)
				}
				want = addUse(want, &made[0], -1)
			}
			sb := createAs(t, d, c, tc.fits)
			if err := echoAs(ctx, c, sb.ID, "fits"); err != nil {
				t.Error(err)
			}
			want = addUse(want, sb, 1)
			checkUsage(t, c, want)
			if tc.killFirst {
				return // the refused request itself passed after the kill
			}
			// The refused request itself passes once a kill lowers the
			// use: refused while fill[0] runs, made after it is killed.
			resp, body = do(t, d, "POST", "/v1/sandboxes", client.CreateSandboxRequest{}, bearer(key.Key))
			if r := parseRefusal(t, resp, body, false); r.Status != http.StatusForbidden || r.Details["quota"] != tc.quota {
				t.Errorf("the first request again, at the quota: %d %s, want 403 naming %s", r.Status, body, tc.quota)
			}
			if err := c.KillSandbox(ctx, made[0].ID); err != nil {
				t.Fatalf("kill %s: %v", made[0].ID, err)
			}
			want = addUse(want, &made[0], -1)
			checkUsage(t, c, want)
			again := createAs(t, d, c, client.CreateSandboxRequest{})
			if err := echoAs(ctx, c, again.ID, "again"); err != nil {
				t.Error(err)
			}
			checkUsage(t, c, addUse(want, again, 1))
		})
	}
	// Creates in flight hold their share: six at once at sandboxes=2 make two.
	t.Run("concurrent", func(t *testing.T) {
		t.Parallel()
		c, key := newTenant(t, d, "quota-concurrent", client.Quotas{Sandboxes: 2})
		ctx := harness.Ctx(t, time.Minute)
		results := make([]createResult, 6)
		var wg sync.WaitGroup
		for i := range results {
			wg.Add(1)
			go func() { defer wg.Done(); results[i] = rawCreate(ctx, d, key.Key, nil) }()
		}
		wg.Wait()
		statuses := map[int]int{}
		for _, r := range results {
			statuses[r.status]++
			if r.status == http.StatusCreated {
				killAtEnd(t, d, createdID(t, r.body))
			}
		}
		if statuses[http.StatusCreated] != 2 || statuses[http.StatusForbidden] != 4 {
			t.Errorf("6 creates at once at sandboxes=2: statuses %v, want 2 created and 4 refused (403)", statuses)
		}
		checkUsage(t, c, client.Usage{Sandboxes: 2, VCPU: 4, MemoryMB: 1024})
	})
}

// addUse adds (sign 1) or takes away (-1) what sandbox sb holds.
func addUse(u client.Usage, sb *client.Sandbox, sign int) client.Usage {
	u.Sandboxes += sign
	u.VCPU += sign * sb.CPU
	u.MemoryMB += sign * sb.MemoryMB
	return u
}

// checkUsage checks what GET /v1/usage answers c's key.
func checkUsage(t *testing.T, c *client.Client, want client.Usage) {
	t.Helper()
	got, err := c.Usage(harness.Ctx(t, 10*time.Second))
	if err != nil {
		t.Errorf("usage: %v", err)
		return
	}
	if got.Usage == nil || *got.Usage != want {
		t.Errorf("usage of %s: %+v, want %+v", got.ID, got.Usage, want)
	}
}

// testTenantPausedQuota: at paused_sandboxes=1 a second pause is refused
// (403, both APIs) and that sandbox runs on, while the first stays paused
// and resumes.
func testTenantPausedQuota(t *testing.T, d *harness.Daemon) {
	c, key := newTenant(t, d, "paused", client.Quotas{PausedSandboxes: 1})
	a := createAs(t, d, c, client.CreateSandboxRequest{})
	b := createAs(t, d, c, client.CreateSandboxRequest{})
	ctx := harness.Ctx(t, 2*time.Minute)
	if p, err := c.PauseSandbox(ctx, a.ID); err != nil || p.State != "paused" {
		t.Fatalf("pause %s: %+v, %v", a.ID, p, err)
	}
	// The checkpoint's size is the store's to say; it is counted.
	pausedMB := usageOf(t, c).PausedMB
	if pausedMB < 1 {
		t.Errorf("paused_mb with a sandbox paused: %d", pausedMB)
	}
	checkUsage(t, c, client.Usage{Sandboxes: 1, VCPU: b.CPU, MemoryMB: b.MemoryMB, PausedSandboxes: 1, PausedMB: pausedMB})

	resp, body := do(t, d, "POST", "/v1/sandboxes/"+b.ID+"/pause", nil, bearer(key.Key))
	wantQuota(t, "native pause", parseRefusal(t, resp, body, false), false, "paused_sandboxes", 1, 1, 1)
	resp, body = do(t, d, "POST", "/sandboxes/"+b.ID+"/pause", nil, xAPIKey(key.Key))
	wantQuota(t, "E2B pause", parseRefusal(t, resp, body, true), true, "paused_sandboxes", 1, 1, 1)
	if err := echoAs(ctx, c, b.ID, "still-running"); err != nil {
		t.Errorf("the sandbox whose pause was refused: %v", err)
	}
	if got, err := c.GetSandbox(ctx, a.ID); err != nil || got.State != "paused" {
		t.Errorf("the paused sandbox: %+v, %v; want it paused", got, err)
	}
	if r, err := c.ResumeSandbox(ctx, a.ID, 0); err != nil || r.State != client.StateRunning {
		t.Fatalf("resume %s: %+v, %v", a.ID, r, err)
	}
	if err := echoAs(ctx, c, a.ID, "resumed"); err != nil {
		t.Error(err)
	}
	checkUsage(t, c, addUse(addUse(client.Usage{}, a, 1), b, 1))

	// Pauses at once: one passes the quota of one, the others are refused
	// (pauses in flight count).
	codes := make(chan int, 2)
	for _, id := range []string{a.ID, b.ID} {
		go func() {
			resp, _ := do(t, d, "POST", "/v1/sandboxes/"+id+"/pause", nil, bearer(key.Key))
			codes <- resp.StatusCode
		}()
	}
	got := map[int]int{}
	for range 2 {
		got[<-codes]++
	}
	if got[200] != 1 || got[403] != 1 {
		t.Errorf("two pauses at once with a paused quota of 1: statuses %v, want one 200 and one 403", got)
	}
	if u, err := c.Usage(ctx); err != nil || u.Usage == nil || u.Usage.PausedSandboxes != 1 {
		t.Errorf("usage after two pauses at once: %+v, %v; want 1 paused", u, err)
	}
}

// testTenantAutoResumeQuota: traffic through the E2B proxy that wakes a
// paused auto-resume sandbox carries no API key; the resume runs as the
// sandbox's tenant, so at that tenant's quota of running sandboxes the
// wake is refused (403, naming the quota) and the sandbox stays paused.
// Control: once another sandbox of the tenant ends, the same request wakes
// it.
func testTenantAutoResumeQuota(t *testing.T, d *harness.Daemon) {
	c, _ := newTenant(t, d, "autoresume", client.Quotas{Sandboxes: 1})
	a := createAs(t, d, c, client.CreateSandboxRequest{AutoPause: true, AutoResume: true})
	ctx := harness.Ctx(t, 3*time.Minute)
	if p, err := c.PauseSandbox(ctx, a.ID); err != nil || p.State != "paused" {
		t.Fatalf("pause %s: %+v, %v", a.ID, p, err)
	}
	b := createAs(t, d, c, client.CreateSandboxRequest{})
	wake := func() (*http.Response, []byte) {
		// envd's /health needs no token (as for a running sandbox).
		return do(t, d, "GET", "/health", nil, map[string]string{"Authorization": "",
			"E2b-Sandbox-Id": a.ID, "E2b-Sandbox-Port": "49983"})
	}
	resp, body := wake()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "sandboxes quota") {
		t.Errorf("traffic to a paused auto-resume sandbox of a tenant at its quota: %d %s, want 403 naming the sandboxes quota", resp.StatusCode, body)
	}
	if got, err := c.GetSandbox(ctx, a.ID); err != nil || got.State != "paused" {
		t.Errorf("after the refused wake: %+v, %v; want it still paused", got, err)
	}
	checkUsage(t, c, client.Usage{Sandboxes: 1, VCPU: b.CPU, MemoryMB: b.MemoryMB, PausedSandboxes: 1, PausedMB: usageOf(t, c).PausedMB})

	if err := c.KillSandbox(ctx, b.ID); err != nil {
		t.Fatalf("kill %s: %v", b.ID, err)
	}
	if resp, body := wake(); resp.StatusCode/100 != 2 {
		t.Fatalf("control: traffic with the quota free: %d %s, want the sandbox woken", resp.StatusCode, body)
	}
	if got, err := c.GetSandbox(ctx, a.ID); err != nil || got.State != client.StateRunning {
		t.Errorf("control: after the wake: %+v, %v; want it running", got, err)
	}
	if err := echoAs(ctx, c, a.ID, "woken"); err != nil {
		t.Error(err)
	}
	checkUsage(t, c, addUse(client.Usage{}, a, 1))
}

// createResult is one raw create's answer and when its request was sent.
type createResult struct {
	status      int
	body        []byte
	wrote, done time.Time
	err         error
}

// rawCreate sends POST /v1/sandboxes with key; wrote, if not nil, is told
// once the request is written.
func rawCreate(ctx context.Context, d *harness.Daemon, key string, wrote chan<- struct{}) createResult {
	var r createResult
	var mu sync.Mutex
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
		mu.Lock()
		r.wrote = time.Now()
		mu.Unlock()
		if wrote != nil {
			wrote <- struct{}{}
		}
	}})
	req, err := http.NewRequestWithContext(ctx, "POST", "http://"+d.Addr+"/v1/sandboxes", strings.NewReader("{}"))
	if err != nil {
		return createResult{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		r.body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		r.status = resp.StatusCode
	}
	mu.Lock()
	defer mu.Unlock()
	r.done, r.err = time.Now(), err
	return r
}

// createdID is the id of a 201 answer to a create.
func createdID(t *testing.T, body []byte) string {
	t.Helper()
	var sb client.Sandbox
	if err := json.Unmarshal(body, &sb); err != nil || sb.ID == "" {
		t.Fatalf("create answered %s: %v", body, err)
	}
	return sb.ID
}

// wantRateLimited checks a 429 answer to a create of a tenant whose burst
// is spent: its details (the rate, the burst and what is left of it, the
// wait), its message, and a Retry-After header of the wait in seconds,
// rounded up.
func wantRateLimited(t *testing.T, what string, r refusal, e2b bool, perSecond float64, burst int) (retry time.Duration) {
	t.Helper()
	if r.Status != http.StatusTooManyRequests || (!e2b && r.Code != "resource_exhausted") {
		t.Errorf("%s: status %d code %q (%s), want 429 resource_exhausted", what, r.Status, r.Code, r.Message)
		return 0
	}
	ms, _ := r.Details["retry_after_ms"].(float64)
	left, okLeft := r.Details["tokens_left"].(float64)
	used, okUsed := r.Details["used"].(float64)
	if r.Details["quota"] != "creates_per_second" || r.Details["limit"] != perSecond || r.Details["burst"] != float64(burst) ||
		r.Details["requested"] != 1.0 || ms <= 0 || ms > 1000/perSecond {
		t.Errorf("%s: details %v, want quota creates_per_second, limit %g, burst %d, requested 1, retry_after_ms in (0, %g]", what, r.Details, perSecond, burst, 1000/perSecond)
	}
	// Refused, so less than one create is left; the use is the rest.
	if !okLeft || !okUsed || left < 0 || left >= 1 || math.Abs(used+left-float64(burst)) > 0.011 {
		t.Errorf("%s: details %v, want tokens_left in [0, 1) and used = burst - tokens_left", what, r.Details)
	}
	if want := fmt.Sprintf("of %d creates left", burst); !strings.Contains(r.Message, want) || !strings.Contains(r.Message, "retry in") {
		t.Errorf("%s: message %q, want it to say what is left (%q) and when to retry", what, r.Message, want)
	}
	if want := strconv.Itoa(int(math.Ceil(ms / 1000))); r.RetryAfter != want {
		t.Errorf("%s: Retry-After %q, want %q (retry_after_ms %g in seconds, rounded up)", what, r.RetryAfter, want, ms)
	}
	return time.Duration(ms) * time.Millisecond
}

// testTenantRate: at 0.5 creates a second with a burst of 2, two creates
// pass, an immediate third is 429 on both APIs, and one passes after the
// wait it was told.
func testTenantRate(t *testing.T, d *harness.Daemon) {
	c, key := newTenant(t, d, "rate", client.Quotas{CreatesPerSecond: 0.5, CreatesBurst: 2})
	ctx := harness.Ctx(t, 2*time.Minute)
	wrote := make(chan struct{}, 2)
	results := make(chan createResult, 2)
	for range 2 {
		go func() { results <- rawCreate(ctx, d, key.Key, wrote) }()
	}
	<-wrote
	<-wrote
	time.Sleep(200 * time.Millisecond) // the daemon has read both
	resp, body := do(t, d, "POST", "/v1/sandboxes", "{}", bearer(key.Key))
	retry := wantRateLimited(t, "third create", parseRefusal(t, resp, body, false), false, 0.5, 2)
	resp, body = do(t, d, "POST", "/sandboxes", map[string]any{"templateID": "base"}, xAPIKey(key.Key))
	wantRateLimited(t, "E2B create", parseRefusal(t, resp, body, true), true, 0.5, 2)
	limitedAt := time.Now()
	for range 2 {
		r := <-results
		if r.err != nil || r.status != http.StatusCreated {
			t.Errorf("one of the first two creates: %d %s %v", r.status, r.body, r.err)
			continue
		}
		killAtEnd(t, d, createdID(t, r.body))
	}
	time.Sleep(time.Until(limitedAt.Add(retry)))
	createAs(t, d, c, client.CreateSandboxRequest{})
}

// testTenantStorm: a tenant firing 30 creates at once gets its burst and
// its rate, the rest 429; meanwhile another tenant's creates and commands
// all pass.
func testTenantStorm(t *testing.T, d *harness.Daemon) {
	const n, perSecond, burst = 30, 1.0, 3
	_, storm := newTenant(t, d, "storm", client.Quotas{CreatesPerSecond: perSecond, CreatesBurst: burst, Sandboxes: -1})
	calm, _ := newTenant(t, d, "calm", client.Quotas{})
	ctx := harness.Ctx(t, 2*time.Minute)
	start := make(chan struct{})
	results := make([]createResult, n)
	calmSbs := make([]*client.Sandbox, 3)
	calmErrs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = rawCreate(ctx, d, storm.Key, nil)
		}()
	}
	for i := range calmSbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if calmSbs[i], calmErrs[i] = calm.CreateSandbox(ctx, client.CreateSandboxRequest{}); calmErrs[i] == nil {
				calmErrs[i] = echoAs(ctx, calm, calmSbs[i].ID, fmt.Sprintf("calm-%d", i))
			}
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	took := time.Since(t0)

	// Every decision was taken by the last 429's answer or the last
	// passed create's request (plus a second for the daemon to read it).
	var passed, limited int
	var window time.Duration
	var badLimit bool
	var other string
	for _, r := range results {
		switch {
		case r.err != nil:
			t.Errorf("storm create: %v", r.err)
		case r.status == http.StatusCreated:
			passed++
			killAtEnd(t, d, createdID(t, r.body))
			window = max(window, r.wrote.Sub(t0))
		case r.status == http.StatusTooManyRequests:
			limited++
			window = max(window, r.done.Sub(t0))
			var e struct {
				Error struct {
					Code    string         `json:"code"`
					Details map[string]any `json:"details"`
				} `json:"error"`
			}
			if json.Unmarshal(r.body, &e) != nil || e.Error.Code != "resource_exhausted" || e.Error.Details["retry_after_ms"] == nil {
				badLimit = true
			}
		default:
			other = fmt.Sprintf("status %d: %s", r.status, r.body)
		}
	}
	if other != "" {
		t.Errorf("a storm create answered neither 201 nor 429, e.g. %s", other)
	}
	if badLimit {
		t.Errorf("a 429 of the storm lacks code resource_exhausted or retry_after_ms")
	}
	allowed := burst + int(perSecond*(window+time.Second).Seconds())
	t.Logf("storm: %d passed, %d refused with 429 (decisions within %s, all answers in %s)", passed, limited, window.Round(time.Millisecond), took.Round(time.Millisecond))
	if passed < burst || passed > allowed || passed+limited != n {
		t.Errorf("storm: %d creates passed and %d were refused of %d; want from %d (the burst) to %d, the rest 429", passed, limited, n, burst, allowed)
	}
	for i, err := range calmErrs {
		if calmSbs[i] != nil {
			killAtEnd(t, d, calmSbs[i].ID)
		}
		if err != nil {
			t.Errorf("calm tenant's sandbox %d during the storm: %v", i, err)
		}
	}
}

// follow starts "sleep 60" in sandbox id with c's key and returns when it
// has started; the channel gets how its stream ended.
func follow(ctx context.Context, t *testing.T, c *client.Client, id string) <-chan error {
	t.Helper()
	s, err := c.RunCommand(ctx, id, client.CommandRequest{Cmd: "sleep 60"})
	if err != nil {
		t.Fatalf("start sleep 60: %v", err)
	}
	if ev, err := s.Next(); err != nil || ev.Type != client.EventStart {
		t.Fatalf("first event of sleep 60: %+v, %v", ev, err)
	}
	ended := make(chan error, 1)
	go func() {
		defer s.Close()
		for {
			ev, err := s.Next()
			if err == nil && ev.Type == client.EventEnd {
				err = fmt.Errorf("the command ended: %+v", *ev.Exit)
			}
			if err != nil {
				ended <- err
				return
			}
		}
	}()
	return ended
}

// terminal is a PTY session whose output is kept; ended gets how it ended.
type terminal struct {
	pty   *client.PTY
	ended chan error
	mu    sync.Mutex
	out   strings.Builder
}

func (tm *terminal) Write(b []byte) (int, error) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.out.Write(b)
}

func (tm *terminal) output() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.out.String()
}

// openTerminal opens a PTY in sandbox id with c's key.
func openTerminal(ctx context.Context, t *testing.T, c *client.Client, id string) *terminal {
	t.Helper()
	p, err := c.OpenPTY(ctx, id, client.PTYOptions{})
	if err != nil {
		t.Fatalf("open a PTY: %v", err)
	}
	tm := &terminal{pty: p, ended: make(chan error, 1)}
	go func() {
		defer p.Close()
		io.Copy(tm, p)
		code, err := p.Wait()
		tm.ended <- fmt.Errorf("exit %d: %v", code, err)
	}()
	return tm
}

// testTenantRevocation: revoking a key ends the command stream and the
// terminal it holds open within seconds and refuses its next request
// (401), while those of another key of the same tenant go on.
func testTenantRevocation(t *testing.T, d *harness.Daemon) {
	keep, kept := newTenant(t, d, "revoke", client.Quotas{})
	doomed := issueKey(t, d, "revoke")
	c := client.New(d.Addr, doomed.Key)
	sb := createAs(t, d, keep, client.CreateSandboxRequest{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	doomedEnded := follow(ctx, t, c, sb.ID)
	keptEnded := follow(ctx, t, keep, sb.ID)
	doomedTerm := openTerminal(ctx, t, c, sb.ID)
	keptTerm := openTerminal(ctx, t, keep, sb.ID)

	revoked := time.Now()
	if k, err := d.Client.RevokeKey(ctx, doomed.ID); err != nil || k.RevokedAt.IsZero() {
		t.Fatalf("revoke %s: %+v, %v", doomed.ID, k, err)
	}
	select {
	case err := <-doomedEnded:
		t.Logf("the revoked key's stream ended %s after the revocation: %v", time.Since(revoked).Round(time.Millisecond), err)
		if err == nil || !strings.Contains(err.Error(), "the API key was revoked") {
			t.Errorf("the revoked key's stream ended with %v, want it to say the key was revoked", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the revoked key's stream is still open 15s after the revocation")
	}
	select {
	case err := <-doomedTerm.ended:
		t.Logf("the revoked key's terminal ended %s after the revocation: %v", time.Since(revoked).Round(time.Millisecond), err)
		if err == nil || !strings.Contains(err.Error(), "revoked") {
			t.Errorf("the revoked key's terminal ended with %v, want it to say the key was revoked", err)
		}
	case <-time.After(15 * time.Second):
		t.Errorf("the revoked key's terminal is still open 15s after the revocation")
	}
	select {
	case err := <-keptEnded:
		t.Errorf("the stream of the tenant's other key ended too: %v", err)
	case err := <-keptTerm.ended:
		t.Errorf("the terminal of the tenant's other key ended too: %v", err)
	case <-time.After(time.Second):
	}
	if _, err := keptTerm.pty.Write([]byte("echo pty-$((6*7))\n")); err != nil {
		t.Errorf("type into the other key's terminal: %v", err)
	} else if !harness.WaitFor(10*time.Second, func() bool { return strings.Contains(keptTerm.output(), "pty-42") }) {
		t.Errorf("the other key's terminal does not answer: %q", keptTerm.output())
	}

	resp, body := do(t, d, "GET", "/v1/usage", nil, bearer(doomed.Key))
	wantError(t, resp, body, http.StatusUnauthorized, "unauthenticated")
	resp, body = do(t, d, "GET", "/sandboxes", nil, xAPIKey(doomed.Key))
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("E2B list with the revoked key: %d %s, want 401", resp.StatusCode, body)
	}
	if _, err := c.RunCommand(ctx, sb.ID, client.CommandRequest{Cmd: "true"}); !client.IsUnauthenticated(err) {
		t.Errorf("a command with the revoked key: %v, want 401", err)
	}
	if err := echoAs(ctx, keep, sb.ID, "kept"); err != nil {
		t.Errorf("the tenant's other key after the revocation: %v", err)
	}
	keys, err := d.Client.ListAPIKeys(ctx, "revoke")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k.Key != "" || (k.ID == doomed.ID) == k.RevokedAt.IsZero() || (k.ID != doomed.ID && k.ID != kept.ID) {
			t.Errorf("key %+v in the list (revoked %s, kept %s)", k, doomed.ID, kept.ID)
		}
	}
}

// testTenantAudit: the admin reads a tenant's state-changing calls
// (refusals included, reads not) with their key, route, object and
// status; a tenant key may not; bad windows are 400.
func testTenantAudit(t *testing.T, d *harness.Daemon) {
	from := time.Now().Add(-time.Second)
	c, key := newTenant(t, d, "audit", client.Quotas{Sandboxes: 1})
	sb := createAs(t, d, c, client.CreateSandboxRequest{})
	resp, body := do(t, d, "POST", "/v1/sandboxes", "{}", bearer(key.Key))
	wantQuota(t, "create over the quota", parseRefusal(t, resp, body, false), false, "sandboxes", 1, 1, 1)
	resp, body = do(t, d, "DELETE", "/v1/sandboxes/sb-no-such", nil, bearer(key.Key))
	wantError(t, resp, body, http.StatusNotFound, "not_found")
	resp, body = do(t, d, "POST", "/v1/admin/tenants", map[string]string{"id": "sneaky"}, bearer(key.Key))
	wantError(t, resp, body, http.StatusForbidden, "permission_denied")
	if resp, body := do(t, d, "GET", "/v1/sandboxes", nil, bearer(key.Key)); resp.StatusCode != http.StatusOK {
		t.Errorf("list: %d %s", resp.StatusCode, body)
	}
	ctx := harness.Ctx(t, time.Minute)
	if err := c.KillSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}

	want := []client.AuditEntry{
		{Method: "POST", Route: "POST /v1/sandboxes", Created: sb.ID, Status: http.StatusCreated},
		{Method: "POST", Route: "POST /v1/sandboxes", Status: http.StatusForbidden},
		{Method: "DELETE", Route: "DELETE /v1/sandboxes/{id}", Object: "sb-no-such", Status: http.StatusNotFound},
		{Method: "POST", Route: "POST /v1/admin/tenants", Status: http.StatusForbidden},
		{Method: "DELETE", Route: "DELETE /v1/sandboxes/{id}", Object: sb.ID, Status: http.StatusNoContent},
	}
	var got []client.AuditEntry
	var err error
	// An entry is added just after its answer is written.
	harness.WaitFor(5*time.Second, func() bool {
		got, err = d.Client.Audit(ctx, client.AuditFilter{From: from, Tenant: "audit"})
		return err == nil && len(got) >= len(want)
	})
	if err != nil || len(got) != len(want) {
		t.Fatalf("audit of tenant audit: %v, %+v; want %d entries", err, got, len(want))
	}
	for i, w := range want {
		g := got[i]
		w.Time, w.Tenant, w.Key, w.Remote = g.Time, "audit", key.ID, "127.0.0.1"
		if g != w {
			t.Errorf("audit entry %d: %+v\nwant %+v", i, g, w)
		}
	}

	all, err := d.Client.Audit(ctx, client.AuditFilter{From: from})
	if err != nil {
		t.Fatal(err)
	}
	var sawAdmin bool
	for _, e := range all {
		sawAdmin = sawAdmin || (e.Tenant == "default" && e.Key == "admin" && e.Route == "POST /v1/admin/tenants" && e.Created == "audit" && e.Status == http.StatusCreated)
	}
	if j, _ := json.Marshal(all); strings.Contains(string(j), key.Key) {
		t.Errorf("the audit log holds an API key itself")
	}
	if !sawAdmin {
		t.Errorf("the admin's creation of tenant audit is not in the log: %+v", all)
	}
	if one, err := d.Client.Audit(ctx, client.AuditFilter{From: from, Limit: 1}); err != nil || len(one) != 1 {
		t.Errorf("audit with limit 1: %d entries, %v", len(one), err)
	}

	resp, body = do(t, d, "GET", "/v1/admin/audit", nil, bearer(key.Key))
	wantError(t, resp, body, http.StatusForbidden, "permission_denied")
	now := time.Now().UTC()
	for _, q := range []url.Values{
		{"from": {now.Format(time.RFC3339)}, "to": {now.Add(-time.Hour).Format(time.RFC3339)}},
		{"limit": {"0"}},
		{"limit": {"10001"}},
		{"limit": {"many"}},
		{"from": {"yesterday"}},
	} {
		resp, body := do(t, d, "GET", "/v1/admin/audit?"+q.Encode(), nil, nil)
		wantError(t, resp, body, http.StatusBadRequest, "invalid_argument")
	}
}

// testTenantAdminRoutes: tenants take the node's defaults for the quotas
// they leave 0, a tenant key gets 403 on every admin route, and bad input
// to them is 400 or 404 with a JSON error.
func testTenantAdminRoutes(t *testing.T, d *harness.Daemon) {
	ctx := harness.Ctx(t, time.Minute)
	c, key := newTenant(t, d, "plain", client.Quotas{})
	defaults := client.Quotas{Sandboxes: 4, MemoryMB: 4096, Builds: 2, PausedSandboxes: 2, Snapshots: 50, Templates: 5, CreatesPerSecond: 10, CreatesBurst: 10}
	if tn, err := d.Client.GetTenant(ctx, "plain"); err != nil || tn.EffectiveQuotas != defaults || tn.Quotas != (client.Quotas{}) || tn.Usage == nil {
		t.Errorf("tenant plain: %+v, %v; want effective quotas %+v", tn, err, defaults)
	}
	set := client.Quotas{Sandboxes: 7, CreatesPerSecond: -1}
	if tn, err := d.Client.SetQuotas(ctx, "plain", set); err != nil || tn.Quotas != set || tn.EffectiveQuotas.Sandboxes != 7 || tn.EffectiveQuotas.CreatesPerSecond != -1 || tn.EffectiveQuotas.MemoryMB != 4096 {
		t.Errorf("set quotas of plain: %+v, %v", tn, err)
	}
	if u, err := c.Usage(ctx); err != nil || u.ID != "plain" || u.EffectiveQuotas.Sandboxes != 7 {
		t.Errorf("usage of plain's key: %+v, %v", u, err)
	}
	if ts, err := d.Client.ListTenants(ctx); err != nil || !slices.ContainsFunc(ts, func(x client.Tenant) bool { return x.ID == "plain" }) ||
		!slices.ContainsFunc(ts, func(x client.Tenant) bool { return x.ID == "default" }) {
		t.Errorf("tenants: %+v, %v; want default and plain among them", ts, err)
	}
	for _, path := range []string{"/v1/admin/tenants/plain/keys", "/v1/admin/keys"} {
		resp, body := do(t, d, "GET", path, nil, nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), key.ID) || strings.Contains(string(body), key.Key) {
			t.Errorf("GET %s: %d %s; want the key's id and never the key", path, resp.StatusCode, body)
		}
	}

	for _, r := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/admin/tenants", map[string]string{"id": "mine"}},
		{"GET", "/v1/admin/tenants", nil},
		{"GET", "/v1/admin/tenants/plain", nil},
		{"PUT", "/v1/admin/tenants/plain/quotas", map[string]int{"sandboxes": 100}},
		{"POST", "/v1/admin/tenants/plain/keys", "{}"},
		{"GET", "/v1/admin/tenants/plain/keys", nil},
		{"GET", "/v1/admin/keys", nil},
		{"DELETE", "/v1/admin/keys/" + key.ID, nil},
		{"GET", "/v1/admin/audit", nil},
	} {
		resp, body := do(t, d, r.method, r.path, r.body, bearer(key.Key))
		wantError(t, resp, body, http.StatusForbidden, "permission_denied")
	}
	if tn, err := d.Client.GetTenant(ctx, "plain"); err != nil || tn.Quotas != set {
		t.Errorf("tenant plain after its key's refused calls: %+v, %v", tn, err)
	}

	for _, r := range []struct {
		method, path string
		body         any
		status       int
		code         string
	}{
		{"POST", "/v1/admin/tenants", map[string]string{"id": "Bad/ID"}, 400, "invalid_argument"},
		{"POST", "/v1/admin/tenants", map[string]string{"id": "UPPER"}, 400, "invalid_argument"},
		{"POST", "/v1/admin/tenants", map[string]string{"id": ""}, 400, "invalid_argument"},
		{"POST", "/v1/admin/tenants", `{"id":`, 400, "invalid_argument"},
		{"POST", "/v1/admin/tenants", `{"id":"typo","quota":{}}`, 400, "invalid_argument"},
		{"POST", "/v1/admin/tenants", map[string]string{"id": "plain"}, 409, "already_exists"},
		{"POST", "/v1/admin/tenants", `{"id":"neg-rate","quotas":{"creates_per_second":-2}}`, 400, "invalid_argument"},
		{"PUT", "/v1/admin/tenants/plain/quotas", `{"sandboxes":-2}`, 400, "invalid_argument"},
		{"PUT", "/v1/admin/tenants/plain/quotas", `{"sandboxes":"many"}`, 400, "invalid_argument"},
		{"PUT", "/v1/admin/tenants/no-such/quotas", map[string]int{"sandboxes": 1}, 404, "not_found"},
		{"GET", "/v1/admin/tenants/no-such", nil, 404, "not_found"},
		{"POST", "/v1/admin/tenants/no-such/keys", "{}", 404, "not_found"},
		{"GET", "/v1/admin/tenants/no-such/keys", nil, 404, "not_found"},
		{"DELETE", "/v1/admin/keys/e2b_nosuchk", nil, 404, "not_found"},
	} {
		resp, body := do(t, d, r.method, r.path, r.body, nil)
		wantError(t, resp, body, r.status, r.code)
	}
	for _, hdr := range []map[string]string{{"Authorization": ""}, bearer("e2b_" + harness.RandHex(20))} {
		resp, body := do(t, d, "GET", "/v1/admin/tenants", nil, hdr)
		wantError(t, resp, body, http.StatusUnauthorized, "unauthenticated")
	}
	if _, err := d.Client.GetTenant(ctx, "neg-rate"); !client.IsNotFound(err) {
		t.Errorf("tenant of a refused create: %v, want not found", err)
	}
}
