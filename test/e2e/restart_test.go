package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
)

// ownDaemon starts a daemon of the test's own (on its own address range),
// for tests that kill or restart it. It is stopped when the test ends.
func ownDaemon(t *testing.T, o daemonOptions) *daemon {
	t.Helper()
	if env.skip != "" {
		t.Skip(env.skip)
	}
	d, err := startDaemon(o)
	if d != nil {
		d.dumpOnFailure(t)
	}
	if err != nil {
		t.Fatalf("start spaced %s: %v", o.name, err)
	}
	t.Cleanup(func() {
		if !d.healthy() {
			d.start() // so the sandboxes it left can be killed
		}
		d.shutdown()
	})
	return d
}

func TestRestart(t *testing.T) {
	need(t)
	t.Parallel()
	d := ownDaemon(t, daemonOptions{name: "restart", cidr: "10.241.16.0/20"})
	var keep []*client.Sandbox
	for i := range 3 {
		sb := newSandbox(t, d, client.CreateSandboxRequest{TimeoutSeconds: 600})
		sh(t, d, sb.ID, fmt.Sprintf("echo data-%d > /home/user/keep", i))
		keep = append(keep, sb)
	}
	short := newSandbox(t, d, client.CreateSandboxRequest{TimeoutSeconds: 3})
	sh(t, d, short.ID, "echo x > /home/user/keep")

	d.kill9()
	time.Sleep(5 * time.Second) // the short one expires while spaced is down
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	for i, sb := range keep {
		if got := sh(t, d, sb.ID, "cat /home/user/keep"); got != fmt.Sprintf("data-%d\n", i) {
			t.Errorf("after kill -9 and restart, %s holds %q", sb.ID, got)
		}
		if got, err := d.c.GetSandbox(ctxT(t, 5*time.Second), sb.ID); err != nil || got.State != client.StateRunning {
			t.Errorf("after restart %s is %+v %v", sb.ID, got, err)
		}
	}
	var got *client.Sandbox
	if !waitFor(5*time.Second, func() bool {
		got, _ = d.c.GetSandbox(ctxT(t, 5*time.Second), short.ID)
		return got != nil && got.State == client.StateKilled
	}) {
		t.Errorf("the sandbox that expired while spaced was down is %+v, want killed", got)
	} else if got.Reason != "timeout" {
		t.Errorf("expired sandbox reason %q, want timeout", got.Reason)
	}
	if left := hostLeftovers(d, short.ID); len(left) > 0 {
		t.Errorf("expired sandbox left on the host: %v", left)
	}

	// A clean stop and start keeps them too.
	if err := d.stop(); err != nil {
		t.Error(err)
	}
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	for i, sb := range keep {
		if got := sh(t, d, sb.ID, "cat /home/user/keep"); got != fmt.Sprintf("data-%d\n", i) {
			t.Errorf("after SIGTERM and restart, %s holds %q", sb.ID, got)
		}
	}
	list, err := d.c.ListAllSandboxes(ctxT(t, 5*time.Second), client.ListOptions{})
	if err != nil || len(list) != 3 {
		t.Errorf("running sandboxes after restarts: %v %v, want the 3", ids(list), err)
	}
}

func ids(sbs []client.Sandbox) string {
	var s []string
	for _, sb := range sbs {
		s = append(s, sb.ID+":"+sb.State)
	}
	return strings.Join(s, ",")
}

func TestTimeout(t *testing.T) {
	d := need(t)
	t.Parallel()
	reaped := newSandbox(t, d, client.CreateSandboxRequest{TimeoutSeconds: 2})
	extended := newSandbox(t, d, client.CreateSandboxRequest{TimeoutSeconds: 2})
	updated, err := d.c.SetTimeout(ctxT(t, 5*time.Second), extended.ID, 30)
	if err != nil {
		t.Fatal(err)
	}
	if !updated.ExpiresAt.After(extended.ExpiresAt.Add(20 * time.Second)) {
		t.Errorf("expires_at %s after extending, was %s", updated.ExpiresAt, extended.ExpiresAt)
	}
	var got *client.Sandbox
	if !waitFor(time.Until(reaped.CreatedAt.Add(4*time.Second))+time.Second, func() bool {
		got, _ = d.c.GetSandbox(ctxT(t, 5*time.Second), reaped.ID)
		return got != nil && got.State == client.StateKilled
	}) {
		t.Fatalf("a 2 s sandbox is %+v ~4 s after its creation", got)
	}
	if got.Reason != "timeout" {
		t.Errorf("reason %q, want timeout", got.Reason)
	}
	if left := hostLeftovers(d, reaped.ID); len(left) > 0 {
		t.Errorf("reaped sandbox left on the host: %v", left)
	}
	time.Sleep(time.Until(extended.ExpiresAt.Add(2 * time.Second)))
	if got := sh(t, d, extended.ID, "echo alive"); got != "alive\n" {
		t.Errorf("extended sandbox: %q", got)
	}
	resp, body := do(t, d, "POST", "/v1/sandboxes/"+extended.ID+"/timeout", `{"timeout_seconds":0}`, nil)
	wantError(t, resp, body, 400, "invalid_argument")
	resp, body = do(t, d, "POST", "/v1/sandboxes/"+reaped.ID+"/timeout", `{"timeout_seconds":60}`, nil)
	if resp.StatusCode != 404 && resp.StatusCode != 409 {
		t.Errorf("extending a reaped sandbox: %d %s", resp.StatusCode, body)
	}
}
