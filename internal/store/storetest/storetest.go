// Package storetest is the conformance suite every store.Catalog (the
// embedded Bolt, the cluster's Postgres) must pass: what the daemon relies
// on whichever one it runs on.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// Run runs every conformance test; open answers an empty catalog.
func Run(t *testing.T, open func(t *testing.T) store.Catalog) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, c store.Catalog)
	}{
		{"SlotsNeverCollide", testSlotsNeverCollide},
		{"SlotLifecycle", testSlotLifecycle},
		{"SlotAvoid", testSlotAvoid},
		{"Revive", testRevive},
		{"CompareAndSwap", testCompareAndSwap},
		{"KilledNeverRevives", testKilledNeverRevives},
		{"Query", testQuery},
		{"RecurringQueries", testRecurring},
		{"TemplatesAndBuilds", testTemplatesAndBuilds},
		{"VolumeNamesAreUnique", testVolumeNames},
		{"TenantsKeysAudit", testTenants},
		{"WebhooksAndQueue", testWebhooks},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

func testSlotsNeverCollide(t *testing.T, c store.Catalog) {
	ctx := context.Background()
	const n = 64
	var wg sync.WaitGroup
	slots := make(chan int, n)
	for i := range n {
		wg.Go(func() {
			s := &store.Sandbox{ID: fmt.Sprintf("sb%02d", i), State: store.StateCreating}
			if err := c.CreateSandbox(ctx, s, 1000, nil); err != nil {
				t.Error(err)
				return
			}
			slots <- s.Slot
		})
	}
	wg.Wait()
	close(slots)
	seen := map[int]bool{}
	for s := range slots {
		if seen[s] {
			t.Fatalf("slot %d given twice", s)
		}
		seen[s] = true
	}
	if len(seen) != n {
		t.Fatalf("got %d slots, want %d", len(seen), n)
	}
}

func testSlotLifecycle(t *testing.T, c store.Catalog) {
	ctx := context.Background()
	a := &store.Sandbox{ID: "a", State: store.StateRunning}
	b := &store.Sandbox{ID: "b", State: store.StateRunning}
	for _, s := range []*store.Sandbox{a, b} {
		if err := c.CreateSandbox(ctx, s, 2, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.CreateSandbox(ctx, &store.Sandbox{ID: "d", State: store.StateCreating}, 2, nil); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("third create with 2 slots: %v", err)
	}
	a.State = store.StateKilled
	if err := c.UpdateSandbox(ctx, a, store.Expect{State: store.StateRunning}); err != nil {
		t.Fatal(err)
	}
	if a.Slot != -1 {
		t.Fatalf("killed sandbox keeps slot %d", a.Slot)
	}
	if err := c.CreateSandbox(ctx, &store.Sandbox{ID: "a", State: store.StateCreating}, 2, nil); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("duplicate id: %v", err)
	}
	e := &store.Sandbox{ID: "e", State: store.StateCreating}
	if err := c.CreateSandbox(ctx, e, 2, nil); err != nil || e.Slot != 0 {
		t.Fatalf("freed slot 0 not reused: slot %d, %v", e.Slot, err)
	}
	got, err := c.GetSandbox(ctx, "b")
	if err != nil || got.Slot != 1 || got.State != store.StateRunning {
		t.Fatalf("record: %+v, %v", got, err)
	}
	if _, err := c.GetSandbox(ctx, "zz"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if err := c.UpdateSandbox(ctx, &store.Sandbox{ID: "zz", State: store.StateKilled}, store.Expect{State: store.StateRunning}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("update of a missing record: %v", err)
	}
	if err := c.DeleteSandbox(ctx, "b", store.Expect{State: store.StateRunning}); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSandbox(ctx, "b", store.Expect{State: store.StateRunning}); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	f := &store.Sandbox{ID: "f", State: store.StateCreating}
	if err := c.CreateSandbox(ctx, f, 2, nil); err != nil || f.Slot != 1 {
		t.Fatalf("slot of deleted record not freed: %d %v", f.Slot, err)
	}
	all, err := c.ListSandboxes(ctx)
	if err != nil || len(all) != 3 {
		t.Fatalf("list: %d records, %v", len(all), err)
	}
}

func testSlotAvoid(t *testing.T, c store.Catalog) {
	ctx := context.Background()
	avoid := func(slot int) bool { return slot == 0 || slot == 2 }
	var got []int
	for _, id := range []string{"a", "b", "c"} {
		s := &store.Sandbox{ID: id, State: store.StateRunning}
		if err := c.CreateSandbox(ctx, s, 10, avoid); err != nil {
			t.Fatal(err)
		}
		got = append(got, s.Slot)
	}
	if fmt.Sprint(got) != "[1 3 4]" {
		t.Fatalf("slots %v, want [1 3 4] (0 and 2 avoided)", got)
	}
	if err := c.CreateSandbox(ctx, &store.Sandbox{ID: "d", State: store.StateCreating}, 2, func(int) bool { return true }); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("every slot avoided: %v", err)
	}
}

func testRevive(t *testing.T, c store.Catalog) {
	ctx := context.Background()
	a := &store.Sandbox{ID: "a", State: store.StateRunning}
	if err := c.CreateSandbox(ctx, a, 4, nil); err != nil {
		t.Fatal(err)
	}
	a.State = store.StatePaused
	a.Checkpoint = &store.CheckpointRef{ID: "a-c1"}
	if err := c.UpdateSandbox(ctx, a, store.Expect{State: store.StateRunning}); err != nil || a.Slot != -1 {
		t.Fatalf("pause: slot %d, err %v", a.Slot, err)
	}
	paused := store.Expect{State: store.StatePaused, Checkpoint: "a-c1"}
	for _, tc := range []struct {
		name    string
		rec     store.Sandbox
		from    store.Expect
		wantErr error
	}{
		{"not live", store.Sandbox{ID: "a", State: store.StatePaused}, paused, errors.New("any")},
		{"unknown", store.Sandbox{ID: "zz", State: store.StateResuming}, paused, errdefs.ErrNotFound},
		{"another checkpoint", store.Sandbox{ID: "a", State: store.StateResuming}, store.Expect{State: store.StatePaused, Checkpoint: "a-c0"}, errdefs.ErrFailedPrecondition},
		{"not paused", store.Sandbox{ID: "a", State: store.StateResuming}, store.Expect{State: store.StateKilled, Checkpoint: "a-c1"}, errdefs.ErrFailedPrecondition},
		{"paused to resuming", store.Sandbox{ID: "a", State: store.StateResuming}, paused, nil},
		{"already live", store.Sandbox{ID: "a", State: store.StateResuming}, paused, errdefs.ErrFailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tc.rec
			err := c.ReviveSandbox(ctx, &rec, tc.from, 4, nil)
			if (err != nil) != (tc.wantErr != nil) || err != nil && errdefs.Class(tc.wantErr) != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("ReviveSandbox = %v, want %v", err, tc.wantErr)
			}
			if err == nil && rec.Slot != 0 {
				t.Fatalf("slot = %d, want 0", rec.Slot)
			}
		})
	}
}

