package cluster

import (
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// TestPlacement: creates sent to a full node go to the next one (the full
// node refuses with node_at_capacity and passes the create on), and every
// create answers a sandbox that runs where it says.
func TestPlacement(t *testing.T) {
	// n1 holds one sandbox at most.
	c := newClusterWith(t, 7, 0, 2, func(i int) []string {
		if i == 0 {
			return []string{"SPACE_NODE_MAX_SANDBOXES=1"}
		}
		return nil
	})
	n1, n2 := c.nodes[0], c.nodes[1]
	ctx := harness.Ctx(t, 2*time.Minute)
	var nodes []string
	for range 3 {
		sb, err := n1.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
		if err != nil {
			t.Fatalf("create through the full node: %v", err)
		}
		defer n1.Client.KillSandbox(ctx, sb.ID)
		nodes = append(nodes, sb.Node)
		if out := sh(t, n2, sb.ID, "echo here"); out != "here\n" {
			t.Fatalf("the placed sandbox: %q", out)
		}
	}
	if nodes[0] != "n1" || nodes[1] != "n2" || nodes[2] != "n2" {
		t.Errorf("creates through n1 (room for one) ran on %v, want [n1 n2 n2]", nodes)
	}
}

// TestPlacementPools: a create goes to the node with a ready warm sandbox
// of its template (and takes that sandbox) rather than stay where it
// landed; with no pool anywhere, creates go to the least loaded node, so
// that they spread.
func TestPlacementPools(t *testing.T) {
	// n2 keeps one warm base sandbox, n1 none; each holds four at most,
	// so one sandbox is a step of load (placement counts tenths). Leases
	// of 6 s: nodes report their pools and load every 2 s.
	c := newClusterWith(t, 8, 6*time.Second, 2, func(i int) []string {
		env := []string{"SPACE_NODE_MAX_SANDBOXES=4"}
		if i == 1 {
			env = append(env, "SPACE_POOL=base=1:1")
		}
		return env
	})
	n1, n2 := c.nodes[0], c.nodes[1]
	ctx := harness.Ctx(t, 3*time.Minute)
	create := func(via *harness.Daemon) string {
		t.Helper()
		sb, err := via.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
		if err != nil {
			t.Fatalf("create through %s: %v", via.Opts.Name, err)
		}
		t.Cleanup(func() { n1.Client.KillSandbox(harness.Ctx(t, time.Minute), sb.ID) })
		return sb.Node
	}

	poolReady(t, n2, "base")
	seen(t, n1, func(ns map[string]client.Node) bool { return ns["n2"].Info.Pools["base"] > 0 })
	const misses = `space_pool_misses_total{template="base"}`
	missed := metric(t, n2, misses)
	if node := create(n1); node != "n2" {
		t.Fatalf("a create through n1 ran on %s, not on n2 with its ready pool sandbox", node)
	}
	if n := metric(t, n2, misses) - missed; n != 0 {
		t.Errorf("the create on n2 missed its pool %.0f times", n)
	}

	// No pool any more: by load, through n2 each time (which keeps a
	// create only when no node is less loaded). The pool is emptied once
	// its refill is done: a refill in flight lands in the pool whatever
	// its size became meanwhile.
	poolReady(t, n2, "base")
	if _, err := n2.Client.SetPool(ctx, "base", 0, 0); err != nil {
		t.Fatal(err)
	}
	held := map[string]int{"n1": 0, "n2": 1}
	for i, want := range []string{"n1", "n2", "n1"} {
		seen(t, n2, func(ns map[string]client.Node) bool {
			return ns["n2"].Info.Pools["base"] == 0 && ns["n1"].Info.Sandboxes == held["n1"] && ns["n2"].Info.Sandboxes == held["n2"]
		})
		node := create(n2)
		if node != want {
			t.Fatalf("create %d through n2, with n1 holding %d and n2 %d of 4, ran on %s, want %s (the least loaded; n2 on a tie)", i+1, held["n1"], held["n2"], node, want)
		}
		held[node]++
	}
}

// seen waits until the nodes as d's catalog reports them satisfy ok, and
// then for placement's view of them (a second old at most) to catch up.
func seen(t *testing.T, d *harness.Daemon, ok func(map[string]client.Node) bool) {
	t.Helper()
	ctx := harness.Ctx(t, time.Minute)
	for {
		ns, err := d.Client.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		byID := map[string]client.Node{}
		for _, n := range ns {
			byID[n.ID] = n
		}
		if ok(byID) {
			time.Sleep(1100 * time.Millisecond) // placement's node list is cached for a second
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the catalog never showed the nodes as wanted: %+v", ns)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
