package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// Pauses that keep the disk only, and snapshots that keep memory and
// processes (full) or the disk, named or not, with sandboxes made from
// them; through the public API, against real runsc and a real S3 server.

const bootID = "cat /proc/sys/kernel/random/boot_id"

// counterGone says whether the in-memory counter of startCounter no longer
// answers (its process did not survive).
func counterGone(t *testing.T, d *harness.Daemon, id string) bool {
	t.Helper()
	return strings.TrimSpace(sh(t, d, id, askCounter+" 2>/dev/null || echo gone")) == "gone"
}

func TestDiskOnlyPauseAndResumeOnAnotherNode(t *testing.T) {
	_, ds := checkpointNodes(t, "10.241.52.0/22", "10.241.56.0/22")
	a, b := ds[0], ds[1]
	ctx := harness.Ctx(t, 3*time.Minute)
	sb, err := a.Client.CreateSandbox(ctx, client.CreateSandboxRequest{TimeoutSeconds: 600, Env: map[string]string{"KEPT": "env"}, Metadata: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Client.KillSandbox(harness.Ctx(t, time.Minute), sb.ID)
		b.Client.KillSandbox(harness.Ctx(t, time.Minute), sb.ID)
	})
	marker := randMarker()
	startCounter(t, a, sb.ID, marker)
	count(t, a, sb.ID)
	boot := sh(t, a, sb.ID, bootID)

	// Bad input changes nothing.
	for _, body := range []string{`{"keep_memory":"no"}`, `{"keep_memory":false,"other":1}`, `[`} {
		resp, raw := do(t, a, "POST", "/v1/sandboxes/"+sb.ID+"/pause", body, nil)
		wantError(t, resp, raw, 400, "invalid_argument")
	}
	if got, err := a.Client.GetSandbox(ctx, sb.ID); err != nil || got.State != "running" {
		t.Fatalf("after refused pauses: %+v, %v", got, err)
	}

	paused, err := a.Client.PauseSandboxWith(ctx, sb.ID, client.PauseOptions{DiskOnly: true})
	if err != nil {
		t.Fatalf("disk-only pause: %v", err)
	}
	if paused.State != "paused" || paused.Checkpoint == nil || paused.Checkpoint.Memory {
		t.Fatalf("after a disk-only pause: %+v (checkpoint %+v)", paused, paused.Checkpoint)
	}
	if got := a.LeftoversAfter(sb.ID, 10*time.Second); len(got) > 0 {
		t.Fatalf("a disk-only pause left on the host: %v", got)
	}
	t.Logf("disk-only checkpoint: %d bytes in %d ms", paused.Checkpoint.Bytes, paused.Checkpoint.TookMS)

	// Node b shares the object store and resumes it: a fresh boot on the
	// saved disk, with its id, token, env and metadata.
	resumed, err := b.Client.ResumeSandbox(ctx, sb.ID, 600)
	if err != nil {
		t.Fatalf("resume on the other node: %v", err)
	}
	if resumed.State != "running" || resumed.Metadata["k"] != "v" {
		t.Fatalf("resumed: %+v", resumed)
	}
	if got := strings.TrimSpace(sh(t, b, sb.ID, "cat /home/user/marker")); got != marker {
		t.Fatalf("marker on the resumed disk: %q, want %q", got, marker)
	}
	if sh(t, b, sb.ID, bootID) == boot {
		t.Error("the resumed sandbox has the boot id of the paused one: it was restored, not booted")
	}
	if !counterGone(t, b, sb.ID) {
		t.Error("the counter process survived a pause that kept no memory")
	}
	if got := sh(t, b, sb.ID, "echo $KEPT; whoami; pwd"); got != "env\nuser\n/home/user\n" {
		t.Errorf("env, user and workdir after the reboot: %q", got)
	}
	// A later full pause and resume on b: memory again.
	startCounter(t, b, sb.ID, marker)
	n := count(t, b, sb.ID)
	if _, err := b.Client.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Client.ResumeSandbox(ctx, sb.ID, 600); err != nil {
		t.Fatal(err)
	}
	if got := count(t, b, sb.ID); got != n+1 {
		t.Fatalf("counter after a full pause following a disk-only one: %d, want %d", got, n+1)
	}
}

