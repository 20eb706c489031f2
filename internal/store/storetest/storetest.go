// Package storetest is the conformance suite every store.Catalog (the
// embedded Bolt, the cluster's Postgres) must pass: what the daemon relies
// on whichever one it runs on.
package storetest

import (
	"context"
	"errors"
	"fmt"
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
		{"TemplatesAndBuilds", testTemplatesAndBuilds},
		{"VolumeNamesAreUnique", testVolumeNames},
		{"TenantsKeysAudit", testTenants},
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
	if err := c.UpdateSandbox(ctx, a); err != nil {
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
	if err := c.UpdateSandbox(ctx, &store.Sandbox{ID: "zz", State: store.StateKilled}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("update of a missing record: %v", err)
	}
	if err := c.DeleteSandbox(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSandbox(ctx, "b"); err != nil {
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
	if err := c.UpdateSandbox(ctx, a); err != nil || a.Slot != -1 {
		t.Fatalf("pause: slot %d, err %v", a.Slot, err)
	}
	for _, tc := range []struct {
		name    string
		rec     store.Sandbox
		wantErr error
	}{
		{"not live", store.Sandbox{ID: "a", State: store.StatePaused}, errors.New("any")},
		{"unknown", store.Sandbox{ID: "zz", State: store.StateResuming}, errdefs.ErrNotFound},
		{"paused to resuming", store.Sandbox{ID: "a", State: store.StateResuming}, nil},
		{"already live", store.Sandbox{ID: "a", State: store.StateResuming}, errdefs.ErrFailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tc.rec
			err := c.ReviveSandbox(ctx, &rec, 4, nil)
			if (err != nil) != (tc.wantErr != nil) || err != nil && errdefs.Class(tc.wantErr) != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("ReviveSandbox = %v, want %v", err, tc.wantErr)
			}
			if err == nil && rec.Slot != 0 {
				t.Fatalf("slot = %d, want 0", rec.Slot)
			}
		})
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
	ten := &store.Tenant{ID: "acme", Name: "Acme", CreatedAt: now, Quotas: store.Quotas{Sandboxes: 5}}
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
	if got, err := c.GetTenant(ctx, "acme"); err != nil || got.Quotas.Sandboxes != 9 {
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
