package store_test

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/spacesandbox/space/internal/store"
)

// tracer records the statements the catalog sends while it is on.
type tracer struct {
	mu  sync.Mutex
	on  bool
	got []statement
}

type statement struct {
	sql  string
	args []any
}

func (tr *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.on {
		tr.got = append(tr.got, statement{d.SQL, d.Args})
	}
	return ctx
}

func (tr *tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// record runs call and answers the statements it sent.
func (tr *tracer) record(t *testing.T, call func() error) []statement {
	t.Helper()
	tr.mu.Lock()
	tr.on, tr.got = true, nil
	tr.mu.Unlock()
	err := call()
	tr.mu.Lock()
	got := tr.got
	tr.on, tr.got = false, nil
	tr.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// scanned is the rows of each scan of the table or its indexes in an
// analysed plan. What a call reads, not how (a plan may sort the rows of
// a page it read by a range of an index): a list that sorts every match
// first reads them all.
var scanned = regexp.MustCompile(`Scan .*on sandboxes\S*( \S+)?\s+\(.*actual time=\S+ rows=(\d+) loops=(\d+)\)`)

// mostScanned is the most rows one scan in plan read.
func mostScanned(plan string) int {
	most := 0
	for _, m := range scanned.FindAllStringSubmatch(plan, -1) {
		rows, _ := strconv.Atoi(m[2])
		loops, _ := strconv.Atoi(m[3])
		most = max(most, rows*loops)
	}
	return most
}

// TestPostgresAtScale fills the catalog with a million sandbox records and
// explains (EXPLAIN ANALYZE) the statements the store's own calls send,
// as a tracer on its connections caught them: a get, a route, a page of
// each kind of list, and what a node runs again and again (recovery, the
// prune, template collection and information, volume holders, a tenant's
// paused usage) read their indexes, never the table, and no more rows
// than they answer. The plans are what
// docs/cluster.md "A big catalog" shows (go test -v prints them). -short
// skips it.
func TestPostgresAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a million records take a while")
	}
	ctx := context.Background()
	url := newDatabase(t)
	tr := &tracer{}
	p, err := store.OpenPostgresTraced(ctx, url, "n7", tr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	// A million records over 100 nodes and 50 tenants (tenant 0 is the
	// default one's records made before tenants, "", tenant 1 "default")
	// and 20 images, one a second back from now: 1% running (100 per
	// node), half paused (within 29 days, but for 10 paused 31 days ago;
	// one in 5,000 mounts a volume), the rest killed (within 50 minutes,
	// but for 10 two hours ago): what a prune finds is what it forgets.
	start := time.Now()
	for _, sql := range []string{
		`insert into nodes (id, address, lease_until) select 'n' || g, 'http://n' || g, now() + interval '1 hour' from generate_series(0, 99) g`,
		`insert into sandboxes (id, node, tenant, state, live, slot, doc, created_at, ended_at, paused_at, image)
		select 's' || g, case when state = 'running' then 'n' || (g / 100 % 100) else '' end, tenant, state, state = 'running',
			case when state = 'running' then g / 10000 else -1 end,
			jsonb_build_object('id', 's' || g, 'tenant', tenant, 'state', state, 'template', 'base', 'image', image, 'created_at', created)
				|| case when ended is null then '{}' else jsonb_build_object('ended_at', ended) end
				|| case when paused is null then '{}' else jsonb_build_object('paused_at', paused) end
				|| case when g % 10000 = 3 then '{"volumes": [{"volume_id": "v", "name": "v", "path": "/v"}]}' else '{}' end::jsonb,
			created, ended, paused, image
		from (select *,
				case when state = 'killed' then now() - case when g % 100000 = 2 then interval '2 hours' else make_interval(secs => g % 3000) end end as ended,
				case when state = 'paused' then now() - case when g % 100000 = 1 then interval '31 days' else make_interval(secs => g % 2500000) end end as paused
			from (select g, now() - make_interval(secs => g) as created, 'img' || (g / 2 % 20) as image,
					case g % 100 when 0 then 'running' else case g % 2 when 1 then 'paused' else 'killed' end end as state,
					case (g / 100) % 50 when 0 then '' when 1 then 'default' else 't' || ((g / 100) % 50) end as tenant
				from generate_series(1, 1000000) g) y) x`,
		// What autovacuum does by itself: an index-only scan needs it.
		"vacuum analyze",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("a million records in %s", time.Since(start).Round(time.Millisecond))

	var next *store.Cursor
	page := func(q store.Query, want int) func() error {
		return func() error {
			got, n, err := p.QuerySandboxes(ctx, q)
			if err == nil && (len(got) != want || q.Limit > 0 && n == nil) {
				// Every page here has one after it.
				t.Errorf("%+v: %d records (next %v), want %d", q, len(got), n, want)
			}
			next = n
			return err
		}
	}
	running, paused, resuming := []string{store.StateRunning}, []string{store.StatePaused, store.StateResuming}, []string{store.StateRunning, store.StatePaused}
	every := []string{store.StateCreating, store.StateRunning, store.StatePaused, store.StateResuming, store.StateKilled, store.StateLost}
	for _, tc := range []struct {
		name string
		call func() error
		// index is the indexes the plan must read.
		index string
		// most is the most rows one scan may read: what the call
		// answers, not every match.
		most int
	}{
		{"get", func() error { _, err := p.GetSandbox(ctx, "s500000"); return err }, "sandboxes_pkey", 1},
		{"route", func() error { _, _, err := p.RouteOf(ctx, "s500000"); return err }, "sandboxes_pkey", 1},
		{"a page of a tenant's running sandboxes", page(store.Query{Tenants: []string{"t5"}, States: running, Limit: 100}, 100), "sandboxes_tenant_list", 101},
		{"a page of a tenant's paused sandboxes", page(store.Query{Tenants: []string{"t5"}, States: []string{store.StatePaused}, Limit: 100}, 100), "sandboxes_tenant_list", 101},
		{"the next page", func() error {
			return page(store.Query{Tenants: []string{"t5"}, States: []string{store.StatePaused}, Limit: 100, After: next}, 100)()
		}, "sandboxes_tenant_list", 101},
		{"a page of the default tenant's (tenants \"default\" and \"\")", page(store.Query{Tenants: []string{"default", ""}, States: running, Limit: 100}, 100), "sandboxes_tenant_list", 101},
		{"a page of E2B's paused list (paused and resuming)", page(store.Query{Tenants: []string{"t5"}, States: paused, Limit: 100}, 100), "sandboxes_tenant_list", 101},
		{"a page of running and paused", page(store.Query{Tenants: []string{"t5"}, States: resuming, Limit: 100}, 100), "sandboxes_tenant_list", 101},
		{"a page of every state", page(store.Query{Tenants: []string{"t5"}, States: every, Limit: 100}, 100), "sandboxes_tenant_list", 101},
		{"a page of the admin's list of running sandboxes", page(store.Query{States: running, Limit: 100}, 100), "sandboxes_list", 101},
		{"a node's slots (every create)", func() error {
			return p.CreateSandbox(ctx, &store.Sandbox{ID: "new", State: store.StateCreating}, 1000, nil)
		}, "sandboxes_node_slot", 101},
		{"a node's live records (a restart's recovery)", func() error {
			got, err := p.LiveSandboxes(ctx)
			if err == nil && len(got) != 101 {
				t.Errorf("n7's live records: %d, want 101", len(got))
			}
			return err
		}, "sandboxes_node_live", 101},
		{"the records a prune forgets (every minute)", func() error {
			got, err := p.StaleSandboxes(ctx, time.Now().Add(-time.Hour), time.Now().Add(-30*24*time.Hour))
			if err == nil && len(got) != 20 {
				t.Errorf("stale records: %d, want 20", len(got))
			}
			return err
		}, "sandboxes_ended sandboxes_paused", 20},
		{"the images sandboxes hold (template collection)", func() error {
			got, err := p.HeldImages(ctx)
			if n := len(slices.DeleteFunc(got, func(image string) bool { return !strings.HasPrefix(image, "img") })); err == nil && n != 20 {
				t.Errorf("held images: %v, want img0 to img19", got)
			}
			return err
		}, "sandboxes_paused_image sandboxes_node_live", 101},
		{"the sandboxes on a template's images (its information)", func() error {
			n, err := p.CountOnImages(ctx, []string{"img3"})
			if err == nil && n != 25000 {
				t.Errorf("on img3: %d, want 25,000", n)
			}
			return err
		}, "sandboxes_paused_image", 25000},
		{"the paused sandboxes that mount a volume (volume list)", func() error {
			got, err := p.VolumeHolders(ctx)
			if err == nil && len(got) != 100 {
				t.Errorf("volume holders: %d, want 100", len(got))
			}
			return err
		}, "sandboxes_paused_volumes", 100},
		{"a tenant's paused sandboxes (its quotas, at each pause)", func() error {
			n, _, err := p.PausedUsage(ctx, []string{"default", ""})
			if err == nil && n != 20000 {
				t.Errorf("the default tenant's paused sandboxes: %d, want 20,000", n)
			}
			return err
		}, "sandboxes_tenant_list", 20000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, st := range tr.record(t, tc.call) {
				// What reads sandboxes; an insert is what it is.
				if !strings.Contains(st.sql, "sandboxes") || strings.HasPrefix(st.sql, "insert") {
					continue
				}
				plan := explain(t, conn, st)
				t.Logf("%s\n%s", st.sql, plan)
				for _, index := range strings.Fields(tc.index) {
					if !strings.Contains(plan, index) {
						t.Errorf("%s does not read %s:\n%s", tc.name, index, plan)
					}
				}
				if strings.Contains(plan, "Seq Scan on sandboxes") {
					t.Errorf("%s reads the table:\n%s", tc.name, plan)
				}
				if n := mostScanned(plan); n == 0 || n > tc.most {
					t.Errorf("%s: a scan read %d rows, want 1 to %d:\n%s", tc.name, n, tc.most, plan)
				}
			}
		})
	}
}

// explain answers st's plan as run (EXPLAIN ANALYZE, in a transaction
// rolled back after).
func explain(t *testing.T, conn *pgx.Conn, st statement) string {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	rows, err := tx.Query(ctx, "explain (analyze) "+st.sql, st.args...)
	if err != nil {
		t.Fatalf("explain %s: %v", st.sql, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("explain %s: %v", st.sql, err)
	}
	return strings.Join(lines, "\n")
}
