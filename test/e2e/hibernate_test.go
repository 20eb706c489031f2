package e2e

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/internal/runtime/gvisor"
	"github.com/spacesandbox/space/test/harness"
)

// Rest tiers, hibernated: a sandbox frozen at rest that nothing reaches
// for its idle hibernate delay is checkpointed to the node's disk
// (encrypted) and its runtime sandbox removed (its memory given back); it
// shows as running, and the next request restores it in place with its
// processes, their memory and open files, and its disk.

// restHibernate is the idle hibernate delay these tests give their
// sandboxes (counted from the last activity, as the freeze's).
const restHibernate = 5

// heldFileCmd starts a process that holds open a file it then deletes, so
// only that process's open descriptor keeps the marker, which a test
// reads back through /proc after a wake.
const heldFileCmd = `echo %s > /tmp/held && nohup sh -c 'exec 3</tmp/held; rm /tmp/held; exec sleep 100000' >/dev/null 2>&1 &
echo $! > /tmp/held.pid; while [ -e /tmp/held ]; do sleep 0.05; done`

// waitHibernated waits until sandbox id is hibernated, as the API says and
// the host shows: no runsc process and no cgroup of it left.
func waitHibernated(t *testing.T, d *harness.Daemon, id string) {
	t.Helper()
	d.WaitRest(t, id, client.RestHibernated, 90*time.Second)
	if procs := harness.RunscProcs(id); len(procs) > 0 {
		t.Errorf("the API says %s is hibernated, but its runsc processes are there: %v", id, procs)
	}
	if dirs := gvisor.CgroupDirs(id); len(dirs) > 0 {
		t.Errorf("the API says %s is hibernated, but its cgroups are there: %v", id, dirs)
	}
}

// hibernationFiles lists the files of sandbox id's hibernation images in
// d's data directory.
func hibernationFiles(t *testing.T, d *harness.Daemon, id string) []string {
	t.Helper()
	var out []string
	root := filepath.Join(d.DataDir, "hibernation")
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() && strings.Contains(p, id) {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read the hibernation images: %v", err)
	}
	return out
}

func TestRestHibernatesIdleSandbox(t *testing.T) {
	d := need(t)
	t.Parallel()
	ctx := harness.Ctx(t, 5*time.Minute)
	sb := d.NewSandbox(t, client.CreateSandboxRequest{IdleFreezeSeconds: restIdle, IdleHibernateSeconds: restHibernate})
	if sb.IdleHibernateSeconds != restHibernate {
		t.Errorf("created with idle_hibernate_seconds %d, the answer says %d", restHibernate, sb.IdleHibernateSeconds)
	}
	marker := "hibernation-marker-" + sb.ID
	sh(t, d, sb.ID, counterCmd)
	sh(t, d, sb.ID, strings.Replace(heldFileCmd, "%s", marker, 1))
	sh(t, d, sb.ID, "echo on-disk > ~/kept")
	before := counter(t, d, sb.ID)

	waitHibernated(t, d, sb.ID)
	files := hibernationFiles(t, d, sb.ID)
	if len(files) == 0 {
		t.Fatalf("%s is hibernated, but no image of it is in %s", sb.ID, filepath.Join(d.DataDir, "hibernation"))
	}
	// The marker is in the sandbox's memory; the image must not show it.
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(raw, []byte(marker)) {
			t.Errorf("the hibernation image %s holds the sandbox's memory in plain", f)
		}
	}
	if page, err := d.Client.ListSandboxes(ctx, client.ListOptions{}); err != nil || !containsID(page.Sandboxes, sb.ID) {
		t.Errorf("a hibernated sandbox is not listed as running: %v", err)
	}

	// Any request wakes it in place: the same processes, memory, open
	// files and disk.
	if got := sh(t, d, sb.ID, "cat ~/kept"); got != "on-disk\n" {
		t.Errorf("after the wake ~/kept is %q", got)
	}
	counterGoesOn(t, d, sb.ID, before)
	if got := sh(t, d, sb.ID, "cat /proc/$(cat /tmp/held.pid)/fd/3"); strings.TrimSpace(got) != marker {
		t.Errorf("the process holding a deleted file reads %q after the wake, want %q", got, marker)
	}
	if got, err := d.Client.GetSandboxRest(ctx, sb.ID); err != nil || got.Rest == client.RestHibernated {
		t.Errorf("after a request the sandbox is %+v, %v; want awake", got, err)
	}
	if files := hibernationFiles(t, d, sb.ID); len(files) > 0 {
		t.Errorf("the woken sandbox's image is still on disk: %v", files)
	}

	// Hibernated, then told never to hibernate: woken at once.
	waitHibernated(t, d, sb.ID)
	if got, err := d.Client.SetIdleDelays(ctx, sb.ID, restIdle, -1); err != nil || got.IdleHibernateSeconds != -1 {
		t.Fatalf("set idle_hibernate_seconds -1: %+v, %v", got, err)
	}
	if got, err := d.Client.GetSandboxRest(ctx, sb.ID); err != nil || got.Rest == client.RestHibernated {
		t.Errorf("a hibernated sandbox that may no longer hibernate is %+v, %v; want woken", got, err)
	}
	if _, err := d.Client.SetIdleDelays(ctx, sb.ID, restIdle, restHibernate); err != nil {
		t.Fatal(err)
	}

	// Killed while hibernated, it leaves nothing: no image, no network.
	waitHibernated(t, d, sb.ID)
	if err := d.Client.KillSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("kill of a hibernated sandbox: %v", err)
	}
	if left := d.LeftoversAfter(sb.ID, 20*time.Second); len(left) > 0 {
		t.Errorf("a hibernated sandbox killed left on the host: %v", left)
	}
	if files := hibernationFiles(t, d, sb.ID); len(files) > 0 {
		t.Errorf("a hibernated sandbox killed left its image: %v", files)
	}
}

