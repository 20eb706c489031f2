package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// Rest tiers, frozen: a running sandbox that nothing reaches for its idle
// freeze delay is frozen by the cgroup freezer (no CPU), shows as running,
// and the next request of any kind thaws it first.

// restIdle is the idle freeze delay these tests give their sandboxes.
const restIdle = 2

// counterCmd starts a background loop that counts into /tmp/count, so a
// test can see a process keep its state across a freeze and go on after
// (once a second: a busier one would keep its sandbox awake, busyCPU).
const counterCmd = `nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 1; done' >/dev/null 2>&1 &
while [ ! -e /tmp/count ]; do sleep 0.05; done`

// waitFrozen waits until sandbox id is frozen at rest, as the API and the
// host's cgroup both say, and fails the test otherwise.
func waitFrozen(t *testing.T, d *harness.Daemon, id string) {
	t.Helper()
	d.WaitRest(t, id, client.RestFrozen, 60*time.Second)
	if frozen, err := harness.SandboxFrozen(id); err != nil || !frozen {
		t.Fatalf("the API says %s is frozen, its cgroup freezer says frozen=%v (%v)", id, frozen, err)
	}
}

// counter reads the background counter (the request wakes the sandbox).
func counter(t *testing.T, d *harness.Daemon, id string) int {
	t.Helper()
	out := strings.TrimSpace(sh(t, d, id, "cat /tmp/count"))
	n, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("counter of %s: %q", id, out)
	}
	return n
}

// counterGoesOn checks that the counter passes from (it runs again).
func counterGoesOn(t *testing.T, d *harness.Daemon, id string, from int) {
	t.Helper()
	if n := counter(t, d, id); n <= from {
		out := sh(t, d, id, "sleep 2.5; cat /tmp/count")
		if n, _ = strconv.Atoi(strings.TrimSpace(out)); n <= from {
			t.Errorf("the counter of %s stays at %d after a wake (was %d): its process did not go on", id, n, from)
		}
	}
}

