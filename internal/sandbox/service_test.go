package sandbox

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/network"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/runtime/fakeruntime"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// These tests run the service on fakes (fake_test.go): no root, no
// namespaces, no mounts, no runsc.

func TestCreateCold(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		// inits is how many Init calls the agent gets: boot's, and the
		// claim's only when the caller has env vars of its own.
		inits int
	}{
		{name: "no env", inits: 1},
		{name: "env", env: map[string]string{"FOO": "bar"}, inits: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, worldOptions{})
			ctx := context.Background()
			sb, err := w.svc.Create(ctx, CreateRequest{Env: tc.env})
			if err != nil {
				t.Fatal(err)
			}
			rec, err := w.st.GetSandbox(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if rec.State != store.StateRunning || sb.AccessToken == "" || rec.AccessToken != sb.AccessToken {
				t.Fatalf("record %s, token %q (record's %q)", rec.State, sb.AccessToken, rec.AccessToken)
			}
			a := w.agent(sb.ID)
			if a == nil {
				t.Fatal("no agent running")
			}
			a.mu.Lock()
			inits, token := len(a.inits), a.token
			a.mu.Unlock()
			if inits != tc.inits || token != sb.AccessToken {
				t.Fatalf("agent got %d inits and holds token %q, want %d and the sandbox's", inits, token, tc.inits)
			}
			if st, _ := w.rt.State(ctx, sb.ID); st != runtime.StateRunning {
				t.Fatalf("runtime state %s", st)
			}
			if p := w.rt.Priority(sb.ID); p != fakeruntime.Normal {
				t.Errorf("a cold sandbox's CPU priority is %d", p)
			}
			w.accounted(sb.ID)
		})
	}
}

// TestCreateFailures: a create that fails at any step leaves nothing:
// no record, runtime sandbox, network or agent.
func TestCreateFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inject func(w *world)
		class  error
	}{
		{"network", func(w *world) {
			w.net.failAttach = func(network.Endpoint) error { return errInjected }
		}, errdefs.ErrUnavailable},
		{"runtime create", func(w *world) { w.rt.FailOnce(fakeruntime.OpCreate, errInjected) }, nil},
		{"runtime start", func(w *world) { w.rt.FailOnce(fakeruntime.OpStart, errInjected) }, nil},
		{"boot hook fails (start fails)", func(w *world) {
			w.bootFails = func(string) error { return errInjected }
		}, nil},
		{"agent never answers", func(w *world) {
			w.bootFails = func(string) error { return errNoAgent }
		}, errdefs.ErrUnavailable},
		{"boot init", func(w *world) { w.initFails = errInjected }, errdefs.ErrUnavailable},
		{"claim record", func(w *world) {
			w.st.setFailUpdate(func(rec *store.Sandbox) error {
				if rec.State == store.StateRunning {
					return errInjected
				}
				return nil
			})
		}, nil},
		{"claim finds it dead", func(w *world) {
			w.rt.Fail(fakeruntime.OpState, func(string) error { return errInjected })
		}, errdefs.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, worldOptions{})
			w.svc.booter.agentBootTimeout = 500 * time.Millisecond
			tc.inject(w)
			_, err := w.svc.Create(context.Background(), CreateRequest{Env: map[string]string{"A": "b"}})
			if err == nil {
				t.Fatal("create succeeded")
			}
			if tc.class != nil && !errors.Is(err, tc.class) {
				t.Errorf("error %v is not of class %v", err, tc.class)
			}
			w.rt.Fail(fakeruntime.OpState, nil)
			w.accounted()
			if recs, _ := w.st.ListSandboxes(context.Background()); len(recs) != 0 {
				t.Errorf("records left: %d", len(recs))
			}
		})
	}
}