// TestRestHibernatedLifecycle: a pause, a fork and a timeout of a
// hibernated sandbox each wake it first and do what they do.
func TestRestHibernatedLifecycle(t *testing.T) {
	d := need(t)
	t.Parallel()
	ctx := harness.Ctx(t, 5*time.Minute)
	sb := d.NewSandbox(t, client.CreateSandboxRequest{IdleFreezeSeconds: restIdle, IdleHibernateSeconds: restHibernate})
	sh(t, d, sb.ID, counterCmd)
	n := counter(t, d, sb.ID)

	waitHibernated(t, d, sb.ID)
	forks, err := d.Client.ForkSandbox(ctx, sb.ID, 1)
	if err != nil || len(forks) != 1 {
		t.Fatalf("fork of a hibernated sandbox: %v, %v", forks, err)
	}
	t.Cleanup(func() { d.Client.KillSandbox(harness.Ctx(t, time.Minute), forks[0].ID) })
	counterGoesOn(t, d, forks[0].ID, n)

	waitHibernated(t, d, sb.ID)
	if p, err := d.Client.PauseSandbox(ctx, sb.ID); err != nil || p.State != "paused" {
		t.Fatalf("pause of a hibernated sandbox: %+v, %v", p, err)
	}
	if r, err := d.Client.ResumeSandbox(ctx, sb.ID, 30); err != nil || r.State != client.StateRunning {
		t.Fatalf("resume: %+v, %v", r, err)
	}
	counterGoesOn(t, d, sb.ID, n)

	// Its timeout ends it while hibernated (30 s from the resume).
	waitHibernated(t, d, sb.ID)
	if !harness.WaitFor(90*time.Second, func() bool {
		got, err := d.Client.GetSandbox(ctx, sb.ID)
		return err == nil && got.State == "killed"
	}) {
		t.Fatal("the hibernated sandbox did not end at its timeout")
	}
	if left := d.LeftoversAfter(sb.ID, 20*time.Second); len(left) > 0 {
		t.Errorf("a hibernated sandbox timed out left on the host: %v", left)
	}
	if files := hibernationFiles(t, d, sb.ID); len(files) > 0 {
		t.Errorf("a hibernated sandbox timed out left its image: %v", files)
	}
}

// TestRestRestartAdoptsHibernated: spaced killed with -9 while a sandbox
// is hibernated, then restarted, finds it hibernated (no runtime sandbox,
// its image there) and wakes it at its next request.
func TestRestRestartAdoptsHibernated(t *testing.T) {
	need(t)
	t.Parallel()
	d := ownDaemon(t, harness.Options{Name: "hibernate-restart", CIDR: "10.241.228.0/22", NoPool: true})
	sb := d.NewSandbox(t, client.CreateSandboxRequest{TimeoutSeconds: 600, IdleFreezeSeconds: restIdle, IdleHibernateSeconds: restHibernate})
	sh(t, d, sb.ID, counterCmd)
	n := counter(t, d, sb.ID)
	waitHibernated(t, d, sb.ID)

	d.Kill9()
	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	if got, err := d.Client.GetSandboxRest(harness.Ctx(t, 10*time.Second), sb.ID); err != nil ||
		got.State != client.StateRunning || got.Rest != client.RestHibernated {
		t.Fatalf("after the restart %s is %+v, %v; want running and hibernated", sb.ID, got, err)
	}
	if got := sh(t, d, sb.ID, "echo back"); got != "back\n" {
		t.Errorf("after the restart, %s answered %q", sb.ID, got)
	}
	counterGoesOn(t, d, sb.ID, n)
	if err := d.Client.KillSandbox(harness.Ctx(t, time.Minute), sb.ID); err != nil {
		t.Error(err)
	}
}
