package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/tenant"
)

// TestTargets: Targets finds a running sandbox and nothing else. A running
// one is found by every lookup; a paused one only by AutoResumeTarget, and
// only when it was created with auto-resume and kept its memory; a pooled
// (unclaimed) one and a killed one by none.
func TestTargets(t *testing.T) {
	w := newWorld(t, worldOptions{checkpoints: true, pool: &PoolConfig{Template: "base", Min: 1, Max: 1}})
	ctx := tenant.NewContext(context.Background(), tenant.Principal{Tenant: "alice"})
	w.svc.StartPools(ctx)
	waitFor(t, "the pool to fill", func() bool { return w.svc.Pools().PoolSizes()["base"] == 1 })
	pooledID := pooled(w.svc)[0]
	targets := NewTargets(w.svc)
	create := func(req CreateRequest) *Sandbox {
		t.Helper()
		req.Template, req.NoPool = "base", true
		sb, err := w.svc.Create(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	running := create(CreateRequest{})
	wakes := create(CreateRequest{AutoPause: true, AutoResume: true})
	diskOnly := create(CreateRequest{AutoPause: true, AutoResume: true})
	plain := create(CreateRequest{})
	killed := create(CreateRequest{})
	for _, p := range []struct {
		sb   *Sandbox
		opts PauseOptions
	}{{wakes, PauseOptions{}}, {diskOnly, PauseOptions{DiskOnly: true}}, {plain, PauseOptions{}}} {
		if _, err := w.svc.Checkpoints().Pause(ctx, p.sb.ID, p.opts); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.svc.Kill(ctx, killed.ID); err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{running.ID: running.AccessToken, wakes.ID: wakes.AccessToken, pooledID: ""}

	for _, tc := range []struct {
		name, id         string
		runs, autoResume bool
	}{
		{"running", running.ID, true, false},
		{"paused with auto-resume", wakes.ID, false, true},
		{"paused to its disk", diskOnly.ID, false, false},
		{"paused without auto-resume", plain.ID, false, false},
		{"killed", killed.ID, false, false},
		{"pooled", pooledID, false, false},
		{"unknown", "nobody", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := targets.Runs(tc.id); got != tc.runs {
				t.Errorf("Runs = %v, want %v", got, tc.runs)
			}
			tg, err := targets.Target(tc.id)
			_, aerr := targets.Agent(tc.id)
			if tc.runs {
				if err != nil || tg.ID != tc.id || !tg.IP.IsValid() || tg.AccessToken != tokens[tc.id] || aerr != nil {
					t.Errorf("Target = %+v (%v), Agent: %v; want its address and token", tg, err, aerr)
				}
			} else if errdefs.Class(err) != errdefs.ErrNotFound || errdefs.Class(aerr) != errdefs.ErrNotFound {
				t.Errorf("Target: %v, Agent: %v; want not_found", err, aerr)
			}
			at, err := targets.AutoResumeTarget(ctx, tc.id)
			if tc.autoResume {
				if err != nil || at.AccessToken != tokens[tc.id] || at.Tenant != "alice" || at.IP.IsValid() {
					t.Errorf("AutoResumeTarget = %+v (%v), want its token and tenant and no address", at, err)
				}
			} else if errdefs.Class(err) != errdefs.ErrNotFound {
				t.Errorf("AutoResumeTarget: %v, want not_found", err)
			}
			if tok := tokens[tc.id]; tok != "" {
				id, ok := targets.FindRunning(func(got string) bool { return got == tok })
				if ok != tc.runs || ok && id != tc.id {
					t.Errorf("FindRunning by its token = %q, %v; want found %v", id, ok, tc.runs)
				}
			}
		})
	}
	// Resumed, the auto-resume sandbox is found again, under its token.
	if _, err := w.svc.Checkpoints().Resume(ctx, wakes.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	if tg, err := targets.Target(wakes.ID); err != nil || tg.AccessToken != wakes.AccessToken {
		t.Errorf("Target after the resume = %+v (%v)", tg, err)
	}
}