// TestCreateRangeInUse: a slot whose range is in use on the host is
// quarantined and the next one taken.
func TestCreateRangeInUse(t *testing.T) {
	w := newWorld(t, worldOptions{})
	first := true
	w.net.failAttach = func(network.Endpoint) error {
		if first {
			first = false
			return network.ErrRangeInUse
		}
		return nil
	}
	sb, err := w.svc.Create(context.Background(), CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := w.st.GetSandbox(context.Background(), sb.ID)
	if rec.Slot == 0 || !w.svc.booter.slots.avoid(0) {
		t.Errorf("sandbox on slot %d; slot 0 quarantined: %v", rec.Slot, w.svc.booter.slots.avoid(0))
	}
	w.accounted(sb.ID)
}

// pooled returns the ids of the pool's ready sandboxes, oldest first.
func pooled(s *Service) []string {
	p := s.pools.byTemplate["base"]
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	for _, b := range p.ready {
		ids = append(ids, b.rec.ID)
	}
	return ids
}

func TestCreateFromPool(t *testing.T) {
	for _, tc := range []struct {
		name string
		// dead is how many of the pool's sandboxes die before the claim.
		dead int
		// fromPool: the create is served by the pool.
		fromPool bool
	}{
		{"alive", 0, true},
		{"first dead, next taken", 1, true},
		{"all dead, cold boot", 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, worldOptions{pool: &PoolConfig{Template: "base", Min: 2, Max: 2}})
			ctx := context.Background()
			w.svc.StartPools(ctx)
			waitFor(t, "the pool to fill", func() bool { return w.svc.Pools().PoolSizes()["base"] == 2 })
			ready := pooled(w.svc)
			for _, id := range ready {
				if p := w.rt.Priority(id); p != fakeruntime.Normal {
					t.Errorf("a booted pool sandbox's priority is %d: Foreground not called", p)
				}
			}
			for _, id := range ready[:tc.dead] {
				w.rt.Kill(id, "killed on the host")
			}
			sb, err := w.svc.Create(ctx, CreateRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Contains(ready, sb.ID); got != tc.fromPool {
				t.Fatalf("sandbox %s from the pool: %v, want %v (pool had %v)", sb.ID, got, tc.fromPool, ready)
			}
			if tc.fromPool && sb.ID != ready[tc.dead] {
				t.Errorf("claimed %s, want the first live one %s", sb.ID, ready[tc.dead])
			}
			for _, id := range ready[:tc.dead] {
				if _, err := w.st.GetSandbox(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
					t.Errorf("dead pooled sandbox %s: record still there (%v)", id, err)
				}
			}
			// Stop the pools (their ready sandboxes are torn down): what
			// is left is the claimed sandbox alone.
			w.svc.Close()
			w.accounted(sb.ID)
		})
	}
}

// TestCreateFromPoolResized: a request for other limits takes a pooled
// sandbox when the runtime can give them in place (the fake changes CPUs
// only), and the sandbox, its record and the runtime all have the
// caller's; a request for limits the runtime cannot change boots its own;
// a failed resize never hands the pooled sandbox out.
func TestCreateFromPoolResized(t *testing.T) {
	for _, tc := range []struct {
		name     string
		req      CreateRequest
		fail     bool
		fromPool bool
	}{
		{"cpu", CreateRequest{CPU: 4}, false, true},
		{"memory", CreateRequest{MemoryMB: 512}, false, false},
		{"cpu, resize fails", CreateRequest{CPU: 4}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, worldOptions{pool: &PoolConfig{Template: "base", Min: 1, Max: 1}})
			ctx := context.Background()
			w.svc.StartPools(ctx)
			waitFor(t, "the pool to fill", func() bool { return w.svc.Pools().PoolSizes()["base"] == 1 })
			ready := pooled(w.svc)
			if tc.fail {
				w.rt.Fail(fakeruntime.OpResize, func(string) error { return errors.New("cgroup write failed") })
			}
			sb, err := w.svc.Create(ctx, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Contains(ready, sb.ID); got != tc.fromPool {
				t.Fatalf("sandbox %s from the pool: %v, want %v", sb.ID, got, tc.fromPool)
			}
			want := runtime.Limits{CPUs: 1, MemoryMB: 256, DiskMB: 256, MaxProcs: 256}
			if tc.req.CPU != 0 {
				want.CPUs = tc.req.CPU
			}
			if tc.req.MemoryMB != 0 {
				want.MemoryMB = tc.req.MemoryMB
			}
			rec, err := w.st.GetSandbox(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got := w.rt.Limits(sb.ID); got != want || recordLimits(rec) != want || sb.CPU != want.CPUs || sb.MemoryMB != want.MemoryMB {
				t.Errorf("limits: runtime %+v, record %+v, sandbox cpu %d memory %d; want %+v", got, recordLimits(rec), sb.CPU, sb.MemoryMB, want)
			}
			if tc.fail {
				if _, err := w.st.GetSandbox(ctx, ready[0]); !errors.Is(err, errdefs.ErrNotFound) {
					t.Errorf("the pooled sandbox whose resize failed is still recorded (%v)", err)
				}
			}
			w.svc.Close()
			w.accounted(sb.ID)
		})
	}
}

