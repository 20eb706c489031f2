package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/spacesandbox/space/internal/egress/secrets"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/pgtest"
	"github.com/spacesandbox/space/internal/store/storetest"
)

func TestBoltConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Catalog {
		b, err := store.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	})
}

// pg is one PostgreSQL server for the package's tests; each test gets a
// database of its own.
var (
	pgOnce sync.Once
	pgSrv  *pgtest.Server
)

func openPG(t *testing.T, url, node string) *store.Postgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := store.OpenPostgres(ctx, url, node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func newDatabase(t *testing.T) string {
	t.Helper()
	if pgSrv == nil {
		// Started once and kept for the package: stopped by TestMain.
		pgSrv = pgtest.Start(&keepT{t})
	}
	return pgSrv.NewDatabase(t)
}

func TestPostgresConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Catalog { return openPG(t, newDatabase(t), "n1") })
}

// TestPostgresMigrations: nodes starting at once all migrate one schema
// (tern's advisory lock), and a start on a migrated database changes
// nothing.
func TestPostgresMigrations(t *testing.T) {
	url := newDatabase(t)
	var wg sync.WaitGroup
	for _, n := range []string{"a", "b", "c", "d"} {
		wg.Go(func() {
			p, err := store.OpenPostgres(context.Background(), url, n)
			if err != nil {
				t.Error(err)
				return
			}
			p.Close()
		})
	}
	wg.Wait()
	p := openPG(t, url, "e")
	if err := p.CreateSandbox(context.Background(), &store.Sandbox{ID: "x", State: store.StateRunning}, 4, nil); err != nil {
		t.Fatal(err)
	}
}

