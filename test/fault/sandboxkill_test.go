package fault

import (
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
)

// TestKillSandboxProcesses kills a sandbox's runsc processes from the host
// with SIGKILL: the sandbox process (the sentry, which runs the agent), the
// gofer, or both. The sandbox is reported lost with a reason, its host
// resources are removed, calls to it get a clear error, and a neighbour
// sandbox is unaffected.
func TestKillSandboxProcesses(t *testing.T) {
	d := ownDaemon(t, daemonOptions{name: "procs", cidr: "10.246.48.0/20"})
	neighbour, err := d.c.CreateSandbox(ctxT(t, time.Minute), client.CreateSandboxRequest{TimeoutSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		which func(p runscProc) bool
	}{
		{"sentry", func(p runscProc) bool { return p.name == "runsc-sandbox" }},
		{"gofer", func(p runscProc) bool { return p.name == "runsc-gofer" }},
		{"every runsc process", func(runscProc) bool { return true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb, err := d.c.CreateSandbox(ctxT(t, time.Minute), client.CreateSandboxRequest{TimeoutSeconds: 600})
			if err != nil {
				t.Fatal(err)
			}
			run(t, d, sb.ID, "echo before > /home/user/f")
			procs := runscProcs(sb.ID)
			killed := 0
			for _, p := range procs {
				if tt.which(p) {
					if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil {
						t.Fatalf("kill %d %s: %v", p.pid, p.name, err)
					}
					killed++
				}
			}
			if killed == 0 {
				t.Fatalf("no %s process among %+v", tt.name, procs)
			}
			var got *client.Sandbox
			if !waitFor(20*time.Second, func() bool {
				got, err = d.c.GetSandbox(ctxT(t, 5*time.Second), sb.ID)
				return err == nil && got.State == "lost"
			}) {
				t.Fatalf("after killing the %s the sandbox is %v, want lost", tt.name, stateOf(got, err))
			}
			if got.Reason == "" {
				t.Errorf("lost without a reason")
			}
			t.Logf("killing the %s: lost, reason %q", tt.name, got.Reason)
			_, err = tryRun(ctxT(t, 10*time.Second), d, sb.ID, "true")
			wantAPIError(t, "exec in the lost sandbox", err, 404, 409)
			_, err = d.c.Stat(ctxT(t, 10*time.Second), sb.ID, "/home/user/f")
			wantAPIError(t, "stat in the lost sandbox", err, 404, 409)
			var left []string
			if !waitFor(10*time.Second, func() bool { left = hostLeftovers(d, sb.ID); return len(left) == 0 }) {
				t.Errorf("lost sandbox left on the host: %v", left)
			}
			if out := run(t, d, neighbour.ID, "echo fine"); out != "fine\n" {
				t.Errorf("neighbour printed %q", out)
			}
		})
	}
	checkNoOrphans(t, d)
}