func TestKill(t *testing.T) {
	w := newWorld(t, worldOptions{})
	ctx := context.Background()
	sb, err := w.svc.Create(ctx, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := w.svc.Create(ctx, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.svc.Kill(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	rec, _ := w.st.GetSandbox(ctx, sb.ID)
	if rec.State != store.StateKilled || rec.EndedAt.IsZero() || rec.Ending != "" {
		t.Fatalf("record after kill: %s, ended %v, ending %q", rec.State, rec.EndedAt, rec.Ending)
	}
	if _, err := NewTargets(w.svc).Agent(sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("agent of a killed sandbox: %v", err)
	}
	if err := w.svc.Kill(ctx, sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second kill: %v", err)
	}
	w.accounted(other.ID)
}

// TestKillCutOff: a kill whose teardown fails leaves the record with its
// intent; the next start finishes it.
func TestKillCutOff(t *testing.T) {
	w := newWorld(t, worldOptions{})
	ctx := context.Background()
	sb, err := w.svc.Create(ctx, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	w.rt.FailOnce(fakeruntime.OpDestroy, errInjected)
	if err := w.svc.Kill(ctx, sb.ID); err == nil {
		t.Fatal("kill succeeded with its teardown failing")
	}
	rec, _ := w.st.GetSandbox(ctx, sb.ID)
	if rec.Ending != store.StateKilled {
		t.Fatalf("record after a cut-off kill: %s, ending %q", rec.State, rec.Ending)
	}
	w.restart(worldOptions{})
	rec, _ = w.st.GetSandbox(ctx, sb.ID)
	if rec.State != store.StateKilled || rec.Ending != "" {
		t.Fatalf("after restart: %s, ending %q", rec.State, rec.Ending)
	}
	w.accounted()
}

func TestReaper(t *testing.T) {
	for _, tc := range []struct {
		name   string
		happen func(w *world, id string)
		state  string
		reason string
	}{
		{"expired", func(w *world, id string) {
			if _, err := w.svc.updateRunning(context.Background(), id, "test", func(r *store.Sandbox) bool {
				r.ExpiresAt = time.Now().Add(-time.Second)
				return true
			}); err != nil {
				t.Fatal(err)
			}
		}, store.StateKilled, "timeout"},
		{"died", func(w *world, id string) { w.rt.Kill(id, "out of memory") }, store.StateLost, "out of memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, worldOptions{})
			ctx := context.Background()
			sb, err := w.svc.Create(ctx, CreateRequest{})
			if err != nil {
				t.Fatal(err)
			}
			keep, err := w.svc.Create(ctx, CreateRequest{})
			if err != nil {
				t.Fatal(err)
			}
			tc.happen(w, sb.ID)
			w.svc.reap(ctx)
			rec, _ := w.st.GetSandbox(ctx, sb.ID)
			if rec.State != tc.state || rec.Reason != tc.reason {
				t.Fatalf("record %s (%q), want %s (%q)", rec.State, rec.Reason, tc.state, tc.reason)
			}
			w.accounted(keep.ID)
		})
	}
}

// crash is the state a crash of spaced left on the host, made with the
// same calls the service makes, up to a step.
type crash struct {
	record  string // the record's state; "" for none
	ending  string
	attach  bool
	created bool // runtime sandbox made
	started bool // and started (its agent answers to the boot token)
	token   bool // and boot's Init gave the agent the sandbox's token
	frozen  bool // and it is frozen (a pause cut off)
}

// makeCrash leaves st on the host for a fresh id.
func (w *world) makeCrash(c crash) string {
	w.t.Helper()
	ctx := context.Background()
	id, token, bootToken := newID(), newToken(), newToken()
	var slot int
	if c.record != "" {
		rec := &store.Sandbox{ID: id, Template: "base", Image: "img-1", State: c.record, AccessToken: token, Ending: c.ending,
			CreatedAt: time.Now().UTC(), ExpiresAt: time.Now().Add(time.Hour).UTC(), CPU: 1, MemoryMB: 256, DiskMB: 256, MaxProcs: 256}
		if err := w.st.CreateSandbox(ctx, rec, w.plan.Slots(), nil); err != nil {
			w.t.Fatal(err)
		}
		slot = rec.Slot
	} else {
		slot = w.plan.Slots() - 1 - len(w.net.ids())
	}
	ep, err := w.plan.Endpoint(id, slot)
	if err != nil {
		w.t.Fatal(err)
	}
	if c.attach {
		if err := w.net.Attach(ep); err != nil {
			w.t.Fatal(err)
		}
	}
	spec := runtime.Spec{ID: id, RootFS: w.root, Netns: ep.NetnsPath, Env: []string{"SPACE_AGENT_TOKEN=" + bootToken}}
	switch {
	case c.started:
		if err := w.rt.Run(ctx, spec); err != nil {
			w.t.Fatal(err)
		}
	case c.created:
		if err := w.rt.CreateOnly(spec); err != nil {
			w.t.Fatal(err)
		}
	}
	if c.token {
		a := w.agent(id)
		a.mu.Lock()
		a.token = token
		a.mu.Unlock()
	}
	if c.frozen {
		if err := w.rt.Freeze(ctx, id); err != nil {
			w.t.Fatal(err)
		}
	}
	return id
}

// TestRecover: a restart after a crash at each step of a create, a
// claim, a kill or a pause finds what was left and either takes the
// sandbox back or removes everything of it.
func TestRecover(t *testing.T) {
	all := crash{attach: true, created: true, started: true, token: true}
	with := func(c crash, f func(*crash)) crash { f(&c); return c }
	for _, tc := range []struct {
		name  string
		crash crash
		// live: the sandbox is taken back; else the record ends as
		// state (none: no record).
		live  bool
		state string
	}{
		{"record only", crash{record: store.StateCreating}, false, ""},
		{"record and network", crash{record: store.StateCreating, attach: true}, false, ""},
		{"runtime created", crash{record: store.StateCreating, attach: true, created: true}, false, ""},
		{"booted, not claimed", with(all, func(c *crash) { c.record = store.StateCreating }), false, ""},
		{"pooled", with(all, func(c *crash) { c.record = store.StatePooled }), false, ""},
		{"runtime sandbox, no record", crash{attach: true, created: true, started: true}, false, ""},
		{"claimed", with(all, func(c *crash) { c.record = store.StateRunning }), true, ""},
		{"claimed, runtime gone", crash{record: store.StateRunning, attach: true}, false, store.StateLost},
		{"claimed, agent gone", crash{record: store.StateRunning, attach: true, created: true}, false, store.StateLost},
		{"kill cut off", with(all, func(c *crash) { c.record, c.ending = store.StateRunning, store.StateKilled }), false, store.StateKilled},
		{"pause cut off (frozen)", with(all, func(c *crash) { c.record, c.frozen = store.StateRunning, true }), true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, worldOptions{})
			ctx := context.Background()
			id := w.makeCrash(tc.crash)
			w.restart(worldOptions{})
			rec, err := w.st.GetSandbox(ctx, id)
			switch {
			case tc.live:
				if err != nil || rec.State != store.StateRunning {
					t.Fatalf("record %v, %v", rec, err)
				}
				if st, _ := w.rt.State(ctx, id); st != runtime.StateRunning {
					t.Fatalf("runtime state %s", st)
				}
				if _, err := NewTargets(w.svc).Agent(id); err != nil {
					t.Fatal(err)
				}
				w.accounted(id)
				// It is a sandbox like any other: it can be killed.
				if err := w.svc.Kill(ctx, id); err != nil {
					t.Fatal(err)
				}
			case tc.state == "":
				if !errors.Is(err, errdefs.ErrNotFound) {
					t.Fatalf("record %v, %v; want none", rec, err)
				}
			default:
				if err != nil || rec.State != tc.state {
					t.Fatalf("record %v, %v; want %s", rec, err, tc.state)
				}
			}
			w.accounted()
		})
	}
}

func TestPauseFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inject func(w *world)
		undo   func(w *world)
	}{
		{"freeze", func(w *world) { w.rt.FailOnce(fakeruntime.OpFreeze, errInjected) }, nil},
		{"checkpoint", func(w *world) { w.rt.FailOnce(fakeruntime.OpCheckpoint, errInjected) }, nil},
		{"disk snapshot", func(w *world) { w.rt.FailOnce(fakeruntime.OpSnapshotDisk, errInjected) }, nil},
		{"object store", func(w *world) { w.blobs.failPut = errInjected }, func(w *world) { w.blobs.failPut = nil }},
		{"record paused", func(w *world) {
			w.st.setFailUpdate(func(r *store.Sandbox) error {
				if r.State == store.StatePaused {
					return errInjected
				}
				return nil
			})
		}, func(w *world) { w.st.setFailUpdate(nil) }},
		{"agent down (required healthy)", func(w *world) { w.bootFails = nil }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, worldOptions{checkpoints: true})
			ctx := context.Background()
			sb, err := w.svc.Create(ctx, CreateRequest{})
			if err != nil {
				t.Fatal(err)
			}
			opts := PauseOptions{DiskOnly: tc.name == "disk snapshot"}
			if tc.name == "agent down (required healthy)" {
				opts.RequireHealthyAgent = true
				w.agentDown(sb.ID)
			}
			tc.inject(w)
			if _, err := w.svc.Checkpoints().Pause(ctx, sb.ID, opts); err == nil {
				t.Fatal("pause succeeded")
			}
			if tc.undo != nil {
				tc.undo(w)
			}
			// Nothing half-made: the sandbox runs on (thawed), its record
			// says running without a checkpoint, no manifest was left and
			// no image stayed on the disk.
			rec, _ := w.st.GetSandbox(ctx, sb.ID)
			if rec.State != store.StateRunning || rec.Checkpoint != nil {
				t.Fatalf("record %s, checkpoint %v", rec.State, rec.Checkpoint)
			}
			if st, _ := w.rt.State(ctx, sb.ID); st != runtime.StateRunning {
				t.Fatalf("runtime state %s after a failed pause", st)
			}
			for _, k := range w.blobs.keys(t) {
				if len(k) > 13 && k[len(k)-13:] == "manifest.json" {
					t.Errorf("a manifest was left: %s", k)
				}
			}
			if left, _ := filepathGlob(w.images); len(left) > 0 {
				t.Errorf("images left: %v", left)
			}
			w.accounted(sb.ID)
			if tc.name == "agent down (required healthy)" {
				return
			}
			// And it pauses once nothing fails.
			if _, err := w.svc.Checkpoints().Pause(ctx, sb.ID, opts); err != nil {
				t.Fatal(err)
			}
			rec, _ = w.st.GetSandbox(ctx, sb.ID)
			if rec.State != store.StatePaused || rec.Checkpoint == nil {
				t.Fatalf("after a pause: %s, %v", rec.State, rec.Checkpoint)
			}
			w.accounted()
		})
	}
}