// TestPostgresCluster: what a shared catalog adds to the conformance
// suite, with two nodes on one database.
func TestPostgresCluster(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, a, b *store.Postgres)
	}{
		{"slots are per node", func(t *testing.T, a, b *store.Postgres) {
			x, y := &store.Sandbox{ID: "x", State: store.StateRunning}, &store.Sandbox{ID: "y", State: store.StateRunning}
			if err := a.CreateSandbox(ctx, x, 4, nil); err != nil {
				t.Fatal(err)
			}
			if err := b.CreateSandbox(ctx, y, 4, nil); err != nil {
				t.Fatal(err)
			}
			if x.Slot != 0 || y.Slot != 0 || x.Node != "a" || y.Node != "b" {
				t.Fatalf("x on %s slot %d, y on %s slot %d: want slot 0 of each node", x.Node, x.Slot, y.Node, y.Slot)
			}
		}},
		{"another node's live record is not this node's", func(t *testing.T, a, b *store.Postgres) {
			x := &store.Sandbox{ID: "x", State: store.StateRunning}
			if err := a.CreateSandbox(ctx, x, 4, nil); err != nil {
				t.Fatal(err)
			}
			if recs, _ := b.ListSandboxes(ctx); len(recs) != 0 {
				t.Fatalf("node b lists %d of node a's live records", len(recs))
			}
			upd := *x
			upd.State = store.StateKilled
			if err := b.UpdateSandbox(ctx, &upd, store.Was(x)); !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Fatalf("node b ended node a's sandbox: %v", err)
			}
			if err := b.DeleteSandbox(ctx, "x", store.Was(x)); !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Fatalf("node b deleted node a's sandbox: %v", err)
			}
			if got, err := b.GetSandbox(ctx, "x"); err != nil || got.Node != "a" || got.State != store.StateRunning {
				t.Fatalf("record after node b's attempts: %+v, %v", got, err)
			}
			// Paused, it is everybody's.
			x.State = store.StatePaused
			if err := a.UpdateSandbox(ctx, x, store.Expect{State: store.StateRunning}); err != nil {
				t.Fatal(err)
			}
			if recs, _ := b.ListSandboxes(ctx); len(recs) != 1 || recs[0].Node != "" {
				t.Fatalf("node b's list of a paused record: %+v", recs)
			}
		}},
		{"a node's recurring queries see its own live records and every paused one", func(t *testing.T, a, b *store.Postgres) {
			x := &store.Sandbox{ID: "x", State: store.StateRunning, Image: "i1", Volumes: []store.VolumeMount{{VolumeID: "v", Path: "/v"}}}
			if err := a.CreateSandbox(ctx, x, 4, nil); err != nil {
				t.Fatal(err)
			}
			sees := func(p *store.Postgres) string {
				live, err1 := p.LiveSandboxes(ctx)
				images, err2 := p.HeldImages(ctx)
				n, err3 := p.CountOnImages(ctx, []string{"i1"})
				vols, err4 := p.VolumeHolders(ctx)
				if err := errors.Join(err1, err2, err3, err4); err != nil {
					t.Fatal(err)
				}
				return fmt.Sprintf("live %d, images %v, on i1 %d, volume holders %d", len(live), images, n, len(vols))
			}
			if got, want := sees(a), "live 1, images [i1], on i1 1, volume holders 1"; got != want {
				t.Errorf("node a: %s, want %s", got, want)
			}
			if got, want := sees(b), "live 0, images [], on i1 0, volume holders 0"; got != want {
				t.Errorf("node b sees node a's live record: %s, want %s", got, want)
			}
			x.State, x.PausedAt = store.StatePaused, time.Now()
			if err := a.UpdateSandbox(ctx, x, store.Expect{State: store.StateRunning}); err != nil {
				t.Fatal(err)
			}
			for _, p := range []*store.Postgres{a, b} {
				if got, want := sees(p), "live 0, images [i1], on i1 1, volume holders 1"; got != want {
					t.Errorf("node %s, the sandbox paused: %s, want %s", p.Node(), got, want)
				}
			}
		}},
		{"two resumes at once: one wins", func(t *testing.T, a, b *store.Postgres) {
			x := &store.Sandbox{ID: "x", State: store.StateRunning}
			if err := a.CreateSandbox(ctx, x, 4, nil); err != nil {
				t.Fatal(err)
			}
			x.State = store.StatePaused
			if err := a.UpdateSandbox(ctx, x, store.Expect{State: store.StateRunning}); err != nil {
				t.Fatal(err)
			}
			for round := range 20 {
				var wg sync.WaitGroup
				errs := make([]error, 2)
				for i, p := range []*store.Postgres{a, b} {
					wg.Go(func() {
						rec := *x
						rec.State = store.StateResuming
						errs[i] = p.ReviveSandbox(ctx, &rec, store.Was(x), 4, nil)
					})
				}
				wg.Wait()
				won := 0
				for _, err := range errs {
					switch {
					case err == nil:
						won++
					case !errors.Is(err, errdefs.ErrFailedPrecondition):
						t.Fatalf("round %d: %v", round, err)
					}
				}
				if won != 1 {
					t.Fatalf("round %d: %d resumes won (%v)", round, won, errs)
				}
				got, _ := a.GetSandbox(ctx, "x")
				owner := map[string]*store.Postgres{"a": a, "b": b}[got.Node]
				got.State = store.StatePaused
				if err := owner.UpdateSandbox(ctx, got, store.Expect{State: store.StateResuming}); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"a kill on one node and a resume on another: one wins", func(t *testing.T, a, b *store.Postgres) {
			for round := range 20 {
				id := fmt.Sprintf("k%02d", round)
				x := &store.Sandbox{ID: id, State: store.StateRunning}
				if err := a.CreateSandbox(ctx, x, 64, nil); err != nil {
					t.Fatal(err)
				}
				paused := *x
				paused.State, paused.Checkpoint = store.StatePaused, &store.CheckpointRef{ID: id + "-c1"}
				if err := a.UpdateSandbox(ctx, &paused, store.Was(x)); err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				var killErr, resumeErr error
				wg.Go(func() {
					killed := paused
					killed.State = store.StateKilled
					killErr = a.UpdateSandbox(ctx, &killed, store.Was(&paused))
				})
				wg.Go(func() {
					resuming := paused
					resuming.State = store.StateResuming
					resumeErr = b.ReviveSandbox(ctx, &resuming, store.Was(&paused), 64, nil)
				})
				wg.Wait()
				got, _ := b.GetSandbox(ctx, id)
				switch {
				case killErr == nil && resumeErr != nil && got.State == store.StateKilled:
				case resumeErr == nil && killErr != nil && got.State == store.StateResuming && got.Node == "b":
				default:
					t.Fatalf("round %d: kill on a %v, resume on b %v: the record is %s on %q", round, killErr, resumeErr, got.State, got.Node)
				}
			}
		}},
		{"an idempotency claim lasts as long as its holder's registration", func(t *testing.T, a, b *store.Postgres) {
			const lease = 400 * time.Millisecond
			if _, err := a.Register(ctx, store.Registration{Address: "http://a", TTL: lease}); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Register(ctx, store.Registration{Address: "http://b", TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			claim := func(p *store.Postgres, scope string) (bool, *store.Stored) {
				t.Helper()
				claimed, stored, err := p.ClaimIdempotency(ctx, scope)
				if err != nil {
					t.Fatal(err)
				}
				return claimed, stored
			}
			if ok, _ := claim(a, "k1"); !ok {
				t.Fatal("a's first claim of k1 refused")
			}
			// Held while a renews: b waits.
			if ok, stored := claim(b, "k1"); ok || stored != nil {
				t.Fatalf("b's claim of k1 held by a live node: claimed %v, stored %v", ok, stored)
			}
			// a crashes (its lease lapses): b takes the claim over, and
			// a's late answer does not replace b's.
			time.Sleep(lease + 200*time.Millisecond)
			if ok, _ := claim(b, "k1"); !ok {
				t.Fatal("b could not take over the claim of a node whose lease lapsed")
			}
			if err := a.FinishIdempotency(ctx, "k1", &store.Stored{Status: 201, Body: []byte("a's")}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Fatalf("a's answer for a claim b took over: %v", err)
			}
			if err := a.FinishIdempotency(ctx, "k1", nil); err != nil {
				t.Fatalf("a's release of a claim b took over: %v", err)
			}
			if err := b.FinishIdempotency(ctx, "k1", &store.Stored{Status: 201, ContentType: "application/json", Body: []byte("b's")}); err != nil {
				t.Fatal(err)
			}
			if err := b.FinishIdempotency(ctx, "k1", &store.Stored{Status: 201, ContentType: "application/json", Body: []byte("b's")}); err != nil {
				t.Fatalf("storing the answer again: %v", err)
			}
			if ok, stored := claim(a, "k1"); ok || stored == nil || string(stored.Body) != "b's" {
				t.Fatalf("k1 after b's answer: claimed %v, stored %+v", ok, stored)
			}

			// A node that registers again after a lapse (it ran on) keeps
			// its claims; one that restarted loses them at once.
			epoch, err := a.Register(ctx, store.Registration{Address: "http://a", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if ok, _ := claim(a, "k2"); !ok {
				t.Fatal("a's claim of k2 refused")
			}
			if err := a.Renew(ctx, epoch, store.NodeInfo{}, time.Millisecond); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			if _, err := a.Register(ctx, store.Registration{Address: "http://a", TTL: time.Minute, Again: true}); err != nil {
				t.Fatal(err)
			}
			if ok, _ := claim(b, "k2"); ok {
				t.Fatal("b took over a claim of a node that registered again and ran on")
			}
			if _, err := a.Register(ctx, store.Registration{Address: "http://a", TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			if ok, _ := claim(b, "k2"); !ok {
				t.Fatal("b could not take over a claim of a node that restarted")
			}
		}},
		{"a node that registers again keeps its drain; a restart ends it", func(t *testing.T, a, b *store.Postgres) {
			draining := func() bool {
				ms, err := b.Members(ctx)
				if err != nil || len(ms) != 1 {
					t.Fatalf("members: %+v, %v", ms, err)
				}
				return ms[0].Draining
			}
			if _, err := a.Register(ctx, store.Registration{Address: "http://a", TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			if err := a.SetDraining(ctx, true); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				reg  store.Registration
				want bool
			}{
				{store.Registration{Address: "http://a", TTL: time.Minute, Again: true, Draining: true}, true},
				{store.Registration{Address: "http://a", TTL: time.Minute, Again: true, Draining: false}, false},
				{store.Registration{Address: "http://a", TTL: time.Minute, Again: true, Draining: true}, true},
				{store.Registration{Address: "http://a", TTL: time.Minute, Draining: true}, false}, // a start
			} {
				if _, err := a.Register(ctx, tc.reg); err != nil {
					t.Fatal(err)
				}
				if got := draining(); got != tc.want {
					t.Errorf("after %+v: draining %v, want %v", tc.reg, got, tc.want)
				}
			}
		}},
		{"changes are notified", func(t *testing.T, a, b *store.Postgres) {
			lctx, cancel := context.WithCancel(ctx)
			defer cancel()
			ready, routes, tenants := make(chan struct{}), make(chan string, 16), make(chan struct{}, 16)
			go b.Listen(lctx, store.CatalogEvents{
				Ready:   func() { close(ready) },
				Route:   func(id string) { routes <- id },
				Tenants: func() { tenants <- struct{}{} },
			})
			<-ready
			x := &store.Sandbox{ID: "x", State: store.StateRunning}
			if err := a.CreateSandbox(ctx, x, 4, nil); err != nil {
				t.Fatal(err)
			}
			x.ExpiresAt = time.Now() // no move: no event
			if err := a.UpdateSandbox(ctx, x, store.Was(x)); err != nil {
				t.Fatal(err)
			}
			x.State = store.StatePaused // a move
			if err := a.UpdateSandbox(ctx, x, store.Expect{State: store.StateRunning}); err != nil {
				t.Fatal(err)
			}
			if err := a.CreateAPIKey(ctx, &store.APIKey{ID: "k", Tenant: "t", Hash: "h"}); err != nil {
				t.Fatal(err)
			}
			for i, want := range []string{"x", "x"} {
				select {
				case id := <-routes:
					if id != want {
						t.Fatalf("route event %d: %q", i, id)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("route event %d did not come", i)
				}
			}
			select {
			case <-tenants:
			case <-time.After(10 * time.Second):
				t.Fatal("no event for a new key")
			}
			select {
			case id := <-routes:
				t.Fatalf("an event for an update that moved nothing: %s", id)
			default:
			}
		}},
		{"a lapsed node's sandboxes are reported lost and stay so", func(t *testing.T, a, b *store.Postgres) {
			// A long lease while the records are made and the held
			// lease is checked (on a loaded host that took longer than a
			// short one: CI once saw it lapse before the check), then a
			// renewal cuts it short.
			epochA, err := a.Register(ctx, store.Registration{Address: "http://a", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Register(ctx, store.Registration{Address: "http://b", TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			run := &store.Sandbox{ID: "run", State: store.StateRunning, Ending: ""}
			paused := &store.Sandbox{ID: "paused", State: store.StateRunning}
			mine := &store.Sandbox{ID: "mine", State: store.StateRunning}
			for _, s := range []*store.Sandbox{run, paused} {
				if err := a.CreateSandbox(ctx, s, 4, nil); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.CreateSandbox(ctx, mine, 4, nil); err != nil {
				t.Fatal(err)
			}
			paused.State = store.StatePaused
			if err := a.UpdateSandbox(ctx, paused, store.Expect{State: store.StateRunning}); err != nil {
				t.Fatal(err)
			}
			if node, addr, err := b.RouteOf(ctx, "run"); err != nil || node != "a" || addr != "http://a" {
				t.Fatalf("route of run: %s %s %v", node, addr, err)
			}
			// While the lease holds, nothing is reported.
			if lost, err := b.ReportLost(ctx); err != nil || len(lost) != 0 {
				t.Fatalf("reported with the lease held: %v, %v", lost, err)
			}
			if err := a.Renew(ctx, epochA, store.NodeInfo{}, time.Millisecond); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			lost, err := b.ReportLost(ctx)
			if err != nil || len(lost) != 1 || lost[0].ID != "run" || lost[0].State != store.StateLost {
				t.Fatalf("reported: %+v, %v", lost, err)
			}
			for id, want := range map[string]string{"run": store.StateLost, "paused": store.StatePaused, "mine": store.StateRunning} {
				if got, _ := b.GetSandbox(ctx, id); got.State != want {
					t.Errorf("%s: %s, want %s", id, got.State, want)
				}
			}
			if _, _, err := b.RouteOf(ctx, "run"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("a lost sandbox still routes: %v", err)
			}
			// It ended when it was reported: a prune finds it in time.
			stale, err := b.StaleSandboxes(ctx, time.Now().Add(time.Minute), time.Time{})
			if err != nil || !slices.ContainsFunc(stale, func(s *store.Sandbox) bool { return s.ID == "run" && !s.EndedAt.IsZero() }) {
				t.Errorf("the lost record is not stale after the report: %v", err)
			}
			// Node a comes back: its renewal fails, and it cannot make the
			// lost sandbox live again.
			if err := a.Renew(ctx, epochA, store.NodeInfo{}, time.Minute); !errors.Is(err, store.ErrLeaseLost) {
				t.Fatalf("renewal after the report: %v", err)
			}
			back := *run
			back.ExpiresAt = time.Now()
			if err := a.UpdateSandbox(ctx, &back, store.Was(run)); !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Fatalf("the returning node revived a lost record: %v", err)
			}
			epoch2, err := a.Register(ctx, store.Registration{Address: "http://a", TTL: time.Minute})
			if err != nil || epoch2 <= epochA {
				t.Fatalf("register again: epoch %d (was %d), %v", epoch2, epochA, err)
			}
			if err := a.Renew(ctx, epoch2, store.NodeInfo{Sandboxes: 1}, time.Minute); err != nil {
				t.Fatal(err)
			}
			ms, err := b.Members(ctx)
			if err != nil || len(ms) != 2 || !ms[0].Alive || ms[0].Info.Sandboxes != 1 {
				t.Fatalf("members: %+v, %v", ms, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := newDatabase(t)
			tc.fn(t, openPG(t, url, "a"), openPG(t, url, "b"))
		})
	}
}

// TestPostgresUnavailable: with the server down, calls fail at once as
// unavailable (a 503), and work again once it is back, on the same store.
func TestPostgresUnavailable(t *testing.T) {
	srv := pgtest.Start(t)
	p := openPG(t, srv.NewDatabase(t), "a")
	ctx := context.Background()
	if err := p.CreateSandbox(ctx, &store.Sandbox{ID: "x", State: store.StateRunning}, 4, nil); err != nil {
		t.Fatal(err)
	}
	srv.Stop(t)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := p.GetSandbox(cctx, "x"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("get with the server down: %v", err)
	}
	if err := p.CreateSandbox(cctx, &store.Sandbox{ID: "y", State: store.StateRunning}, 4, nil); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("create with the server down: %v", err)
	}
	srv.Restart(t)
	if got, err := p.GetSandbox(ctx, "x"); err != nil || got.State != store.StateRunning {
		t.Fatalf("after the restart: %+v, %v", got, err)
	}
	if _, err := p.GetSandbox(ctx, "y"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("the create that failed left a record: %v", err)
	}
}

// keepT lets the shared server outlive the test that started it: its
// cleanup is TestMain's.
type keepT struct{ *testing.T }

func (k *keepT) Cleanup(f func()) { cleanups = append(cleanups, f) }

var cleanups []func()

func TestMain(m *testing.M) {
	code := m.Run()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	os.Exit(code)
}

// TestPostgresSecrets: secrets put on one node open on another that
// shares the keyset (the catalog keeps only sealed records), and a delete
// there is seen here after a reload.
func TestPostgresSecrets(t *testing.T) {
	url := newDatabase(t)
	a, b := openPG(t, url, "a"), openPG(t, url, "b")
	h, err := secrets.NewKeyset()
	if err != nil {
		t.Fatal(err)
	}
	sa, err := secrets.OpenWith(a.Secrets(), h)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := secrets.OpenWith(b.Secrets(), h)
	if err != nil {
		t.Fatal(err)
	}
	const value = "sk-live-cluster"
	if _, err := sa.Put("t1/openai", value, secrets.Binding{Host: "api.openai.com"}); err != nil {
		t.Fatal(err)
	}
	var raw []byte
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(context.Background(), "select record from secrets where name = 't1/openai'").Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), value) {
		t.Fatal("the catalog holds the value in the clear")
	}
	if err := sb.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, got, err := sb.Open("t1/openai"); err != nil || got != value {
		t.Fatalf("open on node b: %q, %v", got, err)
	}
	if err := sb.Delete("t1/openai"); err != nil {
		t.Fatal(err)
	}
	if err := sa.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, ok := sa.Get("t1/openai"); ok {
		t.Error("node a still has the secret node b deleted")
	}
}