// testCompareAndSwap: a write that expects another state or checkpoint
// than the stored one is refused and changes nothing.
func testCompareAndSwap(t *testing.T, c store.Catalog) {
	ctx := context.Background()
	a := &store.Sandbox{ID: "a", State: store.StateRunning, Checkpoint: &store.CheckpointRef{ID: "a-c1"}}
	if err := c.CreateSandbox(ctx, a, 4, nil); err != nil {
		t.Fatal(err)
	}
	running := store.Was(a)
	if running != (store.Expect{State: store.StateRunning, Checkpoint: "a-c1"}) {
		t.Fatalf("Was = %+v", running)
	}
	for _, tc := range []struct {
		name string
		from store.Expect
	}{
		{"another state", store.Expect{State: store.StatePaused, Checkpoint: "a-c1"}},
		{"another checkpoint", store.Expect{State: store.StateRunning, Checkpoint: "a-c2"}},
		{"no checkpoint", store.Expect{State: store.StateRunning}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upd := *a
			upd.State, upd.Reason = store.StateKilled, "by "+tc.name
			if err := c.UpdateSandbox(ctx, &upd, tc.from); !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Fatalf("update: %v, want failed precondition", err)
			}
			if err := c.DeleteSandbox(ctx, "a", tc.from); !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Fatalf("delete: %v, want failed precondition", err)
			}
			got, err := c.GetSandbox(ctx, "a")
			if err != nil || got.State != store.StateRunning || got.Reason != "" {
				t.Fatalf("after the refused writes: %+v, %v", got, err)
			}
		})
	}
	paused := *a
	paused.State, paused.Checkpoint = store.StatePaused, &store.CheckpointRef{ID: "a-c2"}
	if err := c.UpdateSandbox(ctx, &paused, running); err != nil {
		t.Fatal(err)
	}
	// The writer that read before the pause loses.
	stale := *a
	stale.Metadata = map[string]string{"stale": "yes"}
	if err := c.UpdateSandbox(ctx, &stale, running); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("a write expecting the record before the pause: %v", err)
	}
	if err := c.DeleteSandbox(ctx, "a", store.Was(&paused)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSandbox(ctx, "a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("after the delete: %v", err)
	}
}