func TestAutoPauseDiskOnly(t *testing.T) {
	_, ds := checkpointNodes(t, "10.241.60.0/22")
	d := ds[0]
	ctx := harness.Ctx(t, 3*time.Minute)
	no := false
	for body, msg := range map[string]string{
		`{"auto_pause_keep_memory":false}`:                                      "needs auto-pause",
		`{"auto_pause":true,"auto_resume":true,"auto_pause_keep_memory":false}`: "auto-resume",
		`{"auto_pause":true,"auto_pause_keep_memory":"no"}`:                     `"auto_pause_keep_memory" must be a boolean`,
	} {
		resp, raw := do(t, d, "POST", "/v1/sandboxes", body, nil)
		if e := wantError(t, resp, raw, 400, "invalid_argument"); !strings.Contains(e.Error.Message, msg) {
			t.Errorf("%s: %q does not say %q", body, e.Error.Message, msg)
		}
	}
	if list, err := d.Client.ListSandboxes(ctx, client.ListOptions{}); err != nil || len(list.Sandboxes) != 0 {
		t.Fatalf("refused creates left sandboxes: %+v, %v", list, err)
	}

	sb, err := d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{TimeoutSeconds: 3, AutoPause: true, AutoPauseKeepMemory: &no})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Client.KillSandbox(harness.Ctx(t, time.Minute), sb.ID) })
	if sb.AutoPauseKeepMemory == nil || *sb.AutoPauseKeepMemory {
		t.Fatalf("create answered auto_pause_keep_memory %v, want false", sb.AutoPauseKeepMemory)
	}
	startCounter(t, d, sb.ID, randMarker())
	var got *client.Sandbox
	if !harness.WaitFor(30*time.Second, func() bool {
		got, err = d.Client.GetSandbox(ctx, sb.ID)
		return err == nil && got.State == "paused"
	}) {
		t.Fatalf("at its timeout: %+v, want paused", got)
	}
	if got.Checkpoint == nil || got.Checkpoint.Memory || got.Reason != "paused at timeout" {
		t.Fatalf("paused at timeout: %+v (checkpoint %+v), want a disk-only checkpoint", got, got.Checkpoint)
	}
	if _, err := d.Client.ResumeSandbox(ctx, sb.ID, 60); err != nil {
		t.Fatal(err)
	}
	if !counterGone(t, d, sb.ID) || sh(t, d, sb.ID, "cat /home/user/counter.py") == "" {
		t.Error("after a disk-only auto-pause: want the files and no counter process")
	}
}

