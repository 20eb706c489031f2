package cluster

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// TestE2BAndForksThroughAnotherNode: what TestEveryRequestThroughAnotherNode
// leaves out, each through a node that does not run the sandbox: a port
// inside the sandbox by <port>-<id>.<domain> host (with its token, and
// refused without), the E2B REST routes (/sandboxes/{id}: details,
// timeout, pause, connect, kill), and a fork.
func TestE2BAndForksThroughAnotherNode(t *testing.T) {
	c := newCluster(t, 12, 0, 3)
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	ctx := harness.Ctx(t, 4*time.Minute)
	sb, err := n1.Client.CreateSandbox(ctx, client.CreateSandboxRequest{TimeoutSeconds: 300})
	if err != nil {
		t.Fatal(err)
	}
	defer n1.Client.KillSandbox(ctx, sb.ID)
	if _, node := nodeOf(t, n2, sb.ID); node != "n1" {
		t.Fatalf("created through n1, it runs on %q", node)
	}

	// A server on port 8000 in the sandbox, reached by host name.
	if _, err := n1.Client.StartBackground(ctx, sb.ID, client.CommandRequest{
		Cmd: "mkdir -p /tmp/www && echo in-the-sandbox > /tmp/www/index.html && cd /tmp/www && exec python3 -m http.server 8000",
	}); err != nil {
		t.Fatal(err)
	}
	port := func(via *harness.Daemon, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+via.Addr+"/", nil)
		req.Host = "8000-" + sb.ID + ".space.test"
		if token != "" {
			req.Header.Set("X-Access-Token", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var status int
	var body string
	if !harness.WaitFor(30*time.Second, func() bool {
		status, body = port(n2, sb.AccessToken)
		return status == http.StatusOK
	}) {
		t.Fatalf("port 8000 by host through n2: %d %s", status, body)
	}
	if body != "in-the-sandbox\n" {
		t.Errorf("port 8000 through n2: %q", body)
	}
	if status, body := port(n3, ""); status == http.StatusOK {
		t.Errorf("port 8000 through n3 without the sandbox's token: %d %q", status, body)
	}

	// The E2B REST routes.
	e2b := func(via *harness.Daemon, method, path, reqBody string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, "http://"+via.Addr+path, strings.NewReader(reqBody))
		req.Header.Set("X-API-Key", via.APIKey)
		if reqBody != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	status, body = e2b(n2, "GET", "/sandboxes/"+sb.ID, "")
	var detail struct {
		SandboxID string `json:"sandboxID"`
		State     string `json:"state"`
	}
	if status != http.StatusOK || json.Unmarshal([]byte(body), &detail) != nil || detail.SandboxID != sb.ID || detail.State != "running" {
		t.Fatalf("E2B GET /sandboxes/{id} through n2: %d %s", status, body)
	}
	if status, body := e2b(n3, "POST", "/sandboxes/"+sb.ID+"/timeout", `{"timeout": 900}`); status/100 != 2 {
		t.Fatalf("E2B timeout through n3: %d %s", status, body)
	}
	if got, err := n1.Client.GetSandbox(ctx, sb.ID); err != nil || got.ExpiresAt.Before(time.Now().Add(800*time.Second)) {
		t.Errorf("after the timeout set through n3: expires %v, %v", got.ExpiresAt, err)
	}
	if status, body := e2b(n2, "POST", "/sandboxes/"+sb.ID+"/pause", ""); status/100 != 2 {
		t.Fatalf("E2B pause through n2: %d %s", status, body)
	}
	if state, _ := nodeOf(t, n3, sb.ID); state != "paused" {
		t.Fatalf("after the pause through n2: %s", state)
	}
	// Connect resumes it where it is asked: on n3.
	if status, body := e2b(n3, "POST", "/sandboxes/"+sb.ID+"/connect", `{"timeout": 300}`); status/100 != 2 {
		t.Fatalf("E2B connect through n3: %d %s", status, body)
	}
	if state, node := nodeOf(t, n1, sb.ID); state != "running" || node != "n3" {
		t.Fatalf("after connect through n3: %s on %q", state, node)
	}
	// Its server came along (its process was restored), reached through
	// n1, which ran it before.
	if !harness.WaitFor(30*time.Second, func() bool {
		status, body = port(n1, sb.AccessToken)
		return status == http.StatusOK
	}) || body != "in-the-sandbox\n" {
		t.Errorf("port 8000 through n1 after the move to n3: %d %q", status, body)
	}

	// A fork through n2 is made where the sandbox runs (n3) and has its
	// files.
	forks, err := n2.Client.ForkSandbox(ctx, sb.ID, 1)
	if err != nil || len(forks) != 1 {
		t.Fatalf("fork through n2: %+v, %v", forks, err)
	}
	fork := forks[0]
	defer n1.Client.KillSandbox(ctx, fork.ID)
	if _, node := nodeOf(t, n1, fork.ID); node != "n3" {
		t.Errorf("the fork runs on %q, want n3 (its parent's node)", node)
	}
	if out := sh(t, n1, fork.ID, "cat /tmp/www/index.html"); out != "in-the-sandbox\n" {
		t.Errorf("the fork's file through n1: %q", out)
	}

	if status, body := e2b(n1, "DELETE", "/sandboxes/"+sb.ID, ""); status/100 != 2 {
		t.Fatalf("E2B kill through n1: %d %s", status, body)
	}
	if state, _ := nodeOf(t, n2, sb.ID); state != "killed" {
		t.Errorf("after the kill through n1: %s", state)
	}
	if status, _ := e2b(n2, "GET", "/sandboxes/"+sb.ID, ""); status != http.StatusNotFound {
		t.Errorf("E2B GET of the killed sandbox through n2: %d, want 404", status)
	}
	if left := n3.Leftovers(sb.ID); len(left) > 0 {
		t.Errorf("n3 holds %v of the killed sandbox", left)
	}
}

// TestListPages: the native list pages through the catalog (limit and
// page_token), through any node: every sandbox of the cluster once,
// newest first.
func TestListPages(t *testing.T) {
	c := newCluster(t, 13, 0, 2)
	n1, n2 := c.nodes[0], c.nodes[1]
	ctx := harness.Ctx(t, 2*time.Minute)
	var made []string // oldest first
	for i := range 4 {
		sb, err := c.nodes[i%2].Client.CreateSandbox(ctx, client.CreateSandboxRequest{Metadata: map[string]string{"list": "pages"}})
		if err != nil {
			t.Fatal(err)
		}
		defer n1.Client.KillSandbox(ctx, sb.ID)
		made = append(made, sb.ID)
	}
	var paged []string
	pages := 0
	opts := client.ListOptions{Limit: 1, Metadata: map[string]string{"list": "pages"}}
	for {
		page, err := n2.Client.ListSandboxes(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, sb := range page.Sandboxes {
			paged = append(paged, sb.ID)
		}
		if page.NextPageToken == "" || pages > 10 {
			break
		}
		opts.PageToken = page.NextPageToken
	}
	want := []string{made[3], made[2], made[1], made[0]}
	if strings.Join(paged, " ") != strings.Join(want, " ") {
		t.Errorf("pages of one through n2: %v, want %v", paged, want)
	}
	if page, err := n1.Client.ListSandboxes(ctx, client.ListOptions{PageToken: "bm90LWEtdG9rZW4"}); err == nil {
		t.Errorf("a bad page_token: %+v, want 400", page)
	}
}
