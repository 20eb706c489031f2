package cluster

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// TestDrain: draining a node (asked through another node) moves its
// running sandboxes: each keeps its id, access token, metadata and network
// policy, a Python process runs on with the state in its memory, and a
// command's output stream, resumed with Last-Event-ID after the move,
// misses nothing. The drained node takes no new sandboxes until it is
// undrained.
func TestDrain(t *testing.T) {
	c := newCluster(t, 5, 0, 3)
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	ctx := harness.Ctx(t, 4*time.Minute)
	var ids []string
	var token string
	policy := &client.Network{Allow: []string{"example.com", "api.example.test"}, Deny: []string{"10.0.0.0/8"}}
	for i := range 2 {
		sb, err := n1.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Metadata: map[string]string{"n": string(rune('a' + i))}, TimeoutSeconds: 600, Network: policy})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
		if i == 0 {
			token = sb.AccessToken
		}
		defer n2.Client.KillSandbox(ctx, sb.ID)
	}
	before, err := n1.Client.GetSandbox(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if before.Network == nil || !slices.Equal(before.Network.Allow, policy.Allow) {
		t.Fatalf("the policy as created: %+v", before.Network)
	}
	// envd's file download through a node's E2B proxy, with a token: the
	// sandbox's own works, another does not (the control).
	download := func(via *harness.Daemon, id, tok, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+via.Addr+"/files?path="+path+"&username=user", nil)
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("X-Access-Token", tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// A counter in a Python process's memory, and a command whose output
	// goes on across the move.
	sh(t, n1, ids[0], `nohup python3 -c '
import os, time
n = 0
while True:
    n += 1
    with open("/tmp/count.new", "w") as f:
        f.write("%d %d" % (os.getpid(), n))
    os.replace("/tmp/count.new", "/tmp/count")
    time.sleep(0.1)
' >/dev/null 2>&1 & sleep 1`)
	counter := func(via *harness.Daemon) (pid, n int) {
		t.Helper()
		out := sh(t, via, ids[0], "cat /tmp/count")
		if _, err := fmt.Sscan(out, &pid, &n); err != nil {
			t.Fatalf("the counter through %s: %q", via.Opts.Name, out)
		}
		return pid, n
	}
	pid0, n0 := counter(n1)
	if status, body := download(n2, ids[0], token, "/tmp/count"); status != http.StatusOK || !strings.HasPrefix(body, strconv.Itoa(pid0)+" ") {
		t.Fatalf("envd download with the sandbox's token through n2, before the move: %d %q", status, body)
	}
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
	if after.Network == nil || !slices.Equal(after.Network.Allow, policy.Allow) || !slices.Equal(after.Network.Deny, policy.Deny) || after.Network.Internet {
		t.Errorf("the network policy after the move: %+v, want %+v", after.Network, policy)
	}
	// The Python process went on counting from where it was: the same
	// process (its pid), with its memory.
	pid1, n1count := counter(n3)
	time.Sleep(500 * time.Millisecond)
	pid2, n2count := counter(n3)
	if pid1 != pid0 || pid2 != pid0 || n1count < n0 || n2count <= n1count {
		t.Errorf("the counter: pid %d at %d before the move; after it pid %d at %d, then pid %d at %d", pid0, n0, pid1, n1count, pid2, n2count)
	}
	// Its access token is the one it had: envd opens to it, through a
	// node other than the one it moved to, and not to another token.
	to := after.Node
	var via *harness.Daemon
	for _, n := range c.nodes {
		if n.Opts.Name != to {
			via = n
		}
	}
	if status, body := download(via, ids[0], token, "/tmp/count"); status != http.StatusOK || !strings.HasPrefix(body, strconv.Itoa(pid0)+" ") {
		t.Errorf("envd download with the sandbox's token through %s after the move to %s: %d %q", via.Opts.Name, to, status, body)
	}
	if status, _ := download(via, ids[0], strings.Repeat("0", len(token)), "/tmp/count"); status == http.StatusOK {
		t.Errorf("envd download with another token after the move: %d", status)
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
