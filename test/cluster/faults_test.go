package cluster

import (
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// lease is the faults tests' node lease: short, so a lost node is found
// within seconds.
const lease = 3 * time.Second

// waitState polls sandbox id through d until it is in state want.
func waitState(t *testing.T, d *harness.Daemon, id, want string, within time.Duration) {
	t.Helper()
	var last string
	if !harness.WaitFor(within, func() bool {
		sb, err := d.Client.GetSandbox(harness.Ctx(t, 5*time.Second), id)
		if err != nil {
			last = err.Error()
			return false
		}
		last = string(sb.State) + " " + sb.Reason
		return string(sb.State) == want
	}) {
		t.Fatalf("%s through %s: %s after %s, want %s", id, d.Opts.Name, last, within, want)
	}
}

// TestNodeLoss: a node killed with SIGKILL has its sandboxes reported lost
// by the others within its lease, and the others' sandboxes are untouched;
// when it comes back it does not run what the cluster gave up. A node that
// stalls past its lease (SIGSTOP) finds out when it wakes and ends its
// given-up sandboxes itself.
func TestNodeLoss(t *testing.T) {
	c := newCluster(t, 2, lease, 2)
	n1, n2 := c.nodes[0], c.nodes[1]
	ctx := harness.Ctx(t, 3*time.Minute)
	keep, err := n1.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer n1.Client.KillSandbox(ctx, keep.ID)
	lost, err := n2.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}

	// Reported lost within the lease: the lease lapses at most a lease
	// after the kill (a renewal every third of it) and at least two
	// thirds of one after, and the others look every half lease. What is
	// asserted is measured: the time from the kill to the first answer
	// that says lost, polled every 50 ms.
	killed := time.Now()
	n2.Kill9()
	var took time.Duration
	for {
		sb, err := n1.Client.GetSandbox(harness.Ctx(t, 5*time.Second), lost.ID)
		if err == nil && sb.State == "lost" {
			took = time.Since(killed)
			break
		}
		if time.Since(killed) > 4*lease {
			t.Fatalf("%s not reported lost %s after its node's kill (lease %s): %+v, %v", lost.ID, 4*lease, lease, sb, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("reported lost %s after the kill (lease %s)", took.Round(10*time.Millisecond), lease)
	if low, high := 2*lease/3, lease+lease/2+time.Second; took < low || took > high {
		t.Errorf("reported lost %s after the kill: want between %s (the lease cannot have lapsed before) and %s (a lease, a look every half lease, a second of polling and scheduling)",
			took.Round(10*time.Millisecond), low, high)
	}
	if len(harness.RunscProcs(lost.ID)) == 0 {
		t.Fatal("the killed node's sandbox processes are gone already: the check of its return proves nothing")
	}
	if out := sh(t, n1, keep.ID, "echo still-here"); out != "still-here\n" {
		t.Fatalf("the other node's sandbox: %q", out)
	}

	if err := n2.Restart(); err != nil {
		t.Fatal(err)
	}
	if !harness.WaitFor(20*time.Second, func() bool { return len(n2.Leftovers(lost.ID)) == 0 }) {
		t.Errorf("the returned node still runs the sandbox the cluster gave up: %v", n2.Leftovers(lost.ID))
	}
	waitState(t, n2, lost.ID, "lost", time.Second)

	// A stall past the lease: the node wakes, learns it was given up,
	// and ends the sandbox itself.
	stalled, err := n2.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(n2.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(t, n1, stalled.ID, "lost", 4*lease)
	if err := syscall.Kill(n2.Pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if !harness.WaitFor(4*lease, func() bool { return len(n2.Leftovers(stalled.ID)) == 0 }) {
		t.Errorf("the node that woke still runs the sandbox the cluster gave up: %v", n2.Leftovers(stalled.ID))
	}
	// Its writes to the given-up record are refused: it stays lost.
	if _, err := n2.Client.SetTimeout(ctx, stalled.ID, 600); err == nil {
		t.Error("the woken node extended a sandbox the cluster gave up")
	}
	waitState(t, n1, stalled.ID, "lost", time.Second)
	// And it serves on.
	sb, err := n2.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("create on the woken node: %v", err)
	}
	n2.Client.KillSandbox(ctx, sb.ID)
}

// TestCatalogRestart: with PostgreSQL stopped while traffic runs
// (commands through the sandbox's own node and through another, creates),
// what needs the catalog answers 503 at once and a node's own sandboxes
// keep working; once it is back (longer away than a lease), everything
// works again without a restart of spaced, nothing was given up, and
// every create that answered success runs.
func TestCatalogRestart(t *testing.T) {
	c := newCluster(t, 3, lease, 2)
	n1, n2 := c.nodes[0], c.nodes[1]
	ctx := harness.Ctx(t, 4*time.Minute)
	sb, err := n1.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer n1.Client.KillSandbox(ctx, sb.ID)
	sh(t, n2, sb.ID, "echo before > /tmp/state")

	// Traffic until stop: each loop counts what it saw; an answer that is
	// neither a success nor a 503 is an error.
	var (
		mu      sync.Mutex
		seen    = map[string]map[string]int{} // loop -> "ok" / "503" -> count
		created []string
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	note := func(loop string, err error) {
		mu.Lock()
		defer mu.Unlock()
		if seen[loop] == nil {
			seen[loop] = map[string]int{}
		}
		switch {
		case err == nil:
			seen[loop]["ok"]++
		case client.IsUnavailable(err):
			seen[loop]["503"]++
		default:
			seen[loop]["other"]++
			t.Errorf("%s: %v (want a success or a clear 503)", loop, err)
		}
	}
	loop := func(name string, every time.Duration, op func() error) {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(every):
				}
				note(name, op())
			}
		})
	}
	exec := func(via *harness.Daemon) func() error {
		return func() error {
			r, err := via.Exec(harness.Ctx(t, 30*time.Second), sb.ID, client.CommandRequest{Cmd: "cat /tmp/state"})
			if err == nil && (r.Exit == nil || r.Exit.Code() != 0 || !strings.HasPrefix(r.Stdout, "before")) {
				err = fmt.Errorf("exit %+v, stdout %q", r.Exit, r.Stdout)
			}
			return err
		}
	}
	loop("exec through its node", 100*time.Millisecond, exec(n1))
	loop("exec through the other node", 100*time.Millisecond, exec(n2))
	loop("create through the other node", 300*time.Millisecond, func() error {
		got, err := n2.Client.CreateSandbox(harness.Ctx(t, 30*time.Second), client.CreateSandboxRequest{TimeoutSeconds: 300})
		if err == nil {
			mu.Lock()
			created = append(created, got.ID)
			mu.Unlock()
		}
		return err
	})
	count := func(loop, what string) int {
		mu.Lock()
		defer mu.Unlock()
		return seen[loop][what]
	}
	if !harness.WaitFor(30*time.Second, func() bool { return count("create through the other node", "ok") >= 2 }) {
		t.Fatal("no creates succeed before the outage")
	}

	c.pg.Stop(t)
	down := time.Now()
	_, err = n2.Client.CreateSandbox(harness.Ctx(t, 30*time.Second), client.CreateSandboxRequest{})
	if !client.IsUnavailable(err) {
		t.Fatalf("create with the catalog down: %v, want 503", err)
	}
	t.Logf("create refused after %s: %v", time.Since(down).Round(time.Millisecond), err)
	ownBefore := count("exec through its node", "ok")
	time.Sleep(2 * lease) // away longer than a lease
	if got := count("exec through its node", "ok"); got <= ownBefore {
		t.Errorf("the node's own sandbox did not answer commands with the catalog down (%d before, %d after)", ownBefore, got)
	}
	if count("exec through the other node", "503") == 0 || count("create through the other node", "503") == 0 {
		t.Errorf("with the catalog down, what needs it never answered 503: %v", seen)
	}

	c.pg.Restart(t)
	back := time.Now()
	createsBefore := count("create through the other node", "ok")
	othersBefore := count("exec through the other node", "ok")
	if !harness.WaitFor(30*time.Second, func() bool {
		return count("create through the other node", "ok") > createsBefore+1 && count("exec through the other node", "ok") > othersBefore+5
	}) {
		t.Fatalf("traffic after the catalog came back: %v", seen)
	}
	t.Logf("service back %s after the restart", time.Since(back).Round(100*time.Millisecond))
	close(stop)
	wg.Wait()
	t.Logf("traffic: %v", seen)
	if n := count("exec through its node", "503") + count("exec through its node", "other"); n > 0 {
		t.Errorf("the node's own sandbox failed %d commands", n)
	}

	// Nothing was given up: the sandbox runs on where it was, through
	// either node, for longer than a lease, and every create that
	// answered success runs.
	for range 3 {
		time.Sleep(lease / 2)
		if out := sh(t, n2, sb.ID, "cat /tmp/state"); !strings.HasPrefix(out, "before") {
			t.Fatalf("after the catalog came back: %q", out)
		}
	}
	if state, node := nodeOf(t, n2, sb.ID); state != "running" || node != "n1" {
		t.Errorf("after the outage: %s on %q", state, node)
	}
	running, err := n1.Client.ListAllSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, r := range running {
		listed[r.ID] = true
	}
	for _, id := range created {
		if !listed[id] {
			t.Errorf("sandbox %s, whose create answered success, does not run after the outage", id)
		}
		n2.Client.KillSandbox(ctx, id)
	}
	if len(running) != len(created)+1 {
		t.Errorf("%d sandboxes run after the outage, want %d (the first and the %d created)", len(running), len(created)+1, len(created))
	}
}