// TestResumeFailures: a resume that fails leaves the sandbox paused with
// its checkpoint, and nothing on the host; the next resume works.
func TestResumeFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inject func(w *world)
		undo   func(w *world)
	}{
		{"network", func(w *world) {
			w.net.failAttach = func(network.Endpoint) error { return errInjected }
		}, func(w *world) { w.net.failAttach = nil }},
		{"restore", func(w *world) { w.rt.FailOnce(fakeruntime.OpRestore, errInjected) }, nil},
		{"restored agent fails", func(w *world) {
			w.bootFails = func(string) error { return errInjected }
		}, func(w *world) { w.bootFails = nil }},
		{"restored agent never answers", func(w *world) {
			w.bootFails = func(string) error { return errNoAgent }
		}, func(w *world) { w.bootFails = nil }},
		{"record running", func(w *world) {
			w.st.setFailUpdate(func(r *store.Sandbox) error {
				if r.State == store.StateRunning {
					return errInjected
				}
				return nil
			})
		}, func(w *world) { w.st.setFailUpdate(nil) }},
		// An artifact of the checkpoint gone from the object store: the
		// checkpoint is damaged (409), not "not found" because an object
		// of it is.
		{"checkpoint damaged", func(w *world) { w.hideArtifact("fake-image.json") }, func(w *world) { w.unhideArtifacts() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, worldOptions{checkpoints: true})
			w.svc.booter.agentBootTimeout = 500 * time.Millisecond
			ctx := context.Background()
			sb, err := w.svc.Create(ctx, CreateRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.svc.Checkpoints().Pause(ctx, sb.ID, PauseOptions{}); err != nil {
				t.Fatal(err)
			}
			paused, _ := w.st.GetSandbox(ctx, sb.ID)
			tc.inject(w)
			_, err = w.svc.Checkpoints().Resume(ctx, sb.ID, time.Minute)
			if err == nil {
				t.Fatal("resume succeeded")
			}
			if tc.name == "checkpoint damaged" {
				if status, code := errdefs.HTTPStatus(err); status != 409 || code != "failed_precondition" {
					t.Errorf("a resume of a damaged checkpoint answers %d %s (%v), want 409 failed_precondition", status, code, err)
				}
			}
			if tc.undo != nil {
				tc.undo(w)
			}
			rec, _ := w.st.GetSandbox(ctx, sb.ID)
			if rec.State != store.StatePaused || rec.Checkpoint == nil || rec.Checkpoint.ID != paused.Checkpoint.ID {
				t.Fatalf("after a failed resume: %s, %v (was %v)", rec.State, rec.Checkpoint, paused.Checkpoint)
			}
			if left, _ := filepathGlob(w.images); len(left) > 0 {
				t.Errorf("images left: %v", left)
			}
			w.accounted()
			got, err := w.svc.Checkpoints().Resume(ctx, sb.ID, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != StateRunning {
				t.Fatalf("resumed: %s", got.State)
			}
			w.accounted(sb.ID)
		})
	}
}

