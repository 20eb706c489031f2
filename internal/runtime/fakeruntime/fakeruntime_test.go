package fakeruntime_test

import (
	"context"
	"errors"
	"testing"

	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/runtime/fakeruntime"
	"github.com/spacesandbox/space/internal/runtime/runtimetest"
)

// TestConformance runs the runtime conformance suite against the fake.
// What does not apply to a runtime without processes, and is not faked:
//   - Usage: the fake implements no runtime.UsageReader (it would have to
//     invent CPU time and memory), so the suite skips it;
//   - Leftovers are the fake's own table and Boot hooks, not host
//     processes, cgroups or mounts;
//   - Checkpoint's images hold the checkpointed spec, not memory: a
//     restore starts a sandbox in the running state, nothing resumes.
func TestConformance(t *testing.T) {
	base := fakeruntime.New(fakeruntime.Options{})
	runtimetest.Run(t, runtimetest.Harness{
		// Each New sees the same sandboxes, as a driver made again after a
		// restart does (ReattachAfterNewInstance).
		New: func(t *testing.T) runtime.Runtime { return base.Reopen(fakeruntime.Options{}) },
		Spec: func(t *testing.T, id string) runtime.Spec {
			return runtime.Spec{ID: id, RootFS: t.TempDir(), Args: []string{"/init"}, Limits: runtime.Limits{CPUs: 1, MemoryMB: 128, DiskMB: 64, MaxProcs: 64}}
		},
		Leftovers:   func(t *testing.T, id string) []string { return base.Leftovers(id) },
		CPUPriority: func(t *testing.T, id string) int { return base.Priority(id) },
		CPULimit:    func(t *testing.T, id string) float64 { return float64(base.Limits(id).CPUs) },
	})
}

// TestFailAndKill: an injected failure changes nothing; a killed sandbox
// is stopped with its reason and its Boot hook stopped.
func TestFailAndKill(t *testing.T) {
	ctx := context.Background()
	stopped := map[string]bool{}
	r := fakeruntime.New(fakeruntime.Options{Boot: func(b fakeruntime.Boot) (func(), error) {
		return func() { stopped[b.Spec.ID] = true }, nil
	}})
	spec := runtime.Spec{ID: "a", RootFS: t.TempDir()}
	boom := errors.New("boom")
	r.FailOnce(fakeruntime.OpCreate, boom)
	if err := r.Run(ctx, spec); !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want the injected failure", err)
	}
	if left := r.Leftovers("a"); len(left) > 0 {
		t.Fatalf("a failed create left %v", left)
	}
	r.FailOnce(fakeruntime.OpStart, boom)
	if err := r.Run(ctx, spec); !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want the injected failure at its start", err)
	}
	if left := r.Leftovers("a"); len(left) > 0 {
		t.Fatalf("a failed start left %v", left)
	}
	if err := r.Run(ctx, spec); err != nil {
		t.Fatal(err)
	}
	r.Kill("a", "out of memory")
	if st, _ := r.State(ctx, "a"); st != runtime.StateStopped || !stopped["a"] {
		t.Fatalf("after Kill: state %s, hook stopped %v", st, stopped["a"])
	}
	if why := r.ExitReason(ctx, "a"); why != "out of memory" {
		t.Fatalf("ExitReason = %q", why)
	}
	if err := r.Destroy(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if left := r.Leftovers("a"); len(left) > 0 {
		t.Fatalf("left %v", left)
	}
}