// testKilledNeverRevives: of a kill and a resume of one paused sandbox
// that both read it paused, one wins: a resume that loses never makes
// the killed record live, and a kill that loses leaves the resume's
// record (whose undo brings back the same checkpoint).
func testKilledNeverRevives(t *testing.T, c store.Catalog) {
	ctx := context.Background()
	for round := range 20 {
		id := fmt.Sprintf("r%02d", round)
		rec := &store.Sandbox{ID: id, State: store.StateRunning}
		if err := c.CreateSandbox(ctx, rec, 64, nil); err != nil {
			t.Fatal(err)
		}
		ckpt := &store.CheckpointRef{ID: id + "-c1"}
		paused := *rec
		paused.State, paused.Checkpoint = store.StatePaused, ckpt
		if err := c.UpdateSandbox(ctx, &paused, store.Was(rec)); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var killErr, resumeErr error
		resuming := paused
		resuming.State = store.StateResuming
		wg.Go(func() {
			killed := paused
			killed.State, killed.Reason = store.StateKilled, "killed by request"
			killErr = c.UpdateSandbox(ctx, &killed, store.Was(&paused))
		})
		wg.Go(func() { resumeErr = c.ReviveSandbox(ctx, &resuming, store.Was(&paused), 64, nil) })
		wg.Wait()
		if (killErr == nil) == (resumeErr == nil) {
			t.Fatalf("round %d: kill %v, resume %v: want exactly one to win", round, killErr, resumeErr)
		}
		got, _ := c.GetSandbox(ctx, id)
		if killErr == nil {
			if got.State != store.StateKilled || !errors.Is(resumeErr, errdefs.ErrFailedPrecondition) {
				t.Fatalf("round %d: the kill won but the record is %s (resume: %v)", round, got.State, resumeErr)
			}
			continue
		}
		if got.State != store.StateResuming || !errors.Is(killErr, errdefs.ErrFailedPrecondition) {
			t.Fatalf("round %d: the resume won but the record is %s (kill: %v)", round, got.State, killErr)
		}
		// The resume fails after all: its undo is paused again, with the
		// checkpoint it never lost.
		back := resuming
		back.State = store.StatePaused
		if err := c.UpdateSandbox(ctx, &back, store.Was(&resuming)); err != nil {
			t.Fatal(err)
		}
		if got, _ := c.GetSandbox(ctx, id); got.State != store.StatePaused || got.Checkpoint == nil || got.Checkpoint.ID != ckpt.ID {
			t.Fatalf("round %d: after the undo: %+v", round, got)
		}
	}
}