func TestRestFreezesIdleSandbox(t *testing.T) {
	d := need(t)
	t.Parallel()
	ctx := harness.Ctx(t, 5*time.Minute)
	sb := d.NewSandbox(t, client.CreateSandboxRequest{IdleFreezeSeconds: restIdle})
	if sb.IdleFreezeSeconds != restIdle {
		t.Errorf("created with idle_freeze_seconds %d, the answer says %d", restIdle, sb.IdleFreezeSeconds)
	}
	sh(t, d, sb.ID, counterCmd)
	before := counter(t, d, sb.ID)
	waitFrozen(t, d, sb.ID)

	// Frozen, the sandbox's cgroup uses no CPU at all.
	cpu0, err := harness.SandboxCPU(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	cpu1, err := harness.SandboxCPU(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if used := cpu1.Usage - cpu0.Usage; used != 0 {
		t.Errorf("a frozen sandbox used %s of CPU in a second, want none", used)
	}
	// Listing, reading and sampling it does not wake it.
	if list, err := d.Client.ListAllSandboxes(ctx, client.ListOptions{}); err != nil || !containsID(list, sb.ID) {
		t.Errorf("a frozen sandbox is not listed as running: %v %v", ids(list), err)
	}
	if _, err := d.Client.SandboxMetrics(ctx, sb.ID, client.MetricsOptions{}); err != nil {
		t.Errorf("metrics of a frozen sandbox: %v", err)
	}
	if frozen, _ := harness.SandboxFrozen(sb.ID); !frozen {
		t.Errorf("listing or sampling the metrics of a frozen sandbox woke it")
	}

	// A command thaws it first and answers; the background loop goes on
	// from where it stood.
	if got := sh(t, d, sb.ID, "echo awake"); got != "awake\n" {
		t.Errorf("first command after the freeze said %q", got)
	}
	frozenAt := counter(t, d, sb.ID)
	if frozenAt <= before {
		t.Errorf("the counter did not run before the freeze (%d then %d)", before, frozenAt)
	}
	// Never resting again, it is awake and stays so.
	if got, err := d.Client.SetIdleFreeze(ctx, sb.ID, -1); err != nil || got.IdleFreezeSeconds != -1 {
		t.Fatalf("set idle freeze to never: %+v, %v", got, err)
	}
	if got, err := d.Client.GetSandboxRest(ctx, sb.ID); err != nil || got.Rest != client.RestAwake {
		t.Errorf("after idle freeze never: %+v, %v; want awake", got, err)
	}
	if frozen, _ := harness.SandboxFrozen(sb.ID); frozen {
		t.Errorf("the cgroup of a sandbox that may not rest is frozen")
	}
	counterGoesOn(t, d, sb.ID, frozenAt)
	// Bad input is a 400 naming the field, and changes nothing.
	resp, body := do(t, d, "POST", "/v1/sandboxes/"+sb.ID+"/idle-freeze", `{"idle_freeze_seconds":-5}`, nil)
	wantError(t, resp, body, http.StatusBadRequest, "invalid_argument")
	if !strings.Contains(string(body), "idle_freeze_seconds") {
		t.Errorf("the 400 does not name idle_freeze_seconds: %s", body)
	}
	if got, err := d.Client.GetSandbox(ctx, sb.ID); err != nil || got.IdleFreezeSeconds != -1 {
		t.Errorf("after a refused change: %+v, %v", got, err)
	}
}

func containsID(list []client.Sandbox, id string) bool {
	for _, sb := range list {
		if sb.ID == id && sb.State == client.StateRunning {
			return true
		}
	}
	return false
}

// TestRestStreamKeepsAwake: an open command stream holds its sandbox
// awake past the idle delay; once it ends the sandbox rests.
func TestRestStreamKeepsAwake(t *testing.T) {
	d := need(t)
	t.Parallel()
	ctx := harness.Ctx(t, 5*time.Minute)
	sb := d.NewSandbox(t, client.CreateSandboxRequest{IdleFreezeSeconds: restIdle})
	stream, err := d.Client.RunCommand(ctx, sb.ID, client.CommandRequest{Cmd: "sleep 8; echo done"})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	// Three times the delay (and the freezer's tick) with only the
	// stream open: it never freezes.
	for range 6 {
		time.Sleep(time.Second)
		if frozen, err := harness.SandboxFrozen(sb.ID); err != nil || frozen {
			t.Fatalf("froze while a command stream was open (%v)", err)
		}
	}
	res, err := harness.Collect(stream)
	if err != nil || res.Stdout != "done\n" || res.Exit.Code() != 0 {
		t.Fatalf("the held command: %+v, %v", res, err)
	}
	waitFrozen(t, d, sb.ID)
}

// TestRestPortTrafficWakes: a request to a port of a frozen sandbox
// through the E2B proxy thaws it and is answered by the server in it.
func TestRestPortTrafficWakes(t *testing.T) {
	d := need(t)
	t.Parallel()
	sb := d.NewSandbox(t, client.CreateSandboxRequest{IdleFreezeSeconds: restIdle, Network: &client.Network{PublicPorts: true}})
	sh(t, d, sb.ID, `echo served > /tmp/index.html; nohup python3 -m http.server 8000 --directory /tmp >/dev/null 2>&1 &
for i in $(seq 100); do python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:8000/")' 2>/dev/null && exit 0; sleep 0.1; done; exit 1`)
	waitFrozen(t, d, sb.ID)
	resp, body := do(t, d, "GET", "/index.html", nil, map[string]string{"Authorization": "", "E2b-Sandbox-Id": sb.ID, "E2b-Sandbox-Port": "8000"})
	if resp.StatusCode != http.StatusOK || string(body) != "served\n" {
		t.Fatalf("port traffic to a frozen sandbox: %d %q", resp.StatusCode, body)
	}
	// And an envd request through the E2B proxy, once it rests again.
	waitFrozen(t, d, sb.ID)
	resp, body = do(t, d, "POST", "/process.Process/List", "{}", map[string]string{"Authorization": "",
		"E2b-Sandbox-Id": sb.ID, "E2b-Sandbox-Port": "49983", "X-Access-Token": sb.AccessToken})
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), "{") {
		t.Fatalf("envd request to a frozen sandbox: %d %q", resp.StatusCode, body)
	}
}

