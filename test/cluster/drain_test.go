package cluster

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// TestDrain: draining a node (asked through another node) moves its
// running sandboxes: each keeps its id, token, metadata and policy, its
// processes run on with their memory, and a command's output stream,
// resumed with Last-Event-ID after the move, misses nothing. The drained
// node takes no new sandboxes until it is undrained.
func TestDrain(t *testing.T) {
	c := newCluster(t, 5, 0, 3)
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	ctx := harness.Ctx(t, 4*time.Minute)
	var ids []string
	for i := range 2 {
		sb, err := n1.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Metadata: map[string]string{"n": string(rune('a' + i))}, TimeoutSeconds: 600})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
		defer n2.Client.KillSandbox(ctx, sb.ID)
	}
	before, err := n1.Client.GetSandbox(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	// A counter in a shell's memory, and a command whose output goes on
	// across the move.
	sh(t, n1, ids[0], "nohup sh -c 'n=0; while :; do n=$((n+1)); echo $n > /tmp/count; sleep 0.1; done' >/dev/null 2>&1 & sleep 0.3")
	cmd, err := n1.Client.StartBackground(ctx, ids[0], client.CommandRequest{Cmd: "for i in $(seq 1 40); do echo tick-$i; sleep 0.1; done"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	ev, err := n1.Client.CommandEvents(ctx, ids[0], cmd.PID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var last uint64
	for !strings.Contains(out.String(), "tick-3\n") {
		e, err := ev.Next()
		if err != nil {
			t.Fatal(err)
		}
		if e.Type == client.EventStdout {
			out.Write(e.Data)
			last = e.ID
		}
	}
	ev.Close()

	report, err := n2.Client.DrainNode(ctx, "n1")
	if err != nil {
		t.Fatalf("drain n1 through n2: %v", err)
	}
	if len(report.Moves) != 2 {
		t.Fatalf("moves: %+v", report.Moves)
	}
	targets := map[string]bool{}
	for _, m := range report.Moves {
		if m.Error != "" {
			t.Fatalf("move of %s: %s", m.Sandbox, m.Error)
		}
		targets[m.To] = true
		t.Logf("moved %s to %s: pause %d ms, resume %d ms, pause to running %d ms", m.Sandbox, m.To, m.PauseMS, m.ResumeMS, m.TotalMS)
	}
	if len(targets) != 2 {
		t.Errorf("both sandboxes went to %v: the least loaded node first should spread them", targets)
	}

	after, err := n3.Client.GetSandbox(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if after.State != "running" || after.Node == "n1" || after.Metadata["n"] != "a" || !after.ExpiresAt.After(time.Now().Add(8*time.Minute)) {
		t.Errorf("after the move: %s on %s, metadata %v, expires %s", after.State, after.Node, after.Metadata, after.ExpiresAt)
	}
	if after.Template != before.Template || after.CreatedAt != before.CreatedAt {
		t.Errorf("template %s created %s, was %s created %s", after.Template, after.CreatedAt, before.Template, before.CreatedAt)
	}
	// The counter went on from where it was.
	n := sh(t, n3, ids[0], "a=$(cat /tmp/count); sleep 0.5; b=$(cat /tmp/count); echo $a $b")
	var a, b int
	if _, err := fmt.Sscan(n, &a, &b); err != nil || b <= a || a < 3 {
		t.Errorf("the counter after the move: %q", n)
	}
	// The output stream, resumed after the move through another node.
	ev, err = n3.Client.CommandEvents(ctx, ids[0], cmd.PID, last)
	if err != nil {
		t.Fatal(err)
	}
	for {
		e, err := ev.Next()
		if err != nil {
			t.Fatalf("resumed stream: %v", err)
		}
		if e.Type == client.EventStdout {
			out.Write(e.Data)
		}
		if e.Type == client.EventEnd {
			break
		}
	}
	ev.Close()
	var want strings.Builder
	for i := 1; i <= 40; i++ {
		want.WriteString("tick-" + strconv.Itoa(i) + "\n")
	}
	if out.String() != want.String() {
		t.Errorf("output across the move:\n%q\nwant\n%q", out.String(), want.String())
	}

	// Drained, n1 takes no new sandboxes: a create it receives is placed
	// on another node. Undrained, it takes them again.
	if sb, err := n1.Client.CreateSandbox(ctx, client.CreateSandboxRequest{}); err != nil || sb.Node == "n1" {
		t.Errorf("create through the drained node: %+v, %v; want it placed elsewhere", sb, err)
	} else {
		n1.Client.KillSandbox(ctx, sb.ID)
	}
	nodes, err := n3.Client.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range nodes {
		if nd.Draining != (nd.ID == "n1") {
			t.Errorf("node %s draining: %v", nd.ID, nd.Draining)
		}
	}
	if err := n3.Client.UndrainNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // placement's view of the nodes is a second old
	sb, err := n1.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil || sb.Node != "n1" {
		t.Fatalf("create after undrain: %+v, %v; want it on n1", sb, err)
	}
	n1.Client.KillSandbox(ctx, sb.ID)
}
