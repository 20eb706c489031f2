package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// Faults in the middle of a pause: the object store going away, spaced
// killed, the disk filling. After each the checkpoint is never restorable,
// the sandbox is still running with its state, the error says what
// happened, and a later pause works.

// bigState makes the sandbox hold about 200 MiB of memory that a checkpoint
// must save, so a pause takes long enough to be interrupted.
const bigState = `import os, time
chunk = os.urandom(1 << 20)
hold = bytearray(chunk) * 200
open("/home/user/big.ready", "w").write("ok")
while True:
    time.sleep(1)
`

func startBigState(t *testing.T, d *harness.Daemon, id string) {
	t.Helper()
	if _, err := d.Client.Upload(harness.Ctx(t, 30*time.Second), id, "/home/user/big.py", strings.NewReader(bigState)); err != nil {
		t.Fatal(err)
	}
	sh(t, d, id, "nohup python3 /home/user/big.py >/dev/null 2>&1 & for i in $(seq 300); do [ -e /home/user/big.ready ] && break; sleep 0.1; done; cat /home/user/big.ready")
}

// whenImageGrows calls fn once the checkpoint image being written for the
// pause has passed minBytes, or after timeout.
func whenImageGrows(d *harness.Daemon, minBytes int64, timeout time.Duration, fn func()) {
	go func() {
		harness.WaitFor(timeout, func() bool {
			var total int64
			filepath.Walk(filepath.Join(d.DataDir, "images"), func(_ string, fi os.FileInfo, err error) error {
				if err == nil && fi.Mode().IsRegular() {
					total += fi.Size()
				}
				return nil
			})
			return total >= minBytes
		})
		fn()
	}()
}

// stillRunning checks that a sandbox whose pause failed goes on as before.
func stillRunning(t *testing.T, d *harness.Daemon, id string, wantCount int) {
	t.Helper()
	sb, err := d.Client.GetSandbox(harness.Ctx(t, 30*time.Second), id)
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != "running" || sb.Checkpoint != nil {
		t.Fatalf("after a failed pause: state %s, checkpoint %+v; want running without a checkpoint", sb.State, sb.Checkpoint)
	}
	if got := count(t, d, id); got != wantCount {
		t.Fatalf("counter after a failed pause = %d, want %d", got, wantCount)
	}
}

func TestPauseFaultStoreGoesAway(t *testing.T) {
	s3, ds := checkpointNodes(t, "10.241.240.0/22")
	d := ds[0]
	sb := d.NewSandbox(t, client.CreateSandboxRequest{TimeoutSeconds: 600})
	startCounter(t, d, sb.ID, randMarker())
	n := count(t, d, sb.ID)
	startBigState(t, d, sb.ID)

	whenImageGrows(d, 150<<20, time.Minute, s3.Stop)
	resp, body := do(t, d, "POST", "/v1/sandboxes/"+sb.ID+"/pause", nil, nil)
	e := wantError(t, resp, body, 503, "unavailable")
	t.Logf("pause with the store gone: %d %s", resp.StatusCode, e.Error.Message)
	if !strings.Contains(strings.ToLower(e.Error.Message), "store") {
		t.Errorf("error %q does not say the object store failed", e.Error.Message)
	}
	stillRunning(t, d, sb.ID, n+1)

	s3.Start(t)
	if _, err := d.Client.PauseSandbox(harness.Ctx(t, 2*time.Minute), sb.ID); err != nil {
		t.Fatalf("pause once the store is back: %v", err)
	}
	if _, err := d.Client.ResumeSandbox(harness.Ctx(t, 2*time.Minute), sb.ID, 600); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if got := count(t, d, sb.ID); got != n+2 {
		t.Fatalf("counter after resume = %d, want %d", got, n+2)
	}
}

func TestPauseFaultDaemonKilled(t *testing.T) {
	_, ds := checkpointNodes(t, "10.241.244.0/22")
	d := ds[0]
	sb := d.NewSandbox(t, client.CreateSandboxRequest{TimeoutSeconds: 600})
	startCounter(t, d, sb.ID, randMarker())
	n := count(t, d, sb.ID)
	startBigState(t, d, sb.ID)

	whenImageGrows(d, 50<<20, time.Minute, d.Kill9)
	if _, err := d.Client.PauseSandbox(harness.Ctx(t, 2*time.Minute), sb.ID); err == nil {
		t.Fatal("pause answered although spaced was killed during it")
	}
	if err := d.Restart(); err != nil {
		t.Fatalf("restart spaced: %v", err)
	}
	// Recover thaws the sandbox the pause had frozen: it was never paused.
	stillRunning(t, d, sb.ID, n+1)
	if _, err := d.Client.PauseSandbox(harness.Ctx(t, 2*time.Minute), sb.ID); err != nil {
		t.Fatalf("pause after the restart: %v", err)
	}
	if _, err := d.Client.ResumeSandbox(harness.Ctx(t, 2*time.Minute), sb.ID, 600); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if got := count(t, d, sb.ID); got != n+2 {
		t.Fatalf("counter after resume = %d, want %d", got, n+2)
	}
}

func TestPauseFaultDiskFull(t *testing.T) {
	// spaced's images dir, where checkpoints are written before upload, on
	// a filesystem that a 200 MiB checkpoint cannot fit on. It is
	// unmounted after the daemon's shutdown (cleanups run last first).
	var images string
	d := ownDaemon(t, harness.Options{Name: "diskfull", CIDR: "10.241.248.0/22", NoPool: true,
		Prepare: func(dataDir string) error {
			images = filepath.Join(dataDir, "images")
			if err := os.MkdirAll(images, 0o700); err != nil {
				return err
			}
			t.Cleanup(func() { syscall.Unmount(images, syscall.MNT_DETACH) })
			return syscall.Mount("tmpfs", images, "tmpfs", 0, "size=120m")
		}})

	sb := d.NewSandbox(t, client.CreateSandboxRequest{TimeoutSeconds: 600})
	startCounter(t, d, sb.ID, randMarker())
	n := count(t, d, sb.ID)
	startBigState(t, d, sb.ID)
	resp, body := do(t, d, "POST", "/v1/sandboxes/"+sb.ID+"/pause", nil, nil)
	e := wantError(t, resp, body, 507, "resource_exhausted")
	t.Logf("pause on a full disk: %s", e.Error.Message)
	stillRunning(t, d, sb.ID, n+1)
	if entries, _ := os.ReadDir(images); len(entries) > 0 {
		t.Errorf("the failed pause left its image behind: %d entries in %s", len(entries), images)
	}
	// With room again, the pause works.
	if err := syscall.Mount("tmpfs", images, "tmpfs", syscall.MS_REMOUNT, "size=1g"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client.PauseSandbox(harness.Ctx(t, 2*time.Minute), sb.ID); err != nil {
		t.Fatalf("pause with room: %v", err)
	}
	if _, err := d.Client.ResumeSandbox(harness.Ctx(t, 2*time.Minute), sb.ID, 600); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if got := count(t, d, sb.ID); got != n+2 {
		t.Fatalf("counter after resume = %d, want %d", got, n+2)
	}
}
