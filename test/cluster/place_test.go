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
