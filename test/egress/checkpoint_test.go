package egress

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestPolicyFollowsPauseResumeAndFork: a resumed sandbox (on a new
// address) and a fork (on its own) keep their policy and resolve through
// their own gateway address; what was denied stays denied.
func TestPolicyFollowsPauseResumeAndFork(t *testing.T) {
	need(t)
	t.Parallel()
	sb := newSandbox(t, &strictPolicy)
	allowed := spec{Kind: "url", URL: "http://allowed.test/"}
	evil := spec{Kind: "tcp", Host: evilIP, Port: 80, Send: httpGet("evil.test", "/")}
	check := func(t *testing.T, id, when string) {
		t.Helper()
		if got := probe(t, id, spec{Kind: "dns", Host: "allowed.test"}); !strings.Contains(got, "OK "+allowedIP) {
			t.Errorf("%s: DNS for an allowed name: %q", when, got)
		}
		if got := probe(t, id, allowed); !strings.Contains(got, "host=allowed.test") {
			t.Errorf("%s: HTTP to an allowed name: %q", when, got)
		}
		if got := probe(t, id, evil); strings.Contains(got, "M-") {
			t.Errorf("%s: reached a denied address: %q", when, got)
		}
	}
	check(t, sb.ID, "before pause")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := env.d.Client.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	// Another sandbox takes the freed address, so the resume gets a new one.
	other := newSandbox(t, nil)
	if _, err := env.d.Client.ResumeSandbox(ctx, sb.ID, 300); err != nil {
		t.Fatalf("resume: %v", err)
	}
	check(t, sb.ID, "after resume")
	if got := probe(t, other.ID, allowed); strings.Contains(got, "M-") {
		t.Errorf("the sandbox on the old address got the resumed one's egress: %q", got)
	}

	forks, err := env.d.Client.ForkSandbox(ctx, sb.ID, 1)
	if err != nil || len(forks) != 1 {
		t.Fatalf("fork: %v", err)
	}
	t.Cleanup(func() { env.d.Client.KillSandbox(context.Background(), forks[0].ID) })
	check(t, forks[0].ID, "in a fork")
}
