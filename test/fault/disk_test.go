package fault

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// TestDataDiskFull puts spaced's data dir on a small tmpfs of the test's
// own and fills it: a create fails with a 507 (or admission control's 503)
// JSON error and leaves
// nothing behind, a running sandbox keeps working, and creates succeed
// again once space is freed.
func TestDataDiskFull(t *testing.T) {
	harness.Need(t)
	mnt, err := os.MkdirTemp(harness.Tmp(), "disk-")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=64m,mode=0700"); err != nil {
		t.Fatalf("mount a tmpfs for the data dir: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(mnt, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	d := ownDaemon(t, harness.Options{Name: "disk", CIDR: "10.246.64.0/20", DataDir: filepath.Join(mnt, "data")})
	ctx := harness.Ctx(t, 2*time.Minute)
	before, err := d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{TimeoutSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}

	filler := filepath.Join(mnt, "filler")
	if err := fill(filler); err != nil {
		t.Fatal(err)
	}
	// Admission control refuses it (503 node_at_capacity, the host's disk)
	// once its sample saw the disk full; before that (a second at most)
	// the boot's own write fails (507).
	_, err = d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{TimeoutSeconds: 600})
	wantAPIError(t, "create with the data disk full", err, 507, 503)
	if apiErr := (*client.APIError)(nil); errors.As(err, &apiErr) && apiErr.Status == 503 && apiErr.Code != client.CodeNodeAtCapacity {
		t.Errorf("create with the data disk full: 503 %s, want node_at_capacity", apiErr.Code)
	}
	checkNoOrphans(t, d)
	if out, err := tryRun(ctx, d, before.ID, "echo still"); err != nil || out != "still\n" {
		t.Errorf("a sandbox made before the disk filled: %q %v", out, err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	after, err := d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{TimeoutSeconds: 600})
	if err != nil {
		t.Fatalf("create once space is free again: %v", err)
	}
	if out := run(t, d, after.ID, "echo ok"); out != "ok\n" {
		t.Errorf("sandbox made after the disk was freed printed %q", out)
	}
}

// fill writes path until its filesystem is full.
func fill(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return nil
			}
			return fmt.Errorf("fill %s: %w", path, err)
		}
	}
}
