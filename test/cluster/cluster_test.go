package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// TestEveryRequestThroughAnotherNode: a sandbox created on one node is
// driven entirely through the others: details, commands and their event
// streams, files, a terminal, the E2B sandbox proxy, listing, and the kill.
func TestEveryRequestThroughAnotherNode(t *testing.T) {
	c := newCluster(t, 0, 0, 3)
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	ctx := harness.Ctx(t, 2*time.Minute)

	var onEach []string
	for _, n := range c.nodes {
		sb, err := n.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
		if err != nil {
			t.Fatalf("create on %s: %v", n.Opts.Name, err)
		}
		onEach = append(onEach, sb.ID)
		if _, node := nodeOf(t, n, sb.ID); node != n.Opts.Name {
			t.Fatalf("a create on %s runs on %q", n.Opts.Name, node)
		}
	}
	id := onEach[0]

	// Details and the list, from every node.
	for _, n := range c.nodes {
		if state, node := nodeOf(t, n, id); state != "running" || node != "n1" {
			t.Errorf("through %s: %s on %q", n.Opts.Name, state, node)
		}
		all, err := n.Client.ListAllSandboxes(ctx, client.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 3 {
			t.Errorf("%s lists %d sandboxes, want the cluster's 3", n.Opts.Name, len(all))
		}
	}

	// A command and its output stream; files both ways.
	if out := sh(t, n2, id, "echo through-$((6*7)) > /tmp/mark; cat /tmp/mark"); out != "through-42\n" {
		t.Fatalf("command through n2: %q", out)
	}
	if _, err := n3.Client.Upload(ctx, id, "/home/user/up.txt", strings.NewReader("uploaded via n3")); err != nil {
		t.Fatal(err)
	}
	rc, err := n2.Client.Download(ctx, id, "/home/user/up.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "uploaded via n3" {
		t.Fatalf("download through n2: %q", got)
	}

	// A background command, and its event stream resumed after the first
	// event through yet another node (Last-Event-ID across forwards).
	cmd, err := n2.Client.StartBackground(ctx, id, client.CommandRequest{Cmd: "for i in 1 2 3; do echo line-$i; sleep 0.3; done"})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := n3.Client.CommandEvents(ctx, id, cmd.PID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var seen strings.Builder
	var lastID uint64
	for {
		e, err := ev.Next()
		if err != nil {
			t.Fatalf("events through n3: %v", err)
		}
		if e.Type == client.EventStdout {
			seen.Write(e.Data)
			lastID = e.ID
			break
		}
	}
	ev.Close()
	ev, err = n1.Client.CommandEvents(ctx, id, cmd.PID, lastID)
	if err != nil {
		t.Fatal(err)
	}
	for {
		e, err := ev.Next()
		if err != nil {
			t.Fatalf("resumed events through n1: %v", err)
		}
		if e.Type == client.EventStdout {
			seen.Write(e.Data)
		}
		if e.Type == client.EventEnd {
			break
		}
	}
	ev.Close()
	if seen.String() != "line-1\nline-2\nline-3\n" {
		t.Errorf("output over two nodes with a resume between: %q", seen.String())
	}

	// A terminal through n3 (a WebSocket forwarded).
	p, err := n3.Client.OpenPTY(ctx, id, client.PTYOptions{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	lines := scanLines(p)
	p.Write([]byte("echo tty-$((6*7))\n"))
	waitLine(t, lines, "tty-42")
	p.Close()

	// The E2B sandbox proxy by header, through n2: envd's health.
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+n2.Addr+"/health", nil)
	req.Header.Set("E2b-Sandbox-Id", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Errorf("E2B proxy through n2: %s", resp.Status)
	}

	// A forged forward (a client pretending to be a node) is refused.
	req, _ = http.NewRequestWithContext(ctx, "GET", "http://"+n2.Addr+"/v1/sandboxes/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+n2.APIKey)
	req.Header.Set("Space-Forwarded-By", "n1")
	req.Header.Set("Space-Forwarded-At", "1")
	req.Header.Set("Space-Forwarded-Signature", strings.Repeat("0", 64))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("forged forward: %s", resp.Status)
	}

	// Creates with one Idempotency-Key, through two nodes: one sandbox.
	var keyed []string
	for _, n := range []*harness.Daemon{n1, n2, n1} {
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+n.Addr+"/v1/sandboxes", strings.NewReader(`{"metadata":{"k":"1"}}`))
		req.Header.Set("Authorization", "Bearer "+n.APIKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "cluster-test-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var sb client.Sandbox
		json.NewDecoder(resp.Body).Decode(&sb)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || sb.ID == "" {
			t.Fatalf("keyed create through %s: %s", n.Opts.Name, resp.Status)
		}
		keyed = append(keyed, sb.ID)
	}
	if keyed[0] != keyed[1] || keyed[1] != keyed[2] {
		t.Errorf("one Idempotency-Key made sandboxes %v", keyed)
	}
	onEach = append(onEach, keyed[0])

	// A secret put through one node is every node's (the catalog, sealed
	// under the cluster's keyset; each node reloads on its notification).
	call := func(n *harness.Daemon, method, path, body string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, method, "http://"+n.Addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+n.APIKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := call(n1, "PUT", "/v1/secrets/cluster-token", `{"value":"s3cr3t-value","host":"api.example.test"}`); status/100 != 2 {
		t.Fatalf("put a secret through n1: %d %s", status, body)
	}
	for _, n := range []*harness.Daemon{n2, n3} {
		var body string
		if !harness.WaitFor(5*time.Second, func() bool {
			_, body = call(n, "GET", "/v1/secrets", "")
			return strings.Contains(body, `"cluster-token"`)
		}) {
			t.Errorf("%s does not list the secret put through n1: %s", n.Opts.Name, body)
		}
		if strings.Contains(body, "s3cr3t-value") {
			t.Errorf("%s lists the secret's value", n.Opts.Name)
		}
	}
	if status, body := call(n3, "DELETE", "/v1/secrets/cluster-token", ""); status/100 != 2 {
		t.Fatalf("delete the secret through n3: %d %s", status, body)
	}
	if !harness.WaitFor(5*time.Second, func() bool { _, b := call(n1, "GET", "/v1/secrets", ""); return !strings.Contains(b, "cluster-token") }) {
		t.Error("n1 still lists the secret deleted through n3")
	}

	// Killed through n3; every node sees it gone.
	for _, sid := range onEach {
		if err := n3.Client.KillSandbox(ctx, sid); err != nil {
			t.Fatalf("kill %s through n3: %v", sid, err)
		}
	}
	for _, n := range c.nodes {
		if state, _ := nodeOf(t, n, id); state != "killed" {
			t.Errorf("after the kill, %s says %s", n.Opts.Name, state)
		}
		if left := n.Leftovers(id); len(left) > 0 {
			t.Errorf("%s holds %v of the killed sandbox", n.Opts.Name, left)
		}
	}
}

// TestPauseHereResumeThere: a sandbox with a process holding state in
// memory is paused on one node and resumed through another, where it
// runs on with its process; two resumes at once make one running sandbox
// and a clear error (or a forward to the winner).
func TestPauseHereResumeThere(t *testing.T) {
	c := newCluster(t, 1, 0, 3)
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	ctx := harness.Ctx(t, 3*time.Minute)
	sb, err := n1.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer n1.Client.KillSandbox(context.Background(), sb.ID)
	// n lives in the shell's memory only: a process that writes it on
	// after the moves is the same process.
	sh(t, n1, sb.ID, "nohup sh -c 'n=41; while :; do echo $((n+1)) > /tmp/alive; sleep 0.2; done' >/dev/null 2>&1 & sleep 0.5")
	if _, err := n1.Client.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	got, err := n2.Client.ResumeSandbox(ctx, sb.ID, 300)
	if err != nil {
		t.Fatalf("resume through n2: %v", err)
	}
	if got.Node != "n2" {
		t.Errorf("resumed on %q, want n2 (the node asked)", got.Node)
	}
	// The process came along: it goes on writing.
	sh(t, n3, sb.ID, "rm -f /tmp/alive; sleep 0.6; test \"$(cat /tmp/alive)\" = 42")
	if left := heldBy(n1, sb.ID); len(left) > 0 {
		t.Errorf("n1 still holds %v after the sandbox moved", left)
	}

	// Two resumes at once, through n1 and n3.
	for round := range 3 {
		// Through n2, wherever it runs.
		if _, err := n2.Client.PauseSandbox(ctx, sb.ID); err != nil {
			t.Fatalf("round %d: pause: %v", round, err)
		}
		// One resumes it. The other fails clearly (409: the sandbox is
		// resuming elsewhere) or, when it arrives once the first has
		// finished, is forwarded to the winner and answers its sandbox.
		var wg sync.WaitGroup
		errs := make([]error, 2)
		nodes := make([]string, 2)
		for i, n := range []*harness.Daemon{n1, n3} {
			wg.Go(func() {
				var got *client.Sandbox
				got, errs[i] = n.Client.ResumeSandbox(ctx, sb.ID, 300)
				if got != nil {
					nodes[i] = got.Node
				}
			})
		}
		wg.Wait()
		var winners []string
		for i, err := range errs {
			var apiErr *client.APIError
			switch {
			case err == nil:
				winners = append(winners, nodes[i])
			case errors.As(err, &apiErr) && apiErr.Status < 500:
				t.Logf("round %d: the loser: %v", round, err)
			default:
				t.Errorf("round %d: a resume failed unclearly: %v", round, err)
			}
		}
		if len(winners) == 0 || len(winners) == 2 && winners[0] != winners[1] {
			t.Fatalf("round %d: resumes answered sandboxes on %v (errors %v)", round, winners, errs)
		}
		state, node := nodeOf(t, n2, sb.ID)
		if state != "running" || node != winners[0] {
			t.Fatalf("round %d: %s on %s, but the resume answered %s", round, state, node, winners[0])
		}
		for _, n := range c.nodes {
			if left := heldBy(n, sb.ID); n.Opts.Name != node && len(left) > 0 {
				t.Errorf("round %d: %s holds %v though %s runs it", round, n.Opts.Name, left, node)
			}
		}
		sh(t, n2, sb.ID, "rm -f /tmp/alive; sleep 0.6; test \"$(cat /tmp/alive)\" = 42")
	}

	// A kill through one node and a resume through another at once:
	// whichever wins, the other fails clearly or comes after it, and a
	// killed sandbox never runs again.
	for round := range 2 {
		victim, err := n1.Client.CreateSandbox(ctx, client.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n1.Client.PauseSandbox(ctx, victim.ID); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var killErr, resumeErr error
		wg.Go(func() { killErr = n1.Client.KillSandbox(ctx, victim.ID) })
		wg.Go(func() { _, resumeErr = n2.Client.ResumeSandbox(ctx, victim.ID, 300) })
		wg.Wait()
		t.Logf("round %d: kill through n1: %v; resume through n2: %v", round, killErr, resumeErr)
		for what, err := range map[string]error{"kill": killErr, "resume": resumeErr} {
			var apiErr *client.APIError
			if err != nil && (!errors.As(err, &apiErr) || apiErr.Status >= 500) {
				t.Errorf("round %d: the %s failed unclearly: %v", round, what, err)
			}
		}
		state, _ := nodeOf(t, n3, victim.ID)
		switch {
		case state == "killed":
			for _, n := range c.nodes {
				if left := n.LeftoversAfter(victim.ID, 10*time.Second); len(left) > 0 {
					t.Errorf("round %d: the killed sandbox is held by %s: %v", round, n.Opts.Name, left)
				}
			}
		case state == "running" && killErr != nil:
			sh(t, n3, victim.ID, "true")
			n3.Client.KillSandbox(ctx, victim.ID)
		default:
			t.Errorf("round %d: the sandbox is %s after a kill that answered %v and a resume that answered %v", round, state, killErr, resumeErr)
		}
	}

	// A snapshot taken through one node lists through every node (from
	// the catalog's manifest index, not the object store).
	snap, err := n1.Client.TakeSnapshot(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.nodes {
		list, err := n.Client.ListSnapshots(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].ID != snap.ID {
			t.Errorf("snapshots through %s: %+v, want %s", n.Opts.Name, list, snap.ID)
		}
	}
	if err := n3.Client.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	if list, _ := n2.Client.ListSnapshots(ctx, sb.ID); len(list) != 0 {
		t.Errorf("after the delete, n2 lists %+v", list)
	}
}
