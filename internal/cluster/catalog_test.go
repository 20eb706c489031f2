package cluster

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/pgtest"
)

// The tests here run against a real PostgreSQL catalog (pgtest): one
// server for the package, a database per test, a store per node.

var (
	pgSrv    *pgtest.Server
	cleanups []func()
)

func TestMain(m *testing.M) {
	code := m.Run()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	os.Exit(code)
}

// keepT lets the shared server outlive the test that started it.
type keepT struct{ *testing.T }

func (k *keepT) Cleanup(f func()) { cleanups = append(cleanups, f) }

// newCatalog answers a fresh database's URL.
func newCatalog(t *testing.T) string {
	t.Helper()
	if pgSrv == nil {
		pgSrv = pgtest.Start(&keepT{t})
	}
	return pgSrv.NewDatabase(t)
}

// openNode opens the catalog at url as node.
func openNode(t *testing.T, url, node string) *store.Postgres {
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

func register(t *testing.T, p *store.Postgres, addr string, lease time.Duration) int64 {
	t.Helper()
	epoch, err := p.Register(context.Background(), store.Registration{Address: addr, TTL: lease})
	if err != nil {
		t.Fatal(err)
	}
	return epoch
}

// TestRouterFollowsNodeAddress: a cached route names its node's address;
// when the node registers again at another address, every router drops
// its routes to it (the nodes table notifies) and the next lookup has
// the new one.
func TestRouterFollowsNodeAddress(t *testing.T) {
	url := newCatalog(t)
	a, b := openNode(t, url, "a"), openNode(t, url, "b")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	register(t, a, "http://old.a:7070", time.Minute)
	x := &store.Sandbox{ID: "x", State: store.StateRunning}
	if err := a.CreateSandbox(ctx, x, 4, nil); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	var once sync.Once
	r := NewRouter(b, Hooks{Missed: func() { once.Do(func() { close(ready) }) }}, nil)
	go r.Run(ctx)
	<-ready
	lookup := func() Route {
		t.Helper()
		rt, err := r.Lookup(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		return rt
	}
	if rt := lookup(); rt.Address != "http://old.a:7070" {
		t.Fatalf("route: %+v", rt)
	}
	before := r.Lookups()
	if rt := lookup(); rt.Address != "http://old.a:7070" || r.Lookups() != before {
		t.Fatalf("the second lookup: %+v, %d catalog lookups (want it cached)", rt, r.Lookups()-before)
	}
	// A renewal changes nothing: the route stays cached.
	if err := a.Renew(ctx, 1, store.NodeInfo{Sandboxes: 1}, time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if lookup(); r.Lookups() != before {
		t.Error("a lease renewal dropped the cached route")
	}
	register(t, a, "http://new.a:7070", time.Minute)
	deadline := time.Now().Add(10 * time.Second)
	for lookup().Address != "http://new.a:7070" {
		if time.Now().After(deadline) {
			t.Fatalf("the route still names the node's old address 10 s after it registered at a new one")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// moves is a node's Sandboxes as a migration's target sees it: it
// records resumes.
type moves struct {
	mu      sync.Mutex
	resumed []string
}

func (m *moves) SetDraining(bool)   {}
func (m *moves) Movable() []Movable { return nil }
func (m *moves) Pause(context.Context, string) error {
	return errdefs.New(errdefs.ErrFailedPrecondition, "not here")
}
func (m *moves) Resume(_ context.Context, id string, _ time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.resumed = append(m.resumed, id)
	return nil
}

func (m *moves) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.resumed)
}

// TestMissedMigrations: a migration whose notification the target never
// heard (it was not listening) is found by the target's rescan, at once
// when asked (the listener came back) and periodically, and resumed once.
func TestMissedMigrations(t *testing.T) {
	url := newCatalog(t)
	a, b := openNode(t, url, "a"), openNode(t, url, "b")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	boxes := &moves{}
	d := NewDrainer("b", b, boxes, nil)
	waitResumed := func(id string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			m, err := a.GetMigration(ctx, id)
			if err == nil && !m.Resumed.IsZero() {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("migration of %s not resumed: %+v, %v", id, m, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	pause := func(id, to string) {
		t.Helper()
		now := time.Now().UTC()
		if err := a.PutMigration(ctx, &store.Migration{Sandbox: id, From: "a", To: to, Timeout: time.Minute, Requested: now, Paused: now}); err != nil {
			t.Fatal(err)
		}
	}
	pause("s1", "b")
	pause("other", "c") // not b's
	d.Rescan(ctx)
	waitResumed("s1")
	if boxes.count() != 1 {
		t.Fatalf("resumes: %v", boxes.resumed)
	}
	d.Rescan(ctx) // done: nothing more
	time.Sleep(100 * time.Millisecond)
	if boxes.count() != 1 {
		t.Fatalf("a finished migration resumed again: %v", boxes.resumed)
	}
	go d.Run(ctx, 100*time.Millisecond)
	pause("s2", "b")
	waitResumed("s2")
	if boxes.count() != 2 || boxes.resumed[1] != "s2" {
		t.Fatalf("resumes: %v", boxes.resumed)
	}
}

// fakeNode is a cluster.Node whose drain state the test sets.
type fakeNode struct {
	draining   atomic.Bool
	reconciled atomic.Int32
}

func (n *fakeNode) Running() int                           { return 0 }
func (n *fakeNode) PoolSizes() map[string]int              { return nil }
func (n *fakeNode) Draining() bool                         { return n.draining.Load() }
func (n *fakeNode) Reconcile(context.Context) (int, error) { n.reconciled.Add(1); return 0, nil }

// TestMemberKeepsDrainAcrossLapse: a draining node whose lease lapsed
// registers again as draining (and one that is not, as not): the catalog
// and the node agree.
func TestMemberKeepsDrainAcrossLapse(t *testing.T) {
	url := newCatalog(t)
	p, other := openNode(t, url, "a"), openNode(t, url, "b")
	ctx := context.Background()
	const lease = 300 * time.Millisecond
	for _, draining := range []bool{true, false} {
		n := &fakeNode{}
		n.draining.Store(draining)
		m, err := Join(ctx, Config{Catalog: p, Node: n, ID: "a", Address: "http://a", Lease: lease})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.SetDraining(ctx, draining); err != nil {
			t.Fatal(err)
		}
		time.Sleep(lease + 200*time.Millisecond)
		m.renew(ctx) // lapsed: registers again and reconciles
		if n.reconciled.Load() != 1 {
			t.Fatalf("draining %v: the renewal after the lapse did not reconcile", draining)
		}
		ms, err := other.Members(ctx)
		if err != nil || len(ms) != 1 || !ms[0].Alive {
			t.Fatalf("members: %+v, %v", ms, err)
		}
		if ms[0].Draining != draining {
			t.Errorf("the node drains: %v; the catalog says %v", draining, ms[0].Draining)
		}
	}
}

// finishFails fails FinishIdempotency while fails > 0.
type finishFails struct {
	*store.Postgres
	fails atomic.Int32
}

func (f *finishFails) FinishIdempotency(ctx context.Context, scope string, s *store.Stored) error {
	if f.fails.Add(-1) >= 0 {
		return errdefs.New(errdefs.ErrUnavailable, "the catalog database is unavailable (test)")
	}
	return f.Postgres.FinishIdempotency(ctx, scope, s)
}

// keyedNode is a node of TestIdempotencyClaims: its creates count, and
// block while hold is set.
type keyedNode struct {
	srv     *httptest.Server
	fwd     *Forwarder
	created atomic.Int32
	hold    atomic.Pointer[chan struct{}] // nil: answer at once
}

// TestIdempotencyClaims: a claim lasts as long as its node: a create
// whose answer could not be stored is stored by retries (creates sent
// again get it, and nothing is made twice), and a claim of a node that
// died mid-create is taken over once its lease lapses (not held for a
// day).
func TestIdempotencyClaims(t *testing.T) {
	url := newCatalog(t)
	ctx := context.Background()
	const lease = 500 * time.Millisecond
	pa, pb := openNode(t, url, "a"), openNode(t, url, "b")
	idemA := &finishFails{Postgres: pa}
	nodes := map[string]*keyedNode{}
	for name, p := range map[string]*store.Postgres{"a": pa, "b": pb} {
		n := &keyedNode{}
		var idem Idempotency = p
		if name == "a" {
			idem = idemA
		}
		n.fwd = NewForwarder(ForwarderConfig{Self: name, Router: NewRouter(p, Hooks{}, nil), Secret: []byte("k"), SandboxOf: sandboxOf,
			IsCreate:    func(r *http.Request) bool { return r.Method == "POST" && r.URL.Path == "/v1/sandboxes" },
			TemplateOf:  func(*http.Request, []byte) string { return "base" },
			Idempotency: idem,
			Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if hold := n.hold.Load(); hold != nil {
					<-*hold
				}
				c := n.created.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, `{"node":"`+name+`","n":`+string(rune('0'+c))+`}`)
			})})
		n.fwd.finishRetry = 20 * time.Millisecond
		n.srv = httptest.NewServer(n.fwd)
		t.Cleanup(n.srv.Close)
		nodes[name] = n
	}
	register(t, pb, nodes["b"].srv.URL, time.Minute)
	epochA := register(t, pa, nodes["a"].srv.URL, time.Minute)
	create := func(at, key string) (int, string, string) {
		req, _ := http.NewRequest("POST", nodes[at].srv.URL+"/v1/sandboxes", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Authorization", "Bearer user")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get("Idempotent-Replayed")
	}

	// The answer could not be stored at first: retries store it, and the
	// same key through the other node gets it.
	idemA.fails.Store(3)
	status, first, _ := create("a", "k1")
	if status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, first)
	}
	status, again, replayed := create("b", "k1")
	if status != http.StatusCreated || again != first || replayed != "true" {
		t.Fatalf("the same key through b: %d %s (replayed %q), want a's answer %s", status, again, replayed, first)
	}
	if n := nodes["a"].created.Load() + nodes["b"].created.Load(); n != 1 {
		t.Fatalf("%d creates for one key", n)
	}

	// Node a dies mid-create (its handler never answers, its lease
	// lapses): the key's next create, through b, takes the claim over.
	if err := pa.Renew(ctx, epochA, store.NodeInfo{}, lease); err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	nodes["a"].hold.Store(&hold)
	stuck := make(chan string, 1)
	go func() { _, body, _ := create("a", "k2"); stuck <- body }()
	time.Sleep(100 * time.Millisecond) // a holds k2
	start := time.Now()
	status, body, _ := create("b", "k2")
	if status != http.StatusCreated || !strings.Contains(body, `"node":"b"`) {
		t.Fatalf("the key of a dead node's create through b: %d %s", status, body)
	}
	t.Logf("claim taken over %s after the create through b came (lease %s)", time.Since(start).Round(10*time.Millisecond), lease)
	// a comes back to life and answers: its late answer does not replace
	// b's, which the key keeps answering.
	close(hold)
	<-stuck
	time.Sleep(100 * time.Millisecond)
	register(t, pa, nodes["a"].srv.URL, time.Minute)
	nodes["a"].hold.Store(nil)
	if _, got, replayed := create("a", "k2"); got != body || replayed != "true" {
		t.Fatalf("k2 after both answered: %s (replayed %q), want b's %s", got, replayed, body)
	}
}

// TestBuildRequestsGoToTheBuildsNode: a build's log and its cancel are
// served by the node the catalog says runs the build (its log is on that
// node's disk, and only it can stop it), whichever node they come to;
// what the catalog answers alone (the build's record) is served where it
// lands, and so is a build the catalog does not know.
func TestBuildRequestsGoToTheBuildsNode(t *testing.T) {
	url := newCatalog(t)
	ctx := context.Background()
	buildOf := func(r *http.Request) string {
		rest, ok := strings.CutPrefix(r.URL.Path, "/v1/builds/")
		id, what, _ := strings.Cut(rest, "/")
		if !ok || what != "logs" && what != "cancel" {
			return ""
		}
		return id
	}
	srvs := map[string]*httptest.Server{}
	for _, name := range []string{"a", "b"} {
		p := openNode(t, url, name)
		fwd := NewForwarder(ForwarderConfig{Self: name, Router: NewRouter(p, Hooks{}, nil), Secret: []byte("k"), SandboxOf: sandboxOf,
			BuildOf: buildOf, Builds: p,
			Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) })})
		srvs[name] = httptest.NewServer(fwd)
		t.Cleanup(srvs[name].Close)
		register(t, p, srvs[name].URL, time.Minute)
		if name == "a" {
			for id, node := range map[string]string{"on-a": "a", "on-b": "b", "legacy": ""} {
				if err := p.PutBuild(ctx, &store.Build{ID: id, Node: node, Template: "app", State: store.BuildBuilding}, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, tc := range []struct{ via, method, path, want string }{
		{"b", "GET", "/v1/builds/on-a/logs", "a"},
		{"b", "POST", "/v1/builds/on-a/cancel", "a"},
		{"a", "GET", "/v1/builds/on-a/logs", "a"},
		{"a", "POST", "/v1/builds/on-b/cancel", "b"},
		{"b", "GET", "/v1/builds/on-a", "b"},
		{"b", "GET", "/v1/builds/unknown/logs", "b"},
		{"a", "GET", "/v1/builds/legacy/logs", "a"},
	} {
		req, _ := http.NewRequest(tc.method, srvs[tc.via].URL+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(got) != tc.want {
			t.Errorf("%s %s through %s: served by %q, want %s", tc.method, tc.path, tc.via, got, tc.want)
		}
	}
}
