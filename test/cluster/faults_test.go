package cluster

import (
	"strings"
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
		last = sb.State + " " + sb.Reason
		return sb.State == want
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

	killed := time.Now()
	n2.Kill9()
	waitState(t, n1, lost.ID, "lost", 4*lease)
	t.Logf("reported lost %s after the kill (lease %s)", time.Since(killed).Round(100*time.Millisecond), lease)
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

// TestCatalogRestart: with PostgreSQL stopped, what needs the catalog
// answers 503 at once and a node's own sandboxes keep working; once it is
// back (longer away than a lease), everything works again without a
// restart of spaced, and nothing was given up.
func TestCatalogRestart(t *testing.T) {
	c := newCluster(t, 3, lease, 2)
	n1, n2 := c.nodes[0], c.nodes[1]
	ctx := harness.Ctx(t, 3*time.Minute)
	sb, err := n1.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer n1.Client.KillSandbox(ctx, sb.ID)
	sh(t, n2, sb.ID, "echo before > /tmp/state")

	c.pg.Stop(t)
	start := time.Now()
	_, err = n2.Client.CreateSandbox(harness.Ctx(t, 30*time.Second), client.CreateSandboxRequest{})
	if !client.IsUnavailable(err) {
		t.Fatalf("create with the catalog down: %v, want 503", err)
	}
	t.Logf("create refused after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if out := sh(t, n1, sb.ID, "cat /tmp/state"); out != "before\n" {
		t.Errorf("the node's own sandbox with the catalog down: %q", out)
	}
	_, err = n2.Client.Download(harness.Ctx(t, 30*time.Second), sb.ID, "/tmp/state")
	if !client.IsUnavailable(err) {
		t.Errorf("a request for another node's sandbox with the catalog down: %v, want 503", err)
	}
	time.Sleep(2 * lease) // away longer than a lease

	c.pg.Restart(t)
	var created *client.Sandbox
	if !harness.WaitFor(30*time.Second, func() bool {
		created, err = n2.Client.CreateSandbox(harness.Ctx(t, 30*time.Second), client.CreateSandboxRequest{})
		return err == nil
	}) {
		t.Fatalf("creates after the catalog came back: %v", err)
	}
	n2.Client.KillSandbox(ctx, created.ID)
	// Nothing was given up: the sandbox runs on where it was, through
	// either node, for longer than a lease.
	for range 3 {
		time.Sleep(lease / 2)
		if out := sh(t, n2, sb.ID, "cat /tmp/state"); !strings.HasPrefix(out, "before") {
			t.Fatalf("after the catalog came back: %q", out)
		}
	}
	if state, node := nodeOf(t, n2, sb.ID); state != "running" || node != "n1" {
		t.Errorf("after the outage: %s on %q", state, node)
	}
}
