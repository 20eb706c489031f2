package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// stillFine checks that spaced answers and sandbox id runs a command.
func stillFine(t *testing.T, d *harness.Daemon, id string) {
	t.Helper()
	if !d.Healthy() {
		t.Fatal("spaced does not answer /healthz")
	}
	if got := sh(t, d, id, "echo ok"); got != "ok\n" {
		t.Errorf("echo ok in %s printed %q", id, got)
	}
}

func TestLimitMemory(t *testing.T) {
	d := need(t)
	t.Parallel()
	neighbour := d.NewSandbox(t, client.CreateSandboxRequest{})
	sb := d.NewSandbox(t, client.CreateSandboxRequest{MemoryMB: 256})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := d.Exec(ctx, sb.ID, client.CommandRequest{Cmd: `python3 -c '
import sys
held = []
for i in range(20):
    held.append(bytearray(50 << 20))
    print((i + 1) * 50, "MiB", flush=True)
print("allocated 1 GiB")
'`})
	switch {
	case err != nil:
		// The sandbox died (the host OOM killer killed its sentry). Then
		// spaced must say so rather than keep calling it running.
		t.Logf("the command stream broke or hung: %v", err)
		var got *client.Sandbox
		ok := harness.WaitFor(10*time.Second, func() bool {
			got, err = d.Client.GetSandbox(harness.Ctx(t, 5*time.Second), sb.ID)
			return err == nil && got.State != client.StateRunning
		})
		if !ok {
			_, rerr := d.Exec(harness.Ctx(t, 10*time.Second), sb.ID, client.CommandRequest{Cmd: "echo ok"})
			t.Errorf("the sandbox died of its memory limit (a command stream hung for 30s; echo ok now gives %v) "+
				"but spaced still reports it %q: nothing notices a sandbox that exits while spaced runs", rerr, got.State)
		}
	case r.Exit.Code() == 0 || strings.Contains(r.Stdout, "allocated 1 GiB"):
		t.Errorf("a 256 MB sandbox allocated 1 GiB: %+v, stdout %q", *r.Exit, r.Stdout)
	default:
		t.Logf("allocation stopped: exit %+v after %q, stderr %q", *r.Exit, lastLine(r.Stdout), lastLine(r.Stderr))
	}
	stillFine(t, d, neighbour.ID)
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}

func TestLimitForkBomb(t *testing.T) {
	d := need(t)
	t.Parallel()
	sb := d.NewSandbox(t, client.CreateSandboxRequest{MaxProcesses: 64})
	start := time.Now()
	r, err := d.Exec(harness.Ctx(t, 60*time.Second), sb.ID, client.CommandRequest{
		Cmd: `bomb() { bomb | bomb & }; bomb; sleep 30`, TimeoutSeconds: 10,
	})
	if err != nil {
		t.Fatalf("fork bomb stream: %v", err)
	}
	t.Logf("fork bomb ended after %s: %+v, stderr %q", time.Since(start).Round(time.Millisecond), *r.Exit, lastLine(r.Stderr))
	if time.Since(start) > 30*time.Second {
		t.Errorf("timeout_seconds 10 took %s", time.Since(start))
	}
	if got, err := d.Client.GetSandbox(harness.Ctx(t, 10*time.Second), sb.ID); err != nil || got.State != client.StateRunning {
		t.Fatalf("after the fork bomb the sandbox is %+v (%v)", got, err)
	}
	// Leftover bomb processes may hold the limit for a moment.
	var out harness.Result
	ok := harness.WaitFor(20*time.Second, func() bool {
		out, err = d.Exec(harness.Ctx(t, 10*time.Second), sb.ID, client.CommandRequest{Cmd: "echo ok"})
		return err == nil && out.Exit.Code() == 0 && out.Stdout == "ok\n"
	})
	if !ok {
		ps, _ := d.Exec(harness.Ctx(t, 10*time.Second), sb.ID, client.CommandRequest{Cmd: "ps -e | wc -l", User: "root"})
		t.Fatalf("the sandbox cannot run echo ok after the fork bomb: %+v %v %q (processes as seen by root: %q)", out.Exit, err, out.Stderr, ps.Stdout)
	}
	stillFine(t, d, sb.ID)
}

func TestLimitDisk(t *testing.T) {
	d := need(t)
	t.Parallel()
	sb := d.NewSandbox(t, client.CreateSandboxRequest{DiskMB: 64})
	r := run(t, d, sb.ID, client.CommandRequest{Cmd: "dd if=/dev/zero of=/home/user/big bs=1M count=200"})
	if r.Exit.Code() == 0 || !strings.Contains(r.Stderr, "No space left") {
		t.Errorf("writing 200 MB into 64 MB: exit %+v, stderr %q", *r.Exit, r.Stderr)
	}
	sh(t, d, sb.ID, "rm -f /home/user/big")
	stillFine(t, d, sb.ID)
	// Space is given back.
	sh(t, d, sb.ID, "dd if=/dev/zero of=/home/user/small bs=1M count=16 2>/dev/null")
}

func TestLimitCPU(t *testing.T) {
	d := need(t)
	t.Parallel()
	sb := d.NewSandbox(t, client.CreateSandboxRequest{CPU: 1})
	got := strings.TrimSpace(sh(t, d, sb.ID, "nproc"))
	t.Logf("nproc in a cpu:1 sandbox: %s (runsc reports the host's CPUs; the quota is a cgroup limit)", got)
	if sb.CPU != 1 {
		t.Errorf("sandbox reports cpu %d, want 1", sb.CPU)
	}
}