func TestSnapshotsFullAndNamed(t *testing.T) {
	_, ds := checkpointNodes(t, "10.241.48.0/22")
	d := ds[0]
	ctx := harness.Ctx(t, 3*time.Minute)
	src := d.NewSandbox(t, client.CreateSandboxRequest{TimeoutSeconds: 600, Env: map[string]string{"FROM": "source"}})
	startCounter(t, d, src.ID, randMarker())
	n := count(t, d, src.ID)
	boot := sh(t, d, src.ID, bootID)

	// Refused, changing nothing.
	for body, code := range map[string]string{
		`{"name":"team/app"}`: "invalid_argument", `{"name":"-app"}`: "invalid_argument",
		`{"memory":1}`: "invalid_argument", `{"nope":true}`: "invalid_argument",
	} {
		resp, raw := do(t, d, "POST", "/v1/sandboxes/"+src.ID+"/snapshots", body, nil)
		wantError(t, resp, raw, 400, code)
	}
	resp, raw := do(t, d, "POST", "/v1/sandboxes/nosuchsandbox/snapshots", `{"memory":true}`, nil)
	wantError(t, resp, raw, 404, "not_found")
	if list, err := d.Client.ListSnapshots(ctx, ""); err != nil || len(list) != 0 {
		t.Fatalf("refused snapshots left %d: %v", len(list), err)
	}

	full, err := d.Client.TakeSnapshotWith(ctx, src.ID, client.SnapshotOptions{Memory: true, Name: "App"})
	if err != nil {
		t.Fatalf("full snapshot: %v", err)
	}
	if !full.Memory || full.Name != "app" || full.Tag != "default" {
		t.Fatalf("full snapshot: %+v", full)
	}
	// The source runs on.
	if got := count(t, d, src.ID); got != n+1 {
		t.Fatalf("source counter after the snapshot: %d, want %d", got, n+1)
	}
	// Two sandboxes from it, by name: each goes on from the snapshot's
	// memory, independently, with its own id and token.
	var copies []*client.Sandbox
	for range 2 {
		c := d.NewSandbox(t, client.CreateSandboxRequest{Snapshot: "app", Metadata: map[string]string{"copy": "yes"}, Env: map[string]string{"MINE": "1"}})
		if c.ID == src.ID || c.AccessToken == "" || c.AccessToken == src.AccessToken || c.Template != "base" || c.Metadata["copy"] != "yes" {
			t.Fatalf("sandbox from a full snapshot: %+v", c)
		}
		copies = append(copies, c)
	}
	for i, c := range copies {
		for step := 1; step <= i+1; step++ {
			if got := count(t, d, c.ID); got != n+step {
				t.Fatalf("copy %d step %d: counter %d, want %d", i, step, got, n+step)
			}
		}
		if got := sh(t, d, c.ID, "echo $FROM $MINE; "+bootID); got != "source 1\n"+boot {
			t.Errorf("copy %d: env and boot id %q, want the source's boot and both env vars", i, got)
		}
	}
	// Its limits are the snapshot's; another template is refused.
	resp, raw = do(t, d, "POST", "/v1/sandboxes", `{"snapshot":"app","memory_mb":1024}`, nil)
	wantError(t, resp, raw, 400, "invalid_argument")
	resp, raw = do(t, d, "POST", "/v1/sandboxes", `{"snapshot":"app","template":"nosuch"}`, nil)
	wantError(t, resp, raw, 400, "invalid_argument")

	// A disk snapshot under another tag; the same name and tag again
	// replaces the older.
	disk, err := d.Client.TakeSnapshotWith(ctx, src.ID, client.SnapshotOptions{Name: "app:disk"})
	if err != nil || disk.Memory || disk.Tag != "disk" {
		t.Fatalf("disk snapshot: %+v, %v", disk, err)
	}
	again, err := d.Client.TakeSnapshotWith(ctx, src.ID, client.SnapshotOptions{Memory: true, Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	list, err := d.Client.ListSnapshotsNamed(ctx, "", "app")
	if err != nil || len(list) != 2 || list[0].ID != again.ID || list[1].ID != disk.ID {
		t.Fatalf("snapshots named app: %+v, %v; want the replacement and the disk one", list, err)
	}
	resp, raw = do(t, d, "GET", "/v1/snapshots/"+full.ID, nil, nil)
	wantError(t, resp, raw, 404, "not_found")
	fromDisk := d.NewSandbox(t, client.CreateSandboxRequest{Snapshot: "app:disk"})
	if !counterGone(t, d, fromDisk.ID) || sh(t, d, fromDisk.ID, bootID) == boot {
		t.Error("a sandbox from a disk snapshot has the source's processes or boot")
	}
	if got := strings.TrimSpace(sh(t, d, fromDisk.ID, "cat /home/user/marker")); got == "" {
		t.Error("a sandbox from a disk snapshot lacks the source's files")
	}
	// Deleting the name deletes every tag.
	if err := d.Client.DeleteSnapshot(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if list, err := d.Client.ListSnapshots(ctx, ""); err != nil || len(list) != 0 {
		t.Fatalf("after deleting app: %+v, %v", list, err)
	}
	resp, raw = do(t, d, "POST", "/v1/sandboxes", `{"snapshot":"app"}`, nil)
	wantError(t, resp, raw, 404, "not_found")
	// The sandboxes made from it run on.
	for _, c := range copies {
		count(t, d, c.ID)
	}
}

// startBigDisk puts 200 MiB of random data on the sandbox's disk, so that
// a disk-only pause takes long enough to be interrupted.
func startBigDisk(t *testing.T, d *harness.Daemon, id string) {
	t.Helper()
	sh(t, d, id, "head -c 200M /dev/urandom > /home/user/big.bin && stat -c %s /home/user/big.bin")
}

// Faults in the middle of a disk-only pause, as for a full one: the object
// store going away, spaced killed. After each the sandbox runs on with its
// memory (the counter goes on), nothing restorable was left, and a later
// disk-only pause works.

func TestPauseFaultDiskOnlyStoreGoesAway(t *testing.T) {
	s3, ds := checkpointNodes(t, "10.241.144.0/22")
	d := ds[0]
	sb := d.NewSandbox(t, client.CreateSandboxRequest{TimeoutSeconds: 600})
	startCounter(t, d, sb.ID, randMarker())
	n := count(t, d, sb.ID)
	startBigDisk(t, d, sb.ID)

	whenImageGrows(d, 150<<20, time.Minute, s3.Stop)
	resp, body := do(t, d, "POST", "/v1/sandboxes/"+sb.ID+"/pause", `{"keep_memory":false}`, nil)
	e := wantError(t, resp, body, 503, "unavailable")
	t.Logf("disk-only pause with the store gone: %d %s", resp.StatusCode, e.Error.Message)
	if !strings.Contains(strings.ToLower(e.Error.Message), "store") {
		t.Errorf("error %q does not say the object store failed", e.Error.Message)
	}
	stillRunning(t, d, sb.ID, n+1)

	s3.Start(t)
	ctx := harness.Ctx(t, 2*time.Minute)
	if _, err := d.Client.PauseSandboxWith(ctx, sb.ID, client.PauseOptions{DiskOnly: true}); err != nil {
		t.Fatalf("disk-only pause once the store is back: %v", err)
	}
	if _, err := d.Client.ResumeSandbox(ctx, sb.ID, 600); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if got := strings.TrimSpace(sh(t, d, sb.ID, "stat -c %s /home/user/big.bin")); got != "209715200" || !counterGone(t, d, sb.ID) {
		t.Fatalf("after the disk-only pause and resume: big.bin %s bytes, want 209715200 and no counter", got)
	}
}

func TestPauseFaultDiskOnlyDaemonKilled(t *testing.T) {
	_, ds := checkpointNodes(t, "10.241.148.0/22")
	d := ds[0]
	sb := d.NewSandbox(t, client.CreateSandboxRequest{TimeoutSeconds: 600})
	startCounter(t, d, sb.ID, randMarker())
	n := count(t, d, sb.ID)
	startBigDisk(t, d, sb.ID)

	whenImageGrows(d, 50<<20, time.Minute, d.Kill9)
	if _, err := d.Client.PauseSandboxWith(harness.Ctx(t, 2*time.Minute), sb.ID, client.PauseOptions{DiskOnly: true}); err == nil {
		t.Fatal("disk-only pause answered although spaced was killed during it")
	}
	if err := d.Restart(); err != nil {
		t.Fatalf("restart spaced: %v", err)
	}
	// Recover thaws the sandbox the pause had frozen: it was never paused.
	stillRunning(t, d, sb.ID, n+1)
	ctx := harness.Ctx(t, 2*time.Minute)
	if _, err := d.Client.PauseSandboxWith(ctx, sb.ID, client.PauseOptions{DiskOnly: true}); err != nil {
		t.Fatalf("disk-only pause after the restart: %v", err)
	}
	if _, err := d.Client.ResumeSandbox(ctx, sb.ID, 600); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if got := strings.TrimSpace(sh(t, d, sb.ID, "stat -c %s /home/user/big.bin")); got != "209715200" {
		t.Fatalf("big.bin after resume: %q bytes", got)
	}
}
