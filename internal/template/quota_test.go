package template

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/recipe"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// buildQuota stands in for the sandbox service's ReserveBuild: limit
// builds at once, and what was asked for.
type buildQuota struct {
	mu                sync.Mutex
	limit, held, most int
	asked             [][2]int // cpu, memory of each reservation
	negative          bool     // released more than it took
}

func (q *buildQuota) reserve(_ context.Context, cpu, memoryMB int) (func(), error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.asked = append(q.asked, [2]int{cpu, memoryMB})
	if q.held >= q.limit {
		return nil, errdefs.WithDetails(errdefs.ErrQuotaExceeded, map[string]any{"quota": "builds"}, "tenant acme is at its builds quota")
	}
	q.held++
	q.most = max(q.most, q.held)
	return func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		q.held--
		q.negative = q.negative || q.held < 0
	}, nil
}

func (q *buildQuota) state() (held, asked int, negative bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.held, len(q.asked), q.negative
}

// TestBuildQuota: both ways into a build (StartBuild, and E2B's
// TriggerBuild of a waiting build) take the build from its tenant's
// quotas before anything of it is made; a refused one leaves no build (a
// waiting one stays waiting), and the build gives its share back however
// it ends: refused at submission, canceled in the queue, or cut off by a
// shutdown of spaced.
func TestBuildQuota(t *testing.T) {
	ctx := tenant.NewContext(context.Background(), tenant.Principal{Tenant: "acme", Key: "k1"})
	src := &recipe.Recipe{From: recipe.Source{Template: "src"}, Steps: []recipe.Step{{Env: []recipe.EnvVar{{Name: "A", Value: "1"}}}}}
	start := func(s *Service, name string, r *recipe.Recipe) (*Build, error) {
		return s.StartBuild(ctx, BuildRequest{Name: name, Recipe: r, CPU: 2, MemoryMB: 768})
	}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, e *testEnv, q *buildQuota)
	}{
		{"refused at submission makes nothing", func(t *testing.T, e *testEnv, q *buildQuota) {
			q.limit = 0
			_, err := start(e.s, "app", src)
			if d, _ := errdefs.Details(err).(map[string]any); !errors.Is(err, errdefs.ErrQuotaExceeded) || d["quota"] != "builds" {
				t.Fatalf("a build over the quota: %v, want the quota refusal", err)
			}
			if _, err := e.st.GetTemplate(ctx, "app"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("the refused build's template: %v, want none made", err)
			}
			if bs, _ := e.st.ListBuilds(ctx); len(bs) != 1 { // src's
				t.Errorf("%d builds recorded, want none more", len(bs)-1)
			}
		}},
		{"the build's size is what is reserved", func(t *testing.T, e *testEnv, q *buildQuota) {
			if _, err := start(e.s, "app", &recipe.Recipe{}); err == nil {
				t.Fatal("a recipe without a source was accepted")
			}
			if len(q.asked) != 1 || q.asked[0] != [2]int{2, 768} {
				t.Errorf("reserved %v, want 2 vCPUs and 768 MiB", q.asked)
			}
		}},
		{"bad limits are refused before the quota", func(t *testing.T, e *testEnv, q *buildQuota) {
			_, err := e.s.StartBuild(ctx, BuildRequest{Name: "app", Recipe: src, MemoryMB: 1})
			if !errors.Is(err, errdefs.ErrInvalidArgument) || len(q.asked) != 0 {
				t.Errorf("memory_mb 1: %v after %d reservations, want invalid argument before any", err, len(q.asked))
			}
		}},
		{"a failed submission gives it back", func(t *testing.T, e *testEnv, q *buildQuota) {
			for _, r := range []*recipe.Recipe{nil, {From: recipe.Source{Template: "missing"}}} {
				if _, err := start(e.s, "app", r); err == nil {
					t.Fatalf("recipe %+v accepted", r)
				}
			}
		}},
		{"a canceled queued build gives it back", func(t *testing.T, e *testEnv, q *buildQuota) {
			fillSlots(e.s)
			b, err := start(e.s, "app", src)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := start(e.s, "app2", src); !errors.Is(err, errdefs.ErrQuotaExceeded) {
				t.Fatalf("a second build while the first is queued: %v, want the quota refusal", err)
			}
			if _, err := e.s.CancelBuild(ctx, b.ID); err != nil {
				t.Fatal(err)
			}
			waitReleased(t, q)
			if _, err := start(e.s, "app3", src); err != nil {
				t.Fatalf("a build after the first was canceled: %v", err)
			}
		}},
		{"E2B: a waiting build holds nothing; a refused trigger leaves it waiting", func(t *testing.T, e *testEnv, q *buildQuota) {
			fillSlots(e.s)
			w, err := e.s.RequestBuild(ctx, BuildRequest{Name: "e2b-app", CPU: 1, MemoryMB: 512, Origin: "e2b"})
			if err != nil {
				t.Fatal(err)
			}
			if _, asked, _ := q.state(); asked != 0 {
				t.Fatalf("a waiting build reserved %d", asked)
			}
			held, err := start(e.s, "app", src)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.s.TriggerBuild(ctx, w.ID, BuildRequest{Recipe: src}); !errors.Is(err, errdefs.ErrQuotaExceeded) {
				t.Fatalf("trigger at the quota: %v, want the quota refusal", err)
			}
			if b, _ := e.st.GetBuild(ctx, w.ID); b.State != store.BuildWaiting {
				t.Fatalf("the refused trigger's build is %s, want still waiting", b.State)
			}
			if q.asked[len(q.asked)-1] != [2]int{1, 512} {
				t.Errorf("the trigger asked for %v, want the waiting build's 1 vCPU and 512 MiB", q.asked[len(q.asked)-1])
			}
			e.s.CancelBuild(ctx, held.ID)
			waitReleased(t, q)
			if _, err := e.s.TriggerBuild(ctx, w.ID, BuildRequest{Recipe: src}); err != nil {
				t.Fatalf("trigger once the slot is free: %v", err)
			}
		}},
		{"a shutdown gives it back", func(t *testing.T, e *testEnv, q *buildQuota) {
			fillSlots(e.s)
			if _, err := start(e.s, "app", src); err != nil {
				t.Fatal(err)
			}
			// The Close after each case is spaced's shutdown.
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &buildQuota{limit: 1}
			e := newTestService(t, func(c *Config) {
				c.ReserveBuild = q.reserve
				c.Defaults = runtime.Limits{CPUs: 1, MemoryMB: 512, DiskMB: 1024, MaxProcs: 256}
			})
			e.storeLayer(t, key('a'), map[string]string{"f": "x"})
			e.readyBuild(t, "src-1", "src", []string{key('a')}, "", DefaultTag)
			tc.run(t, e, q)
			e.s.Close() // ends what is queued; every build's share is back after it
			if held, _, negative := q.state(); held != 0 || negative {
				t.Errorf("at the end %d builds held (released more than taken: %v), want 0", held, negative)
			}
			if q.most > q.limit {
				t.Errorf("%d builds held at once, limit %d", q.most, q.limit)
			}
		})
	}
}

// fillSlots takes every build slot of s, so builds stay queued.
func fillSlots(s *Service) {
	for range cap(s.slots) {
		s.slots <- struct{}{}
	}
}

// waitReleased waits until q holds no build (a build gives its share back
// after its end is recorded, in its own goroutine).
func waitReleased(t *testing.T, q *buildQuota) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if held, _, _ := q.state(); held == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the build's share of the quota was not given back")
		}
	}
}
