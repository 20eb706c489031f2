package fault

import (
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// TestKillSandboxProcesses kills a sandbox's runsc processes from the host
// with SIGKILL: the sandbox process (the sentry, which runs the agent), the
// gofer, or both. The sandbox is reported lost with a reason, its host
// resources are removed, calls to it get a clear error, and a neighbour
// sandbox is unaffected.
func TestKillSandboxProcesses(t *testing.T) {
	d := ownDaemon(t, harness.Options{Name: "procs", CIDR: "10.246.48.0/20"})
	neighbour, err := d.Client.CreateSandbox(harness.Ctx(t, time.Minute), client.CreateSandboxRequest{TimeoutSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		which func(p harness.Proc) bool
	}{
		{"sentry", func(p harness.Proc) bool { return p.Name == "runsc-sandbox" }},
		{"gofer", func(p harness.Proc) bool { return p.Name == "runsc-gofer" }},
		{"every runsc process", func(harness.Proc) bool { return true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb, err := d.Client.CreateSandbox(harness.Ctx(t, time.Minute), client.CreateSandboxRequest{TimeoutSeconds: 600})
			if err != nil {
				t.Fatal(err)
			}
			run(t, d, sb.ID, "echo before > /home/user/f")
			procs := harness.RunscProcs(sb.ID)
			killed := 0
			for _, p := range procs {
				if tt.which(p) {
					if err := syscall.Kill(p.Pid, syscall.SIGKILL); err != nil {
						t.Fatalf("kill %d %s: %v", p.Pid, p.Name, err)
					}
					killed++
				}
			}
			if killed == 0 {
				t.Fatalf("no %s process among %+v", tt.name, procs)
			}
			var got *client.Sandbox
			if !harness.WaitFor(20*time.Second, func() bool {
				got, err = d.Client.GetSandbox(harness.Ctx(t, 5*time.Second), sb.ID)
				return err == nil && got.State == "lost"
			}) {
				t.Fatalf("after killing the %s the sandbox is %v, want lost", tt.name, stateOf(got, err))
			}
			if got.Reason == "" {
				t.Errorf("lost without a reason")
			}
			t.Logf("killing the %s: lost, reason %q", tt.name, got.Reason)
			_, err = tryRun(harness.Ctx(t, 10*time.Second), d, sb.ID, "true")
			wantAPIError(t, "exec in the lost sandbox", err, 404, 409)
			_, err = d.Client.Stat(harness.Ctx(t, 10*time.Second), sb.ID, "/home/user/f")
			wantAPIError(t, "stat in the lost sandbox", err, 404, 409)
			var left []string
			if !harness.WaitFor(10*time.Second, func() bool { left = d.Leftovers(sb.ID); return len(left) == 0 }) {
				t.Errorf("lost sandbox left on the host: %v", left)
			}
			if out := run(t, d, neighbour.ID, "echo fine"); out != "fine\n" {
				t.Errorf("neighbour printed %q", out)
			}
		})
	}
	checkNoOrphans(t, d)
}