// TestPauseTeardownOutlivesRequest: a pause answers before its teardown,
// whose work must not end with the request's context: the sandbox is
// detached and the checkpoint it superseded deleted after the caller has
// gone.
func TestPauseTeardownOutlivesRequest(t *testing.T) {
	w := newWorld(t, worldOptions{checkpoints: true})
	bg := context.Background()
	sb, err := w.svc.Create(bg, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := w.svc.Checkpoints().Pause(bg, sb.ID, PauseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.Checkpoints().Resume(bg, sb.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	w.rt.Fail(fakeruntime.OpDestroy, func(string) error { <-hold; return nil })
	w.net.mu.Lock()
	w.net.beforeDetach = func(network.Endpoint) { <-hold }
	w.net.mu.Unlock()
	ctx, cancel := context.WithCancel(bg)
	second, err := w.svc.Checkpoints().Pause(ctx, sb.ID, PauseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cancel() // the caller has its answer and goes
	close(hold)
	w.accounted() // waits for the teardown: nothing of the paused sandbox left
	var manifests []string
	for _, k := range w.blobs.keys(t) {
		if strings.HasSuffix(k, "/manifest.json") {
			manifests = append(manifests, k)
		}
	}
	if len(manifests) != 1 || !strings.Contains(manifests[0], second.Checkpoint.ID) {
		t.Fatalf("checkpoints stored %v: want only the second pause's %s (the first, %s, is superseded)", manifests, second.Checkpoint.ID, first.Checkpoint.ID)
	}
}

// TestPausedQuota: a tenant's paused sandboxes count against its quota
// once recorded, and a pause that answered counts once, whether or not its
// teardown is still running; a refusal says the use the tenant sees.
func TestPausedQuota(t *testing.T) {
	w := newWorld(t, worldOptions{checkpoints: true, quotas: func(string) store.Quotas { return store.Quotas{PausedSandboxes: 1} }})
	ctx := tenant.NewContext(context.Background(), tenant.Principal{Tenant: "acme", Key: "k1"})
	a, err := w.svc.Create(ctx, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.svc.Create(ctx, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// Hold a's teardown, so the second pause comes while it runs.
	hold := make(chan struct{})
	w.net.mu.Lock()
	w.net.beforeDetach = func(ep network.Endpoint) {
		if ep.NetnsPath == network.NetnsPath(a.ID) {
			<-hold
		}
	}
	w.net.mu.Unlock()
	if _, err := w.svc.Checkpoints().Pause(ctx, a.ID, PauseOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = w.svc.Checkpoints().Pause(ctx, b.ID, PauseOptions{})
	close(hold)
	if errdefs.Class(err) != errdefs.ErrQuotaExceeded {
		t.Fatalf("a second pause at a paused quota of 1: %v, want a quota refusal", err)
	}
	if d, _ := errdefs.Details(err).(map[string]any); d["used"] != 1 || d["limit"] != 1 {
		t.Errorf("refusal details %v, want used 1 of 1", errdefs.Details(err))
	}
	if u, err := w.svc.Usage(ctx, "acme"); err != nil || u.PausedSandboxes != 1 {
		t.Errorf("usage %+v, %v; want 1 paused", u, err)
	}
	w.accounted(b.ID)
}

// TestPauseSlotHandover: a paused sandbox's slot is free in the store before
// its network is gone from the host. Nothing may get the slot in between
// (a resume or create on it found the range in use and failed), and a
// resume after a teardown that failed clears what it left.
func TestPauseSlotHandover(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, w *world, paused *Sandbox, slot int)
	}{
		{"create during the teardown", func(t *testing.T, w *world, paused *Sandbox, slot int) {
			entered, release := make(chan struct{}), make(chan struct{})
			w.net.mu.Lock()
			var once sync.Once // the teardown's Detach, not the resume's
			w.net.beforeDetach = func(ep network.Endpoint) {
				if ep.NetnsPath == network.NetnsPath(paused.ID) {
					once.Do(func() {
						close(entered)
						<-release
					})
				}
			}
			w.net.mu.Unlock()
			// The pause answers while its teardown is still held.
			if _, err := w.svc.Checkpoints().Pause(ctx, paused.ID, PauseOptions{}); err != nil {
				t.Fatal(err)
			}
			<-entered
			other, err := w.svc.Create(ctx, CreateRequest{})
			// And a resume waits for the teardown.
			resumed := make(chan error, 1)
			go func() { _, err := w.svc.Checkpoints().Resume(ctx, paused.ID, time.Minute); resumed <- err }()
			select {
			case err := <-resumed:
				t.Fatalf("a resume ended (%v) before the pause's teardown", err)
			case <-time.After(50 * time.Millisecond):
			}
			close(release)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-resumed; err != nil {
				t.Fatal(err)
			}
			rec, _ := w.st.GetSandbox(ctx, other.ID)
			if rec.Slot == slot {
				t.Fatalf("a create got slot %d while the paused sandbox's network was still on it", slot)
			}
			if w.svc.booter.slots.avoid(slot) {
				t.Errorf("slot %d still avoided after the teardown", slot)
			}
			w.accounted(other.ID, paused.ID)
		}},
		{"resume after a failed teardown", func(t *testing.T, w *world, paused *Sandbox, _ int) {
			w.net.mu.Lock()
			w.net.failDetach = func(network.Endpoint) error { return errInjected }
			w.net.mu.Unlock()
			if _, err := w.svc.Checkpoints().Pause(ctx, paused.ID, PauseOptions{}); err != nil {
				t.Fatal(err)
			}
			w.svc.ckpts.teardowns.Wait()
			w.net.mu.Lock()
			w.net.failDetach = nil
			w.net.mu.Unlock()
			if _, ok := w.net.endpoint(network.NetnsPath(paused.ID)); !ok {
				t.Fatal("the injected teardown failure left nothing: the check below would prove nothing")
			}
			if _, err := w.svc.Checkpoints().Resume(ctx, paused.ID, time.Minute); err != nil {
				t.Fatal(err)
			}
			w.accounted(paused.ID)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, worldOptions{checkpoints: true})
			sb, err := w.svc.Create(ctx, CreateRequest{})
			if err != nil {
				t.Fatal(err)
			}
			rec, _ := w.st.GetSandbox(ctx, sb.ID)
			tc.run(t, w, sb, rec.Slot)
		})
	}
}

// TestReconcile: sandboxes whose records the cluster gave up on (reported
// lost while this node's lease lapsed) end here; the others run on, and
// their records are left as they are.
func TestReconcile(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, worldOptions{pool: &PoolConfig{Template: "base", Min: 2, Max: 2}})
	keep, err := w.svc.Create(ctx, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	gone, err := w.svc.Create(ctx, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	w.svc.StartPools(ctx)
	waitFor(t, "a full pool", func() bool { return len(pooled(w.svc)) == 2 })
	// What another node writes when it reports this node's sandboxes lost.
	giveUp := func(id string) {
		rec, err := w.st.GetSandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		from := store.Was(rec)
		rec.State, rec.Reason = store.StateLost, "its node stopped renewing its lease"
		if err := w.st.Sandboxes.UpdateSandbox(ctx, rec, from); err != nil {
			t.Fatal(err)
		}
	}
	giveUp(gone.ID)
	giveUp(pooled(w.svc)[0])
	n, err := w.svc.Reconcile(ctx)
	if err != nil || n != 2 {
		t.Fatalf("reconcile ended %d, %v; want 2", n, err)
	}
	if rec, _ := w.st.GetSandbox(ctx, gone.ID); rec.State != store.StateLost {
		t.Errorf("the given-up record was rewritten: %s", rec.State)
	}
	waitFor(t, "the pool refilled", func() bool { return len(pooled(w.svc)) == 2 })
	w.accounted(append([]string{keep.ID}, pooled(w.svc)...)...)
	if n, err := w.svc.Reconcile(ctx); err != nil || n != 0 {
		t.Fatalf("second reconcile ended %d, %v", n, err)
	}
}

// TestAutoPause: a sandbox created with auto-pause is paused, not killed,
// when its timeout passes (memory kept, or the disk only), and resumes; a
// pause that fails leaves it running and tries again later.
func TestAutoPause(t *testing.T) {
	for _, tc := range []struct {
		name     string
		diskOnly bool
		fail     bool
	}{
		{"memory", false, false},
		{"disk only", true, false},
		{"the pause fails", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, worldOptions{checkpoints: true})
			ctx := context.Background()
			sb, err := w.svc.Create(ctx, CreateRequest{AutoPause: true, AutoPauseDiskOnly: tc.diskOnly})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.svc.updateRunning(ctx, sb.ID, "test", func(r *store.Sandbox) bool {
				r.ExpiresAt = time.Now().Add(-time.Second)
				return true
			}); err != nil {
				t.Fatal(err)
			}
			if tc.fail {
				w.blobs.failPut = errInjected
			}
			w.svc.reap(ctx)
			rec, _ := w.st.GetSandbox(ctx, sb.ID)
			if tc.fail {
				w.blobs.failPut = nil
				if rec.State != store.StateRunning || !rec.ExpiresAt.After(time.Now()) {
					t.Fatalf("after a failed auto-pause: %s, expires %s (want running, retried later)", rec.State, rec.ExpiresAt)
				}
				w.accounted(sb.ID)
				return
			}
			if rec.State != store.StatePaused || rec.Checkpoint == nil || rec.Checkpoint.DiskOnly != tc.diskOnly || rec.Reason != "paused at timeout" {
				t.Fatalf("after the timeout: %s (%q), checkpoint %+v", rec.State, rec.Reason, rec.Checkpoint)
			}
			w.accounted()
			got, err := w.svc.Checkpoints().Resume(ctx, sb.ID, time.Minute)
			if err != nil || got.State != StateRunning {
				t.Fatalf("resume: %+v, %v", got, err)
			}
			w.accounted(sb.ID)
		})
	}
}

// TestFork: forks of a running sandbox run beside it with ids of their
// own; a fork whose restore fails leaves nothing of itself, the forks
// made before it are the caller's, and the parent runs on.
func TestFork(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failAfter int // restores that succeed before one fails (-1: none fails)
		want      int
	}{
		{"three", -1, 3},
		{"the second fails", 1, 1},
		{"the first fails", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, worldOptions{checkpoints: true})
			ctx := context.Background()
			parent, err := w.svc.Create(ctx, CreateRequest{Metadata: map[string]string{"p": "1"}})
			if err != nil {
				t.Fatal(err)
			}
			if tc.failAfter >= 0 {
				var mu sync.Mutex
				n := 0
				w.rt.Fail(fakeruntime.OpRestore, func(string) error {
					mu.Lock()
					defer mu.Unlock()
					if n++; n > tc.failAfter {
						return errInjected
					}
					return nil
				})
			}
			forks, err := w.svc.Checkpoints().Fork(ctx, parent.ID, ForkRequest{Count: 3})
			if (err != nil) != (tc.failAfter >= 0) || len(forks) != tc.want {
				t.Fatalf("fork: %d forks, %v; want %d", len(forks), err, tc.want)
			}
			ids := []string{parent.ID}
			for _, f := range forks {
				if f.ID == parent.ID || f.Metadata["p"] != "1" || f.State != StateRunning {
					t.Errorf("fork %+v", f)
				}
				ids = append(ids, f.ID)
			}
			w.accounted(ids...)
			if st, _ := w.rt.State(ctx, parent.ID); st != runtime.StateRunning {
				t.Errorf("the parent is %s after the fork", st)
			}
		})
	}
}