// TestRestLifecycleWhileFrozen: fork, disk snapshot, pause, resume and kill
// of a frozen sandbox work (each thaws it first); nothing is left on the
// host.
func TestRestLifecycleWhileFrozen(t *testing.T) {
	d := need(t)
	t.Parallel()
	ctx := harness.Ctx(t, 5*time.Minute)
	sb := d.NewSandbox(t, client.CreateSandboxRequest{IdleFreezeSeconds: restIdle})
	sh(t, d, sb.ID, counterCmd)
	n := counter(t, d, sb.ID)
	waitFrozen(t, d, sb.ID)
	forks, err := d.Client.ForkSandbox(ctx, sb.ID, 1)
	if err != nil || len(forks) != 1 {
		t.Fatalf("fork of a frozen sandbox: %v, %v", forks, err)
	}
	t.Cleanup(func() { d.Client.KillSandbox(harness.Ctx(t, time.Minute), forks[0].ID) })
	counterGoesOn(t, d, forks[0].ID, n)

	waitFrozen(t, d, sb.ID)
	snap, err := d.Client.TakeSnapshot(ctx, sb.ID)
	if err != nil {
		t.Fatalf("disk snapshot of a frozen sandbox: %v", err)
	}
	t.Cleanup(func() { d.Client.DeleteSnapshot(harness.Ctx(t, time.Minute), snap.ID) })

	waitFrozen(t, d, sb.ID)
	if p, err := d.Client.PauseSandbox(ctx, sb.ID); err != nil || p.State != "paused" {
		t.Fatalf("pause of a frozen sandbox: %+v, %v", p, err)
	}
	if r, err := d.Client.ResumeSandbox(ctx, sb.ID, 0); err != nil || r.State != client.StateRunning {
		t.Fatalf("resume: %+v, %v", r, err)
	}
	counterGoesOn(t, d, sb.ID, n)

	waitFrozen(t, d, sb.ID)
	if err := d.Client.KillSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("kill of a frozen sandbox: %v", err)
	}
	if left := d.LeftoversAfter(sb.ID, 20*time.Second); len(left) > 0 {
		t.Errorf("a frozen sandbox killed left on the host: %v", left)
	}
}

// TestRestRestartAdoptsFrozen: spaced killed with -9 while its sandboxes
// rest frozen, then restarted, finds them frozen and keeps them so (no
// mass wake), and each wakes at its next request with its processes.
func TestRestRestartAdoptsFrozen(t *testing.T) {
	need(t)
	t.Parallel()
	d := ownDaemon(t, harness.Options{Name: "rest-restart", CIDR: "10.241.208.0/20", NoPool: true})
	var sbs []*client.Sandbox
	counts := map[string]int{}
	for range 3 {
		sb := d.NewSandbox(t, client.CreateSandboxRequest{TimeoutSeconds: 600, IdleFreezeSeconds: restIdle})
		sh(t, d, sb.ID, counterCmd)
		counts[sb.ID] = counter(t, d, sb.ID)
		sbs = append(sbs, sb)
	}
	for _, sb := range sbs {
		waitFrozen(t, d, sb.ID)
	}
	for i, sb := range sbs {
		d.Kill9()
		if err := d.Restart(); err != nil {
			t.Fatal(err)
		}
		// The ones not yet woken are still frozen, and the API says so.
		for _, later := range sbs[i:] {
			if frozen, err := harness.SandboxFrozen(later.ID); err != nil || !frozen {
				t.Errorf("restart %d: %s is no longer frozen (%v)", i+1, later.ID, err)
			}
			if got, err := d.Client.GetSandboxRest(harness.Ctx(t, 10*time.Second), later.ID); err != nil ||
				got.State != client.StateRunning || got.Rest != client.RestFrozen {
				t.Errorf("restart %d: %s is %+v, %v; want running and frozen", i+1, later.ID, got, err)
			}
		}
		if got := sh(t, d, sb.ID, "echo "+fmt.Sprint(i)); got != fmt.Sprintf("%d\n", i) {
			t.Errorf("after restart %d, %s answered %q", i+1, sb.ID, got)
		}
		counterGoesOn(t, d, sb.ID, counts[sb.ID])
	}
	for _, sb := range sbs {
		if err := d.Client.KillSandbox(harness.Ctx(t, time.Minute), sb.ID); err != nil {
			t.Error(err)
		}
	}
}
