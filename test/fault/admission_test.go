package fault

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// metric reads one sample of spaced's /metrics ("name{labels}"), or -1.
func metric(t *testing.T, d *harness.Daemon, series string) float64 {
	t.Helper()
	text, err := d.Client.Metrics(harness.Ctx(t, 10*time.Second))
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric %s: %q", series, line)
			}
			return f
		}
	}
	return -1
}

// capacityBody is the error body of a refused create, native or E2B.
type capacityBody struct {
	Error *struct {
		Code    string          `json:"code"`
		Message string          `json:"message"`
		Details *capacityDetail `json:"details"`
	} `json:"error"`
	// E2B's body: {"code": 503, "message", "details"}.
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Details *capacityDetail `json:"details"`
}

type capacityDetail struct {
	Resource  string `json:"resource"`
	Scope     string `json:"scope"`
	Unit      string `json:"unit"`
	Budget    int64  `json:"budget"`
	Used      int64  `json:"used"`
	Requested int64  `json:"requested"`
}

// post sends a create by hand (the client keeps no details) and decodes
// the answer.
func post(t *testing.T, d *harness.Daemon, path, body string, header map[string]string) (int, capacityBody, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(harness.Ctx(t, time.Minute), "POST", "http://"+d.Addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var b capacityBody
	json.Unmarshal(raw, &b)
	return resp.StatusCode, b, string(raw)
}

// isCapacity says whether err is the 503 of a node at a budget.
func isCapacity(err error) bool {
	var apiErr *client.APIError
	return errors.As(err, &apiErr) && apiErr.Status == 503 && apiErr.Code == client.CodeNodeAtCapacity
}

// fillUntilRefused creates sandboxes (cold, unless pooled) until the node refuses one,
// and returns them; every error but the refusal fails the test.
func fillUntilRefused(t *testing.T, d *harness.Daemon, pooled bool, max int) ([]*client.Sandbox, error) {
	t.Helper()
	var got []*client.Sandbox
	no := false
	for range max {
		req := client.CreateSandboxRequest{}
		if !pooled {
			req.Pool = &no
		}
		sb, err := d.Client.CreateSandbox(harness.Ctx(t, time.Minute), req)
		if err != nil {
			if !isCapacity(err) {
				t.Fatalf("create %d: %v, want success or 503 node_at_capacity", len(got)+1, err)
			}
			return got, err
		}
		got = append(got, sb)
	}
	t.Fatalf("%d creates all succeeded on a node with a small memory budget", max)
	return nil, nil
}

// TestAdmissionMemoryBudget: a node at its memory budget refuses creates
// with 503 and a body that says which budget, through the native and the
// E2B API, leaves nothing of them behind, keeps its running sandboxes
// working, counts what a sandbox really takes (one that grows takes more of
// the budget), and admits creates again once a sandbox is killed.
func TestAdmissionMemoryBudget(t *testing.T) {
	const budgetMB = 200
	d := ownDaemon(t, harness.Options{Name: "admission", CIDR: "10.246.128.0/20",
		Env: []string{"SPACE_NODE_MEMORY_MB=" + strconv.Itoa(budgetMB)}})
	if got := metric(t, d, `space_node_budget{resource="memory"}`); got != budgetMB<<20 {
		t.Fatalf("space_node_budget memory = %v, want %d", got, budgetMB<<20)
	}

	// A sandbox that holds 48 MiB more than an idle one: what it really
	// takes counts, not its limit nor an idle sandbox's size.
	big := d.NewSandbox(t, client.CreateSandboxRequest{})
	base := metric(t, d, `space_node_used{resource="memory"}`)
	if _, err := d.Client.StartBackground(harness.Ctx(t, time.Minute), big.ID, client.CommandRequest{
		// bytes * n writes every page (a bytearray's zeroed pages would
		// not be resident).
		Cmd: `python3 -c "import time; held = b'h' * (48 << 20); time.sleep(3600)"`,
	}); err != nil {
		t.Fatal(err)
	}
	if !harness.WaitFor(10*time.Second, func() bool {
		return metric(t, d, `space_node_used{resource="memory"}`) >= base+40<<20
	}) {
		t.Fatalf("space_node_used memory stayed near %v after a sandbox took 48 MiB more", base)
	}

	got, err := fillUntilRefused(t, d, false, 40)
	t.Cleanup(func() {
		for _, sb := range got {
			d.Client.KillSandbox(harness.Ctx(t, 30*time.Second), sb.ID)
		}
	})
	t.Logf("%d sandboxes and the big one fit in %d MiB; refused: %v", len(got), budgetMB, err)
	if len(got) < 2 {
		t.Fatalf("only %d idle sandboxes fit next to the big one in %d MiB", len(got), budgetMB)
	}

	// The refusal says which budget, through both APIs.
	status, body, raw := post(t, d, "/v1/sandboxes", `{"pool": false}`, map[string]string{"Authorization": "Bearer " + d.APIKey})
	if status != 503 || body.Error == nil || body.Error.Code != "node_at_capacity" || body.Error.Details == nil {
		t.Fatalf("native create at the budget: %d %s", status, raw)
	}
	if det := body.Error.Details; det.Resource != "memory" || det.Scope != "node" || det.Unit != "MiB" || det.Budget != budgetMB ||
		det.Used+det.Requested <= budgetMB || det.Requested <= 0 || !strings.Contains(body.Error.Message, "memory budget") {
		t.Errorf("native refusal: %s", raw)
	}
	status, body, raw = post(t, d, "/sandboxes", `{"templateID": "base"}`, map[string]string{"X-API-Key": d.APIKey})
	if status != 503 || body.Code != 503 || body.Details == nil || body.Details.Resource != "memory" || body.Details.Budget != budgetMB || body.Message == "" {
		t.Errorf("E2B create at the budget: %d %s", status, raw)
	}
	if n := metric(t, d, `space_admission_refusals_total{resource="memory",scope="node"}`); n < 3 {
		t.Errorf("space_admission_refusals_total memory = %v, want at least 3", n)
	}

	// Nothing of the refused creates is left: the host holds exactly the
	// sandboxes the API lists.
	live := append([]*client.Sandbox{big}, got...)
	entries, _ := os.ReadDir(filepath.Join(d.DataDir, "sandboxes"))
	if len(entries) != len(live) {
		t.Errorf("%d sandbox directories on the host, want %d", len(entries), len(live))
	}
	page, err := d.Client.ListSandboxes(harness.Ctx(t, 10*time.Second), client.ListOptions{States: []string{"creating", "running"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Sandboxes) != len(live) {
		t.Errorf("%d sandboxes listed, want %d", len(page.Sandboxes), len(live))
	}

	// The sandboxes already running keep working, the big one included.
	for _, sb := range live {
		if out := run(t, d, sb.ID, "echo alive"); strings.TrimSpace(out) != "alive" {
			t.Errorf("%s: %q", sb.ID, out)
		}
	}
	if out := run(t, d, big.ID, "grep -l '[h]eld' /proc/[0-9]*/cmdline >/dev/null 2>&1 && echo holding"); strings.TrimSpace(out) != "holding" {
		t.Errorf("the big sandbox's process is gone: %q", out)
	}

	// Killing the big one frees what it really took: creates work again.
	if err := d.Client.KillSandbox(harness.Ctx(t, 30*time.Second), big.ID); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		sb, err := d.Client.CreateSandbox(harness.Ctx(t, time.Minute), client.CreateSandboxRequest{})
		if err != nil {
			t.Fatalf("create %d after the kill: %v", i+1, err)
		}
		got = append(got, sb)
		run(t, d, sb.ID, "true")
	}
}

// TestAdmissionPoolShrinksFirst: on a node at its memory budget the warm
// pool gives its idle sandboxes up before a caller is refused; a create the
// pool can serve is still served from it (the sandbox exists already), and
// the pool does not refill into the room callers need.
func TestAdmissionPoolShrinksFirst(t *testing.T) {
	const budgetMB = 200
	d := ownDaemon(t, harness.Options{Name: "admission-pool", CIDR: "10.246.144.0/20", Pool: "base=3:3",
		Env: []string{"SPACE_NODE_MEMORY_MB=" + strconv.Itoa(budgetMB)}})
	ready := func() float64 { return metric(t, d, `space_pool_ready{template="base"}`) }
	released := func() float64 { return max(0, metric(t, d, `space_pool_released_total{template="base"}`)) }
	if !harness.WaitFor(60*time.Second, func() bool { return ready() == 3 }) {
		t.Fatalf("the pool did not fill to 3 (has %v)", ready())
	}

	var got []*client.Sandbox
	t.Cleanup(func() {
		for _, sb := range got {
			d.Client.KillSandbox(harness.Ctx(t, 30*time.Second), sb.ID)
		}
	})
	no := false
	// Cold creates until the pool first gives a sandbox up for one.
	for released() == 0 {
		if len(got) == 20 {
			t.Fatalf("20 cold creates next to a pool of 3 in %d MiB, and the pool gave nothing up", budgetMB)
		}
		sb, err := d.Client.CreateSandbox(harness.Ctx(t, time.Minute), client.CreateSandboxRequest{Pool: &no})
		if err != nil {
			t.Fatalf("cold create %d while the pool holds %v: %v (the pool must shrink first)", len(got)+1, ready(), err)
		}
		got = append(got, sb)
	}
	// At the budget, a create the pool serves claims a pooled sandbox.
	before, rel := ready(), released()
	if before < 1 {
		t.Fatalf("the pool is empty after giving up %v sandboxes", rel)
	}
	sb, err := d.Client.CreateSandbox(harness.Ctx(t, time.Minute), client.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("a create the pool can serve, at the budget: %v", err)
	}
	got = append(got, sb)
	if r := released(); r != rel {
		t.Errorf("a pooled create gave up %v pool sandboxes", r-rel)
	}

	// More cold creates: the pool gives up the rest, then callers are
	// refused, and not before.
	more, err := fillUntilRefused(t, d, false, 20)
	got = append(got, more...)
	if r := ready(); r != 0 {
		t.Errorf("refused with %v sandboxes still in the pool", r)
	}
	if r := released(); r+1 < 3 {
		t.Errorf("the pool gave up %v sandboxes (and one was claimed), want all of its 3", r)
	}
	t.Logf("%d sandboxes for callers; the pool gave up %v; refused: %v", len(got), released(), err)
	for _, sb := range got {
		run(t, d, sb.ID, "true")
	}
	// The pool stays below the budget's pool share: no refill into the room
	// callers hold.
	time.Sleep(6 * time.Second)
	if r := ready(); r != 0 {
		t.Errorf("the pool refilled to %v on a node at its budget", r)
	}
	// And it says why it stays empty.
	pools, err := d.Client.Pools(harness.Ctx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(pools) != 1 || !strings.Contains(pools[0].Held, "memory") {
		t.Errorf("the pool at the node's budget, as the admin API shows it: %+v, want it held for memory", pools)
	}
}

// TestAdmissionHibernatesRestingFirst: on a node at its memory budget, a
// sandbox frozen at rest is hibernated early (its own delay is an hour) to
// make room before a create is refused; a hibernated sandbox whose wake
// does not fit is refused with the budget's 503 and stays hibernated with
// its processes; once room is made, its next request wakes it.
func TestAdmissionHibernatesRestingFirst(t *testing.T) {
	const budgetMB = 200
	d := ownDaemon(t, harness.Options{Name: "admission-hibernate", CIDR: "10.246.160.0/20", NoPool: true,
		Env: []string{"SPACE_NODE_MEMORY_MB=" + strconv.Itoa(budgetMB)}})
	resting := d.NewSandbox(t, client.CreateSandboxRequest{IdleFreezeSeconds: 1, IdleHibernateSeconds: 3600})
	run(t, d, resting.ID, `nohup sh -c 'echo $$ > /tmp/loop.pid; while :; do sleep 1; done' >/dev/null 2>&1 &
while [ ! -s /tmp/loop.pid ]; do sleep 0.05; done`)
	pid := strings.TrimSpace(run(t, d, resting.ID, "cat /tmp/loop.pid"))
	d.WaitRest(t, resting.ID, client.RestFrozen, 60*time.Second)

	// Awake sandboxes until the node refuses one: the resting one was
	// hibernated first, so more fit than beside it frozen.
	var awake []*client.Sandbox
	t.Cleanup(func() {
		for _, sb := range awake {
			d.Client.KillSandbox(harness.Ctx(t, 30*time.Second), sb.ID)
		}
	})
	no := false
	for i := 0; ; i++ {
		if i == 40 {
			t.Fatalf("40 creates all succeeded on a node with a %d MiB budget", budgetMB)
		}
		sb, err := d.Client.CreateSandbox(harness.Ctx(t, time.Minute), client.CreateSandboxRequest{Pool: &no, IdleFreezeSeconds: -1})
		if err != nil {
			if !isCapacity(err) {
				t.Fatalf("create %d: %v, want success or 503 node_at_capacity", i+1, err)
			}
			break
		}
		awake = append(awake, sb)
	}
	got, err := d.Client.GetSandboxRest(harness.Ctx(t, 10*time.Second), resting.ID)
	if err != nil || got.State != client.StateRunning || got.Rest != client.RestHibernated {
		t.Fatalf("after the node filled up the resting sandbox is %+v, %v; want running and hibernated", got, err)
	}
	if n := metric(t, d, "space_sandbox_hibernate_seconds_count"); n < 1 {
		t.Errorf("space_sandbox_hibernate_seconds_count = %v, want at least 1", n)
	}
	if len(awake) < 2 {
		t.Fatalf("only %d sandboxes fit in %d MiB", len(awake), budgetMB)
	}

	// Its wake does not fit: the budget's refusal, and it stays
	// hibernated.
	_, err = tryRun(harness.Ctx(t, time.Minute), d, resting.ID, "echo woken")
	if err == nil || !strings.Contains(err.Error(), "memory budget") {
		t.Fatalf("a request to a hibernated sandbox on a full node: %v; want the memory budget's refusal", err)
	}
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 503 {
		t.Errorf("a refused wake answered %v, want 503", err)
	}
	if got, err := d.Client.GetSandboxRest(harness.Ctx(t, 10*time.Second), resting.ID); err != nil || got.Rest != client.RestHibernated {
		t.Errorf("after a refused wake the sandbox is %+v, %v; want still hibernated", got, err)
	}

	// Room made, its next request wakes it, with its process.
	if err := d.Client.KillSandbox(harness.Ctx(t, 30*time.Second), awake[0].ID); err != nil {
		t.Fatal(err)
	}
	awake = awake[1:]
	if out := run(t, d, resting.ID, "kill -0 "+pid+" && echo alive"); strings.TrimSpace(out) != "alive" {
		t.Errorf("after its wake the resting sandbox's loop (pid %s) is gone: %q", pid, out)
	}
}