// TestRestorePriority: a resume and a fork restore their sandboxes at the
// urgent CPU priority (someone waits on them), and each has the normal one
// once it answers; a cold create boots at the normal one.
func TestRestorePriority(t *testing.T) {
	w := newWorld(t, worldOptions{checkpoints: true})
	ctx := context.Background()
	sb, err := w.svc.Create(ctx, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := w.rt.MadeAt(sb.ID); got != fakeruntime.Normal {
		t.Errorf("a cold create was made at priority %d, want the normal %d", got, fakeruntime.Normal)
	}
	forks, err := w.svc.Checkpoints().Fork(ctx, sb.ID, ForkRequest{Count: 1})
	if err != nil || len(forks) != 1 {
		t.Fatalf("fork: %v, %v", forks, err)
	}
	if _, err := w.svc.Checkpoints().Pause(ctx, sb.ID, PauseOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.Checkpoints().Resume(ctx, sb.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	for what, id := range map[string]string{"resumed": sb.ID, "forked": forks[0].ID} {
		if made, now := w.rt.MadeAt(id), w.rt.Priority(id); made != fakeruntime.High || now != fakeruntime.Normal {
			t.Errorf("%s sandbox: restored at priority %d, now %d; want %d, then %d", what, made, now, fakeruntime.High, fakeruntime.Normal)
		}
	}
}