// testQuery: lists filter by tenant, state and metadata, never show
// pooled or build sandboxes, and page newest first: every record once.
func testQuery(t *testing.T, c store.Catalog) {
	ctx := context.Background()
	base := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	var want []string // newest first
	made := map[string]*store.Sandbox{}
	for i := range 25 {
		s := &store.Sandbox{
			ID: fmt.Sprintf("q%02d", i), Tenant: []string{"", "t1"}[i%2], State: []string{store.StateRunning, store.StatePaused, store.StateKilled}[i%3],
			CreatedAt: base.Add(time.Duration(i/2) * time.Second), // pairs made in the same second: the id decides
			Metadata:  map[string]string{"i": fmt.Sprint(i), "odd": fmt.Sprint(i%2 == 1)},
		}
		if err := c.CreateSandbox(ctx, s, 64, nil); err != nil {
			t.Fatal(err)
		}
		want = append([]string{s.ID}, want...)
		made[s.ID] = s
	}
	for _, hidden := range []*store.Sandbox{
		{ID: "pool", State: store.StatePooled, CreatedAt: base},
		{ID: "build", State: store.StateRunning, Build: "b1", CreatedAt: base},
	} {
		if err := c.CreateSandbox(ctx, hidden, 64, nil); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(sbs []*store.Sandbox) []string {
		var out []string
		for _, s := range sbs {
			out = append(out, s.ID)
		}
		return out
	}
	all, next, err := c.QuerySandboxes(ctx, store.Query{})
	if err != nil || next != nil || fmt.Sprint(ids(all)) != fmt.Sprint(want) {
		t.Fatalf("everything: %v (next %v, %v), want %v", ids(all), next, err, want)
	}
	for _, limit := range []int{1, 4, 7, 25} {
		var paged []string
		var after *store.Cursor
		for pages := 0; ; pages++ {
			page, next, err := c.QuerySandboxes(ctx, store.Query{Limit: limit, After: after})
			if err != nil || len(page) > limit || pages > 30 {
				t.Fatalf("limit %d: page of %d, %v", limit, len(page), err)
			}
			paged = append(paged, ids(page)...)
			if next == nil {
				break
			}
			after = next
		}
		if fmt.Sprint(paged) != fmt.Sprint(want) {
			t.Errorf("pages of %d: %v, want %v", limit, paged, want)
		}
	}
	for _, tc := range []struct {
		name string
		q    store.Query
		want string
	}{
		{"tenant", store.Query{Tenants: []string{"t1"}, States: []string{store.StateRunning}}, "[q21 q15 q09 q03]"},
		{"default tenant", store.Query{Tenants: []string{""}, States: []string{store.StatePaused, store.StateKilled}, Limit: 3}, "[q22 q20 q16]"},
		{"metadata", store.Query{Metadata: map[string]string{"odd": "true", "i": "7"}}, "[q07]"},
		{"metadata no match", store.Query{Metadata: map[string]string{"i": "7", "odd": "false"}}, "[]"},
	} {
		got, _, err := c.QuerySandboxes(ctx, tc.q)
		if err != nil || fmt.Sprint(ids(got)) != tc.want {
			t.Errorf("%s: %v, %v; want %s", tc.name, ids(got), err, tc.want)
		}
	}
	// Pages of several tenants and states (a catalog may read one range
	// per tenant and state and merge them) come whole and in order.
	for _, q := range []store.Query{
		{Tenants: []string{"", "t1"}, States: []string{store.StateRunning}},
		{Tenants: []string{"t1"}, States: []string{store.StatePaused, store.StateRunning, store.StateKilled}},
		{Tenants: []string{"t1", ""}, States: []string{store.StatePaused, store.StateKilled}},
		{States: []string{store.StateKilled, store.StateRunning}, Metadata: map[string]string{"odd": "false"}},
		{Tenants: []string{"t1", "nobody"}},
	} {
		var expect []string // of the newest-first list, what q asks for
		for _, id := range want {
			s := made[id]
			if (len(q.Tenants) == 0 || slices.Contains(q.Tenants, s.Tenant)) && (len(q.States) == 0 || slices.Contains(q.States, s.State)) &&
				(q.Metadata["odd"] == "" || q.Metadata["odd"] == s.Metadata["odd"]) {
				expect = append(expect, id)
			}
		}
		if all, _, err := c.QuerySandboxes(ctx, q); err != nil || fmt.Sprint(ids(all)) != fmt.Sprint(expect) {
			t.Errorf("%+v: %v, %v; want %v", q, ids(all), err, expect)
		}
		for _, limit := range []int{1, 2, 5} {
			var paged []string
			q := q
			q.Limit, q.After = limit, nil
			for pages := 0; ; pages++ {
				page, next, err := c.QuerySandboxes(ctx, q)
				if err != nil || len(page) > limit || pages > 30 {
					t.Fatalf("%+v: page of %d, %v", q, len(page), err)
				}
				paged = append(paged, ids(page)...)
				if next == nil {
					break
				}
				q.After = next
			}
			if fmt.Sprint(paged) != fmt.Sprint(expect) {
				t.Errorf("%+v in pages of %d: %v, want %v", q, limit, paged, expect)
			}
		}
	}
}

// testRecurring: the queries that replace a read of every record on the
// paths that recur (recovery, the prune, template collection and
// information, volume holders) answer what such a read filtered would.
func testRecurring(t *testing.T, c store.Catalog) {
	ctx := context.Background()
	now := time.Now().UTC()
	vol := []store.VolumeMount{{VolumeID: "v1", Name: "data", Path: "/data"}}
	for _, s := range []*store.Sandbox{
		{ID: "run", State: store.StateRunning, Image: "i1", Volumes: vol},
		{ID: "build", State: store.StateRunning, Image: "i2", Build: "b1"},
		{ID: "pool", State: store.StatePooled, Image: "i1"},
		{ID: "paused-old", State: store.StatePaused, Image: "i3", PausedAt: now.Add(-48 * time.Hour), Volumes: vol, Checkpoint: &store.CheckpointRef{ID: "c1", Bytes: 1 << 20}},
		{ID: "paused-new", State: store.StatePaused, Image: "i1", PausedAt: now.Add(-time.Hour), Checkpoint: &store.CheckpointRef{ID: "c2", Bytes: 2 << 20}},
		{ID: "paused-undated", State: store.StatePaused, Image: "i4", Tenant: "t1"},
		{ID: "killed-old", State: store.StateKilled, Image: "i5", EndedAt: now.Add(-2 * time.Hour), Volumes: vol},
		{ID: "killed-new", State: store.StateKilled, Image: "i6", EndedAt: now.Add(-10 * time.Minute)},
		{ID: "lost-undated", State: store.StateLost, Image: "i7"},
	} {
		// Made running, then moved to its state, as a sandbox is.
		want := *s
		s.State = store.StateRunning
		if err := c.CreateSandbox(ctx, s, 64, nil); err != nil {
			t.Fatal(err)
		}
		if want.State != store.StateRunning {
			want.Slot = s.Slot
			if err := c.UpdateSandbox(ctx, &want, store.Was(s)); err != nil {
				t.Fatal(err)
			}
		}
	}
	ids := func(recs []*store.Sandbox, err error) string {
		if err != nil {
			return err.Error()
		}
		var out []string
		for _, r := range recs {
			out = append(out, r.ID)
		}
		slices.Sort(out)
		return fmt.Sprint(out)
	}
	if got := ids(c.LiveSandboxes(ctx)); got != "[build pool run]" {
		t.Errorf("live: %s", got)
	}
	if got := ids(c.StaleSandboxes(ctx, now.Add(-time.Hour), now.Add(-24*time.Hour))); got != "[killed-old paused-old paused-undated]" {
		t.Errorf("stale: %s", got)
	}
	if got := ids(c.StaleSandboxes(ctx, now.Add(-3*time.Hour), now.Add(-72*time.Hour))); got != "[paused-undated]" {
		t.Errorf("stale, longer kept: %s", got)
	}
	if n, bytes, err := c.PausedUsage(ctx, []string{"", "t1"}); err != nil || n != 3 || bytes != 3<<20 {
		t.Errorf("paused usage: %d sandboxes, %d bytes, %v; want 3, %d", n, bytes, err, 3<<20)
	}
	if n, bytes, err := c.PausedUsage(ctx, []string{"t1"}); err != nil || n != 1 || bytes != 0 {
		t.Errorf("t1's paused usage: %d sandboxes, %d bytes, %v; want 1, 0", n, bytes, err)
	}
	if got := ids(c.VolumeHolders(ctx)); got != "[paused-old run]" {
		t.Errorf("volume holders: %s", got)
	}
	if got, err := c.HeldImages(ctx); err != nil || fmt.Sprint(got) != "[i1 i2 i3 i4]" {
		t.Errorf("held images: %v, %v", got, err)
	}
	for _, tc := range []struct {
		images []string
		want   int
	}{
		{[]string{"i1"}, 3}, // running, pooled, paused
		{[]string{"i2"}, 0}, // a build's
		{[]string{"i3", "i4", "i9"}, 2},
		{[]string{"i5", "i7"}, 0}, // ended
		{nil, 0},
	} {
		if got, err := c.CountOnImages(ctx, tc.images); err != nil || got != tc.want {
			t.Errorf("count on %v: %d, %v; want %d", tc.images, got, err, tc.want)
		}
	}
}

func testTemplatesAndBuilds(t *testing.T, c store.Catalog) {
	ctx := context.Background()
	if _, err := c.GetTemplate(ctx, "app"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing template: %v", err)
	}
	bd := &store.Build{ID: "b1", Template: "app", State: store.BuildQueued, Tags: []string{"default"}}
	if err := c.PutBuild(ctx, bd, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetTemplate(ctx, "app"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a build alone made its template: %v", err)
	}
	bd.State = store.BuildReady
	tpl := &store.Template{Name: "app", Tags: map[string]store.TemplateTag{"default": {Build: "b1"}}}
	if err := c.PutBuild(ctx, bd, tpl); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetTemplate(ctx, "app")
	if err != nil || got.Tags["default"].Build != "b1" {
		t.Fatalf("template = %+v, %v", got, err)
	}
	gb, err := c.GetBuild(ctx, "b1")
	if err != nil || gb.State != store.BuildReady || !gb.Final() {
		t.Fatalf("build = %+v, %v", gb, err)
	}
	if _, err := c.GetBuild(ctx, "b2"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing build: %v", err)
	}
	if err := c.PutTemplate(ctx, &store.Template{Name: "other", Tenant: "t1"}); err != nil {
		t.Fatal(err)
	}
	ts, _ := c.ListTemplates(ctx)
	bs, _ := c.ListBuilds(ctx)
	if len(ts) != 2 || len(bs) != 1 {
		t.Fatalf("lists: %d templates, %d builds", len(ts), len(bs))
	}
	if err := c.DeleteTemplate(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetTemplate(ctx, "app"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("deleted template: %v", err)
	}
}

func testVolumeNames(t *testing.T, c store.Catalog) {
	ctx := context.Background()
	const n = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range n {
		wg.Go(func() {
			err := c.CreateVolume(ctx, &store.Volume{ID: fmt.Sprintf("v%02d", i), Name: "data", State: store.VolumeReady})
			switch {
			case err == nil:
				mu.Lock()
				won++
				mu.Unlock()
			case !errors.Is(err, errdefs.ErrAlreadyExists):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d creates of one name succeeded, want 1", won)
	}
	v, err := c.VolumeByName(ctx, "data")
	if err != nil {
		t.Fatal(err)
	}
	v.SizeMB = 64
	if err := c.UpdateVolume(ctx, v); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetVolume(ctx, v.ID)
	if err != nil || got.SizeMB != 64 || got.Name != "data" {
		t.Fatalf("after update: %+v, %v", got, err)
	}
	if err := c.DeleteVolume(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.VolumeByName(ctx, "data"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("name still taken after delete: %v", err)
	}
	if err := c.CreateVolume(ctx, &store.Volume{ID: "new", Name: "data"}); err != nil {
		t.Fatalf("name not free after delete: %v", err)
	}
	if err := c.UpdateVolume(ctx, &store.Volume{ID: "gone", Name: "x"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("update of a missing volume: %v", err)
	}
	all, err := c.ListVolumes(ctx)
	if err != nil || len(all) != 1 {
		t.Fatalf("list: %d, %v", len(all), err)
	}
}

func testTenants(t *testing.T, c store.Catalog) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	ten := &store.Tenant{ID: "acme", Name: "Acme", CreatedAt: now, Quotas: store.Quotas{Sandboxes: 5, Builds: 2}}
	if err := c.CreateTenant(ctx, ten); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTenant(ctx, ten); err != nil {
		t.Fatalf("creating the same tenant again: %v", err)
	}
	if err := c.CreateTenant(ctx, &store.Tenant{ID: "acme", Name: "Other"}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("a different tenant under a taken id: %v", err)
	}
	ten.Quotas.Sandboxes = 9
	if err := c.UpdateTenant(ctx, ten); err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetTenant(ctx, "acme"); err != nil || got.Quotas.Sandboxes != 9 || got.Quotas.Builds != 2 {
		t.Fatalf("tenant: %+v, %v", got, err)
	}
	if err := c.UpdateTenant(ctx, &store.Tenant{ID: "nobody"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("update of a missing tenant: %v", err)
	}
	if _, err := c.GetTenant(ctx, "nobody"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing tenant: %v", err)
	}
	if ts, err := c.ListTenants(ctx); err != nil || len(ts) != 1 {
		t.Fatalf("tenants: %d, %v", len(ts), err)
	}

	key := &store.APIKey{ID: "k1", Tenant: "acme", Hash: "h", CreatedAt: now}
	if err := c.CreateAPIKey(ctx, key); err != nil {
		t.Fatal(err)
	}
	// A key record is never replaced: an id issued twice is refused, and
	// the first key stands.
	if err := c.CreateAPIKey(ctx, &store.APIKey{ID: "k1", Tenant: "other", Hash: "h2", CreatedAt: now}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("a second key under a taken id: %v", err)
	}
	if ks, err := c.ListAPIKeys(ctx); err != nil || len(ks) != 1 || ks[0].Tenant != "acme" || ks[0].Hash != "h" {
		t.Fatalf("keys after the refused create: %+v, %v", ks, err)
	}
	got, err := c.RevokeAPIKey(ctx, "k1", now)
	if err != nil || !got.RevokedAt.Equal(now) || got.Hash != "h" {
		t.Fatalf("revoke: %+v, %v", got, err)
	}
	// Revoking again keeps the first time.
	if got, err := c.RevokeAPIKey(ctx, "k1", now.Add(time.Hour)); err != nil || !got.RevokedAt.Equal(now) {
		t.Fatalf("second revoke: %+v, %v", got, err)
	}
	if _, err := c.RevokeAPIKey(ctx, "nope", now); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("revoke of a missing key: %v", err)
	}
	if ks, err := c.ListAPIKeys(ctx); err != nil || len(ks) != 1 || !ks[0].RevokedAt.Equal(now) {
		t.Fatalf("keys: %+v, %v", ks, err)
	}

	var entries []store.AuditEntry
	for i := range 5 {
		entries = append(entries, store.AuditEntry{Time: now.Add(time.Duration(i) * time.Second), Tenant: "acme", Route: fmt.Sprint(i), Status: 200})
	}
	if err := c.AppendAudit(ctx, entries); err != nil {
		t.Fatal(err)
	}
	audit := func(from, to time.Time, after string, limit int) []store.AuditEntry {
		t.Helper()
		got, err := c.Audit(ctx, store.AuditQuery{From: from, To: to, After: after, Limit: limit})
		if err != nil {
			t.Fatalf("audit [%s, %s) after %q: %v", from, to, after, err)
		}
		return got
	}
	if got := audit(now.Add(time.Second), now.Add(4*time.Second), "", 10); len(got) != 3 || got[0].Route != "1" || got[2].Route != "3" {
		t.Fatalf("audit [1s, 4s): %+v", got)
	}
	if got := audit(now, now.Add(time.Hour), "", 2); len(got) != 2 {
		t.Fatalf("audit limit 2: %d entries", len(got))
	}
	n, err := c.PruneAudit(ctx, now.Add(2*time.Second))
	if err != nil || n != 2 {
		t.Fatalf("prune: %d, %v", n, err)
	}
	if got := audit(now, now.Add(time.Hour), "", 10); len(got) != 3 {
		t.Fatalf("after prune: %d entries", len(got))
	}

	// Entries that share a time (one batch of calls in the same
	// nanosecond, or the same microsecond in Postgres) are each read
	// once, in order, when a reader pages through them by cursor.
	same := now.Add(time.Minute)
	var batch []store.AuditEntry
	for i := range 7 {
		batch = append(batch, store.AuditEntry{Time: same, Tenant: "acme", Route: fmt.Sprint("same-", i), Status: 200})
	}
	batch = append(batch, store.AuditEntry{Time: same.Add(time.Nanosecond), Tenant: "acme", Route: "next-ns", Status: 200})
	if err := c.AppendAudit(ctx, batch); err != nil {
		t.Fatal(err)
	}
	var paged []string
	after := ""
	for range 20 {
		page := audit(same, same.Add(time.Second), after, 3)
		for _, e := range page {
			if e.Cursor == "" {
				t.Fatalf("entry %s has no cursor", e.Route)
			}
			paged = append(paged, e.Route)
		}
		if len(page) < 3 {
			break
		}
		after = page[len(page)-1].Cursor
	}
	want := []string{"same-0", "same-1", "same-2", "same-3", "same-4", "same-5", "same-6", "next-ns"}
	if fmt.Sprint(paged) != fmt.Sprint(want) {
		t.Fatalf("paged by cursor: %v, want %v", paged, want)
	}
	if _, err := c.Audit(ctx, store.AuditQuery{From: now, To: same, After: "not a cursor", Limit: 1}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("a bad cursor: %v", err)
	}
}
