package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

func TestRestart(t *testing.T) {
	need(t)
	t.Parallel()
	d := ownDaemon(t, harness.Options{Name: "restart", CIDR: "10.241.16.0/20"})
	var keep []*client.Sandbox
	for i := range 3 {
		sb := d.NewSandbox(t, client.CreateSandboxRequest{TimeoutSeconds: 600})
		sh(t, d, sb.ID, fmt.Sprintf("echo data-%d > /home/user/keep", i))
		keep = append(keep, sb)
	}
	short := d.NewSandbox(t, client.CreateSandboxRequest{TimeoutSeconds: 3})
	sh(t, d, short.ID, "echo x > /home/user/keep")

	d.Kill9()
	time.Sleep(5 * time.Second) // the short one expires while spaced is down
	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	for i, sb := range keep {
		if got := sh(t, d, sb.ID, "cat /home/user/keep"); got != fmt.Sprintf("data-%d\n", i) {
			t.Errorf("after kill -9 and restart, %s holds %q", sb.ID, got)
		}
		if got, err := d.Client.GetSandbox(harness.Ctx(t, 5*time.Second), sb.ID); err != nil || got.State != client.StateRunning {
			t.Errorf("after restart %s is %+v %v", sb.ID, got, err)
		}
	}
	var got *client.Sandbox
	if !harness.WaitFor(5*time.Second, func() bool {
		got, _ = d.Client.GetSandbox(harness.Ctx(t, 5*time.Second), short.ID)
		return got != nil && got.State == client.StateKilled
	}) {
		t.Errorf("the sandbox that expired while spaced was down is %+v, want killed", got)
	} else if got.Reason != "timeout" {
		t.Errorf("expired sandbox reason %q, want timeout", got.Reason)
	}
	if left := d.Leftovers(short.ID); len(left) > 0 {
		t.Errorf("expired sandbox left on the host: %v", left)
	}

	// A clean stop and start keeps them too.
	if err := d.Stop(); err != nil {
		t.Error(err)
	}
	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	for i, sb := range keep {
		if got := sh(t, d, sb.ID, "cat /home/user/keep"); got != fmt.Sprintf("data-%d\n", i) {
			t.Errorf("after SIGTERM and restart, %s holds %q", sb.ID, got)
		}
	}
	list, err := d.Client.ListAllSandboxes(harness.Ctx(t, 5*time.Second), client.ListOptions{})
	if err != nil || len(list) != 3 {
		t.Errorf("running sandboxes after restarts: %v %v, want the 3", ids(list), err)
	}
}

func ids(sbs []client.Sandbox) string {
	var s []string
	for _, sb := range sbs {
		s = append(s, sb.ID+":"+string(sb.State))
	}
	return strings.Join(s, ",")
}

func TestTimeout(t *testing.T) {
	d := need(t)
	t.Parallel()
	reaped := d.NewSandbox(t, client.CreateSandboxRequest{TimeoutSeconds: 2})
	extended := d.NewSandbox(t, client.CreateSandboxRequest{TimeoutSeconds: 2})
	updated, err := d.Client.SetTimeout(harness.Ctx(t, 5*time.Second), extended.ID, 30)
	if err != nil {
		t.Fatal(err)
	}
	if !updated.ExpiresAt.After(extended.ExpiresAt.Add(20 * time.Second)) {
		t.Errorf("expires_at %s after extending, was %s", updated.ExpiresAt, extended.ExpiresAt)
	}
	var got *client.Sandbox
	if !harness.WaitFor(time.Until(reaped.CreatedAt.Add(4*time.Second))+time.Second, func() bool {
		got, _ = d.Client.GetSandbox(harness.Ctx(t, 5*time.Second), reaped.ID)
		return got != nil && got.State == client.StateKilled
	}) {
		t.Fatalf("a 2 s sandbox is %+v ~4 s after its creation", got)
	}
	if got.Reason != "timeout" {
		t.Errorf("reason %q, want timeout", got.Reason)
	}
	if left := d.Leftovers(reaped.ID); len(left) > 0 {
		t.Errorf("reaped sandbox left on the host: %v", left)
	}
	time.Sleep(time.Until(extended.ExpiresAt.Add(2 * time.Second)))
	if got := sh(t, d, extended.ID, "echo alive"); got != "alive\n" {
		t.Errorf("extended sandbox: %q", got)
	}
	resp, body := do(t, d, "POST", "/v1/sandboxes/"+extended.ID+"/timeout", `{"timeout_seconds":-1}`, nil)
	wantError(t, resp, body, 400, "invalid_argument")
	// 0 ends its life now, as its timeout would (E2B's set_timeout(0)).
	ended, err := d.Client.SetTimeout(harness.Ctx(t, 30*time.Second), extended.ID, 0)
	if err != nil || ended.State != "killed" || ended.Reason != "timeout" {
		t.Errorf("timeout 0: %+v, %v; want killed by timeout", ended, err)
	}
	if left := d.Leftovers(extended.ID); len(left) > 0 {
		t.Errorf("sandbox ended by timeout 0 left on the host: %v", left)
	}
	resp, body = do(t, d, "POST", "/v1/sandboxes/"+reaped.ID+"/timeout", `{"timeout_seconds":60}`, nil)
	if resp.StatusCode != 404 && resp.StatusCode != 409 {
		t.Errorf("extending a reaped sandbox: %d %s", resp.StatusCode, body)
	}
}
