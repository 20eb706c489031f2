package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// TestBuildBoxes: a build's sandbox boots like any other but is its
// build's alone: no lookup, list, kill or owner check of a caller reaches
// it, and its Close tears it down.
func TestBuildBoxes(t *testing.T) {
	w := newWorld(t, worldOptions{})
	ctx := context.Background()
	boxes := NewBuildBoxes(w.svc)
	spec := BuildBoxSpec{Template: "t1", Image: "img-1", Root: w.root, Timeout: time.Minute,
		Limits: runtime.Limits{CPUs: 1, MemoryMB: 256, DiskMB: 256, MaxProcs: 256}}
	if _, err := boxes.StartBuildBox(ctx, spec); err == nil {
		t.Fatal("a build box without a build started")
	}
	spec.Build = "b1"
	box, err := boxes.StartBuildBox(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	w.accounted(box.ID)
	if n := w.svc.Running(); n != 1 {
		t.Errorf("Running = %d, want the build box", n)
	}
	targets := NewTargets(w.svc)
	for name, call := range map[string]func() error{
		"Get":    func() error { _, err := w.svc.Get(ctx, box.ID); return err },
		"Kill":   func() error { return w.svc.Kill(ctx, box.ID) },
		"Target": func() error { _, err := targets.Target(box.ID); return err },
		"Agent":  func() error { _, err := targets.Agent(box.ID); return err },
		"Pause":  func() error { _, err := w.svc.Checkpoints().Pause(ctx, box.ID, PauseOptions{}); return err },
	} {
		if err := call(); errdefs.Class(err) != errdefs.ErrNotFound {
			t.Errorf("%s of a build box: %v, want not_found", name, err)
		}
	}
	if sbs, err := w.svc.List(ctx, ListFilter{}); err != nil || len(sbs) != 0 {
		t.Errorf("List = %v (%v), want no sandbox", sbs, err)
	}
	if _, known := w.svc.Owner(ctx, box.ID); known {
		t.Error("a build box has an owner")
	}
	box.Close(ctx)
	w.accounted()
}

// TestBuildQuota: a build holds one of its tenant's builds and its
// vCPUs and memory beside the tenant's sandboxes, not one of its
// sandboxes, from ReserveBuild to its release; the admin is not limited.
func TestBuildQuota(t *testing.T) {
	q := store.Quotas{Sandboxes: 1, Builds: 1, VCPU: 4, MemoryMB: 768}
	w := newWorld(t, worldOptions{checkpoints: true, quotas: func(string) store.Quotas { return q }})
	ctx := tenant.NewContext(context.Background(), tenant.Principal{Tenant: "acme", Key: "k1"})
	usage := func(want tenant.Usage) {
		t.Helper()
		if u, err := w.svc.Usage(ctx, "acme"); err != nil || u != want {
			t.Fatalf("usage %+v, %v; want %+v", u, err, want)
		}
	}
	refused := func(what string, err error, quota string) {
		t.Helper()
		if d, _ := errdefs.Details(err).(map[string]any); errdefs.Class(err) != errdefs.ErrQuotaExceeded || d["quota"] != quota {
			t.Fatalf("%s: %v (%v), want a refusal naming %s", what, err, errdefs.Details(err), quota)
		}
	}
	release, err := w.svc.ReserveBuild(ctx, 2, 512)
	if err != nil {
		t.Fatal(err)
	}
	usage(tenant.Usage{Builds: 1, VCPU: 2, MemoryMB: 512})
	_, err = w.svc.ReserveBuild(ctx, 1, 128)
	refused("a second build at builds=1", err, "builds")
	// At its sandboxes quota a tenant still builds, and a sandbox does not
	// count the build among the sandboxes; their memory adds up.
	sb, err := w.svc.Create(ctx, CreateRequest{CPU: 1, MemoryMB: 256})
	if err != nil {
		t.Fatalf("a sandbox beside a build: %v", err)
	}
	usage(tenant.Usage{Sandboxes: 1, Builds: 1, VCPU: 3, MemoryMB: 768})
	release()
	release() // a second release gives back nothing more
	usage(tenant.Usage{Sandboxes: 1, VCPU: 1, MemoryMB: 256})
	_, err = w.svc.ReserveBuild(ctx, 1, 1024)
	refused("a build over memory_mb beside a sandbox", err, "memory_mb")
	release, err = w.svc.ReserveBuild(ctx, 1, 512)
	if err != nil {
		t.Fatalf("a build at the sandboxes quota: %v", err)
	}
	_, err = w.svc.Create(ctx, CreateRequest{CPU: 1, MemoryMB: 128})
	refused("a second sandbox", err, "sandboxes")
	admin, err := w.svc.ReserveBuild(tenant.NewContext(context.Background(), tenant.Admin), 8, 8192)
	if err != nil {
		t.Fatalf("the admin's build: %v", err)
	}
	admin()
	release()
	usage(tenant.Usage{Sandboxes: 1, VCPU: 1, MemoryMB: 256})
	w.accounted(sb.ID)
}
