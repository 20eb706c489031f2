package tenant

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

func newService(t *testing.T, defaults store.Quotas) (*Service, *store.Bolt) {
	t.Helper()
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc, err := New(context.Background(), st, "admin-key", defaults, nil)
	if err != nil {
		t.Fatal(err)
	}
	return svc, st
}

func TestCheck(t *testing.T) {
	q := store.Quotas{Sandboxes: 2, VCPU: 4, MemoryMB: 1024, Builds: 1, PausedSandboxes: 1, PausedMB: 1024,
		Snapshots: 3, SnapshotMB: 2048, Templates: 2, TemplateMB: 500}
	for _, tc := range []struct {
		name      string
		use, add  Usage
		wantQuota string
	}{
		{"room", Usage{Sandboxes: 1, VCPU: 2, MemoryMB: 512}, Usage{Sandboxes: 1, VCPU: 2, MemoryMB: 512}, ""},
		{"sandboxes", Usage{Sandboxes: 2, VCPU: 2, MemoryMB: 512}, Usage{Sandboxes: 1, VCPU: 1, MemoryMB: 1}, "sandboxes"},
		{"vcpu", Usage{Sandboxes: 1, VCPU: 3}, Usage{Sandboxes: 1, VCPU: 2}, "vcpu"},
		{"memory", Usage{Sandboxes: 1, MemoryMB: 1000}, Usage{Sandboxes: 1, MemoryMB: 100}, "memory_mb"},
		{"paused", Usage{PausedSandboxes: 1}, Usage{PausedSandboxes: 1}, "paused_sandboxes"},
		{"paused bytes", Usage{PausedSandboxes: 0, PausedMB: 900}, Usage{PausedSandboxes: 1, PausedMB: 200}, "paused_mb"},
		{"snapshots", Usage{Snapshots: 3}, Usage{Snapshots: 1, SnapshotMB: 1}, "snapshots"},
		{"snapshot bytes", Usage{Snapshots: 1, SnapshotMB: 2000}, Usage{Snapshots: 1, SnapshotMB: 100}, "snapshot_mb"},
		{"templates", Usage{Templates: 2}, Usage{Templates: 1, TemplateMB: 1}, "templates"},
		{"template bytes", Usage{Templates: 1, TemplateMB: 500}, Usage{TemplateMB: 1}, "template_mb"},
		{"builds", Usage{Builds: 1, VCPU: 1, MemoryMB: 256}, Usage{Builds: 1, VCPU: 1, MemoryMB: 256}, "builds"},
		{"a build's vcpu", Usage{Sandboxes: 1, VCPU: 3}, Usage{Builds: 1, VCPU: 2, MemoryMB: 256}, "vcpu"},
		{"a build's memory", Usage{Sandboxes: 1, MemoryMB: 1000}, Usage{Builds: 1, VCPU: 1, MemoryMB: 256}, "memory_mb"},
		// A build is not a sandbox: a tenant at its sandboxes quota builds.
		{"a build at the sandboxes quota", Usage{Sandboxes: 2, VCPU: 2, MemoryMB: 512}, Usage{Builds: 1, VCPU: 1, MemoryMB: 256}, ""},
		{"a sandbox beside a build", Usage{Sandboxes: 1, Builds: 1, VCPU: 2, MemoryMB: 512}, Usage{Sandboxes: 1, VCPU: 1, MemoryMB: 256}, ""},
		{"room for a snapshot", Usage{Snapshots: 2, SnapshotMB: 100}, Usage{Snapshots: 1, SnapshotMB: 100}, ""},
		{"over one quota does not block what adds nothing to it", Usage{Sandboxes: 5}, Usage{PausedSandboxes: 1}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check("acme", q, tc.use, tc.add)
			if tc.wantQuota == "" {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrQuotaExceeded) {
				t.Fatalf("Check: %v, want ErrQuotaExceeded", err)
			}
			d, _ := errdefs.Details(err).(map[string]any)
			if d["quota"] != tc.wantQuota || d["limit"] == nil || d["used"] == nil {
				t.Fatalf("details %v, want quota %s with limit and used", d, tc.wantQuota)
			}
			if msg := errdefs.PublicMessage(err); !strings.Contains(msg, tc.wantQuota) || !strings.Contains(msg, "acme") {
				t.Fatalf("message %q names neither the quota nor the tenant", msg)
			}
		})
	}
	if err := Check("acme", store.Quotas{}, Usage{Sandboxes: 1000}, Usage{Sandboxes: 1}); err != nil {
		t.Fatalf("no quotas: %v", err)
	}
}

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		tenant, name, want string
		bad                bool
	}{
		{Default, "github", "github", false},
		{"acme", "github", "acme/github", false},
		{"acme", "x/y", "", true},
	} {
		got, err := Qualify(tc.tenant, tc.name)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("Qualify(%q, %q) = %q, %v", tc.tenant, tc.name, got, err)
		}
	}
	acme, bob := Principal{Tenant: "acme"}, Principal{Tenant: "bob"}
	for _, tc := range []struct {
		p      Principal
		q      string
		want   string
		wantOK bool
	}{
		{acme, "acme/github", "github", true},
		{bob, "acme/github", "", false},
		{acme, "github", "", false},
		{Principal{Tenant: Default}, "github", "github", true},
		{Admin, "acme/github", "acme/github", true},
		{Admin, "github", "github", true},
	} {
		if got, ok := Visible(tc.p, tc.q); got != tc.want || ok != tc.wantOK {
			t.Errorf("Visible(%v, %q) = %q, %v", tc.p, tc.q, got, ok)
		}
	}
}

func TestKeys(t *testing.T) {
	svc, st := newService(t, store.Quotas{})
	ctx := context.Background()
	if _, err := svc.CreateTenant(ctx, "acme", "Acme", store.Quotas{}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"", "Acme", "a/b", "-x", strings.Repeat("a", 64)} {
		if _, err := svc.CreateTenant(ctx, id, "", store.Quotas{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("CreateTenant(%q): %v, want ErrInvalidArgument", id, err)
		}
	}
	if _, err := svc.CreateTenant(ctx, "acme", "again", store.Quotas{}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("second acme: %v", err)
	}
	if _, _, err := svc.IssueKey(ctx, "nobody", ""); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("key of an unknown tenant: %v", err)
	}
	key, k, err := svc.IssueKey(ctx, "acme", "ci")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(key, KeyPrefix) || !strings.HasPrefix(key, k.ID) || len(k.ID) != len(KeyPrefix)+16 || k.Hash == "" || strings.Contains(k.Hash, key) {
		t.Fatalf("key %q, record %+v: want an id of the prefix and 16 hex digits", key, k)
	}
	var revoked []string
	svc.OnRevoke(func(id string) { revoked = append(revoked, id) })
	p, err := svc.Principal(key)
	if err != nil || p.Tenant != "acme" || p.Admin || p.Key != k.ID {
		t.Fatalf("Principal: %+v, %v", p, err)
	}
	if p, err := svc.Principal("admin-key"); err != nil || !p.Admin {
		t.Fatalf("admin key: %+v, %v", p, err)
	}
	if _, err := svc.Principal(key + "x"); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Fatalf("wrong key: %v", err)
	}

	// A request held open by the key ends when the key is revoked.
	held, release := svc.Hold(ctx, p)
	defer release()
	if _, err := svc.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the held request was not cancelled by the revocation")
	}
	if _, err := svc.Principal(key); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Fatalf("revoked key: %v", err)
	}
	if len(revoked) != 1 || revoked[0] != k.ID {
		t.Fatalf("OnRevoke was told %v, want [%s]", revoked, k.ID)
	}
	if _, err := svc.RevokeKey(ctx, "e2b_nosuchkey"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("revoke of an unknown key: %v", err)
	}

	// A restart knows the revocation; the stored record holds no key.
	again, err := New(ctx, st, "admin-key", store.Quotas{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.Principal(key); err == nil {
		t.Fatal("a revoked key works after a restart")
	}
	keys, _ := again.Keys(ctx, "acme")
	if len(keys) != 1 || keys[0].RevokedAt.IsZero() {
		t.Fatalf("keys after restart: %+v", keys)
	}
}

func TestQuotaValues(t *testing.T) {
	svc, _ := newService(t, store.Quotas{})
	ctx := context.Background()
	for _, tc := range []struct {
		q  store.Quotas
		ok bool
	}{
		{store.Quotas{}, true},
		{store.Quotas{Sandboxes: -1, VCPU: 8, MemoryMB: -1, PausedSandboxes: 3, CreatesPerSecond: -1, CreatesBurst: -1}, true},
		{store.Quotas{Sandboxes: -2}, false},
		{store.Quotas{VCPU: -5}, false},
		{store.Quotas{MemoryMB: -1024}, false},
		{store.Quotas{PausedSandboxes: -3}, false},
		{store.Quotas{Builds: -1}, true},
		{store.Quotas{Builds: -2}, false},
		{store.Quotas{CreatesBurst: -2}, false},
		{store.Quotas{CreatesPerSecond: -0.5}, false},
	} {
		_, err := svc.SetQuotas(ctx, Default, tc.q)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, errdefs.ErrInvalidArgument)) {
			t.Errorf("quotas %+v: %v, want ok=%v (else invalid argument)", tc.q, err, tc.ok)
		}
	}
}

func TestAllowCreate(t *testing.T) {
	svc, _ := newService(t, store.Quotas{CreatesPerSecond: 1, CreatesBurst: 2})
	p := Principal{Tenant: "acme", Key: "k"}
	for i := range 2 {
		if err := svc.AllowCreate(p, 1); err != nil {
			t.Fatalf("create %d within the burst: %v", i, err)
		}
	}
	err := svc.AllowCreate(p, 1)
	if d, _ := errdefs.Details(err).(map[string]any); !errors.Is(err, errdefs.ErrResourceExhausted) || d["quota"] != "creates_per_second" {
		t.Fatalf("third create: %v", err)
	}
	if err := svc.AllowCreate(Principal{Tenant: "other", Key: "o"}, 1); err != nil {
		t.Fatalf("another tenant's bucket is its own: %v", err)
	}
	if err := svc.AllowCreate(Admin, 1); err != nil {
		t.Fatalf("the admin key is not limited: %v", err)
	}
}

// TestAllowCreateAnswer: a refusal says what is left of the burst and how
// long until the request would pass, in its details and as a Retry-After.
func TestAllowCreateAnswer(t *testing.T) {
	svc, _ := newService(t, store.Quotas{CreatesPerSecond: 2, CreatesBurst: 2})
	p := Principal{Tenant: "acme", Key: "k"}
	t0 := time.Now()
	for i := range 2 {
		if err := svc.allowCreate(p, 1, t0); err != nil {
			t.Fatalf("create %d within the burst: %v", i, err)
		}
	}
	for _, tc := range []struct {
		name        string
		at          time.Duration
		n           int
		left, used  float64
		waitMS      int64 // 0: no retry hint
		retryHeader string
		message     string
	}{
		{"empty bucket", 0, 1, 0, 2, 500, "1", "0 of 2 creates left, this request needs 1; retry in 500ms"},
		{"part refilled", 200 * time.Millisecond, 1, 0.4, 1.6, 300, "1", "0.4 of 2 creates left, this request needs 1; retry in 300ms"},
		{"two at once", 200 * time.Millisecond, 2, 0.4, 1.6, 800, "1", "this request needs 2; retry in 800ms"},
		{"more than the burst", 0, 3, 0, 2, 0, "", "a request for 3 at once can never pass"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := svc.allowCreate(p, tc.n, t0.Add(tc.at))
			d, _ := errdefs.Details(err).(map[string]any)
			if !errors.Is(err, errdefs.ErrResourceExhausted) || d == nil {
				t.Fatalf("refusal: %v", err)
			}
			want := map[string]any{"quota": "creates_per_second", "limit": 2.0, "burst": 2, "tokens_left": tc.left, "used": tc.used, "requested": tc.n}
			if tc.waitMS > 0 {
				want["retry_after_ms"] = tc.waitMS
			}
			if fmt.Sprint(d) != fmt.Sprint(want) {
				t.Errorf("details %v, want %v", d, want)
			}
			if got := errdefs.RetryAfterHeader(err); got != tc.retryHeader {
				t.Errorf("Retry-After %q, want %q", got, tc.retryHeader)
			}
			if msg := errdefs.PublicMessage(err); !strings.Contains(msg, tc.message) {
				t.Errorf("message %q, want it to say %q", msg, tc.message)
			}
		})
	}
	// The wait it was told is enough.
	if err := svc.allowCreate(p, 1, t0.Add(500*time.Millisecond)); err != nil {
		t.Errorf("a create after the wait: %v", err)
	}
}

func TestAuditMiddleware(t *testing.T) {
	svc, st := newService(t, store.Quotas{})
	a := NewAudit(st, time.Hour, nil)
	h := svc.Authenticate(a.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":"new1"}`))
	})), "send a key", func(w http.ResponseWriter, r *http.Request, err error) { w.WriteHeader(http.StatusUnauthorized) })
	mux := http.NewServeMux()
	mux.Handle("POST /v1/things/{id}", h)
	mux.Handle("GET /v1/things/{id}", h)
	for _, m := range []string{http.MethodPost, http.MethodGet} {
		req := httptest.NewRequest(m, "/v1/things/t1", nil)
		req.Header.Set("Authorization", "Bearer admin-key")
		req.RemoteAddr = "192.0.2.7:1234"
		mux.ServeHTTP(httptest.NewRecorder(), req)
	}
	req := httptest.NewRequest(http.MethodPost, "/v1/things/t2", nil)
	mux.ServeHTTP(httptest.NewRecorder(), req) // no key: refused, not audited
	got, err := a.Query(context.Background(), time.Now().Add(-time.Minute), time.Now().Add(time.Minute), "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("entries %+v, want the one POST", got)
	}
	e := got[0]
	if e.Tenant != Default || e.Key != AdminKeyID || e.Route != "POST /v1/things/{id}" || e.Object != "t1" || e.Created != "new1" || e.Status != 201 || e.Remote != "192.0.2.7" {
		t.Fatalf("entry %+v", e)
	}
	if got, _ := a.Query(context.Background(), time.Now().Add(-time.Minute), time.Now().Add(time.Minute), "acme", 10); len(got) != 0 {
		t.Fatalf("acme's entries: %+v", got)
	}
	if n, err := st.PruneAudit(context.Background(), time.Now().Add(time.Minute)); err != nil || n != 1 {
		t.Fatalf("prune: %d, %v", n, err)
	}
}

// TestReload: two nodes on one catalog. A key issued on one works on the
// other once it reloads; a key revoked on one stops working on the other,
// its open request cancelled with the revocation as the cause.
func TestReload(t *testing.T) {
	ctx := context.Background()
	a, st := newService(t, store.Quotas{})
	b, err := New(ctx, st, "admin-key", store.Quotas{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateTenant(ctx, "acme", "", store.Quotas{Sandboxes: 3}); err != nil {
		t.Fatal(err)
	}
	secret, k, err := a.IssueKey(ctx, "acme", "ci")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Principal(secret); err == nil {
		t.Fatal("node b knew the key before reloading: this test proves nothing")
	}
	if err := b.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := b.Principal(secret)
	if err != nil || p.Tenant != "acme" || b.Quotas("acme").Sandboxes != 3 {
		t.Fatalf("after reload: %+v, %v, quotas %+v", p, err, b.Quotas("acme"))
	}
	held, release := b.Hold(ctx, p)
	defer release()
	if _, err := a.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if held.Err() != nil {
		t.Fatal("node b cancelled before it reloaded")
	}
	if err := b.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(held), ErrRevoked) {
		t.Errorf("open request on node b: cause %v, want the revocation", context.Cause(held))
	}
	if _, err := b.Principal(secret); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("revoked key on node b: %v", err)
	}
}

// TestHoldAfterRevocation: a request whose key was checked just before
// the key was revoked gets a context already ended by the revocation.
func TestHoldAfterRevocation(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, store.Quotas{})
	if _, err := s.CreateTenant(ctx, "acme", "", store.Quotas{}); err != nil {
		t.Fatal(err)
	}
	secret, k, err := s.IssueKey(ctx, "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Principal(secret) // checked...
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokeKey(ctx, k.ID); err != nil { // ...revoked...
		t.Fatal(err)
	}
	held, release := s.Hold(ctx, p) // ...then held
	defer release()
	if !errors.Is(context.Cause(held), ErrRevoked) {
		t.Fatalf("a request held after its key's revocation: cause %v, want the revocation", context.Cause(held))
	}
}

// collidingStore answers the first key create with "the id is taken".
type collidingStore struct {
	Store
	collisions int
}

func (c *collidingStore) CreateAPIKey(ctx context.Context, k *store.APIKey) error {
	if c.collisions > 0 {
		c.collisions--
		return errdefs.New(errdefs.ErrAlreadyExists, "key id %q is taken", k.ID)
	}
	return c.Store.CreateAPIKey(ctx, k)
}

// TestIssueKeyCollision: an id drawn before is never replaced: IssueKey
// draws another key, and gives up after a few.
func TestIssueKeyCollision(t *testing.T) {
	ctx := context.Background()
	_, st := newService(t, store.Quotas{})
	cs := &collidingStore{Store: st, collisions: 2}
	svc, err := New(ctx, cs, "admin-key", store.Quotas{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	key, k, err := svc.IssueKey(ctx, Default, "")
	if err != nil || cs.collisions != 0 {
		t.Fatalf("issue after two collisions: %+v, %v (%d collisions left)", k, err, cs.collisions)
	}
	if p, err := svc.Principal(key); err != nil || p.Key != k.ID {
		t.Fatalf("the key issued: %+v, %v", p, err)
	}
	cs.collisions = 100
	if _, _, err := svc.IssueKey(ctx, Default, ""); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("issue when every id is taken: %v", err)
	}
}

// TestAuditQuerySameTime: more entries than a page share one time (a
// burst of calls, or a clock that moves coarsely); a query reads every
// one of them once.
func TestAuditQuerySameTime(t *testing.T) {
	_, st := newService(t, store.Quotas{})
	a := NewAudit(st, time.Hour, nil)
	at := time.Now().UTC()
	var entries []store.AuditEntry
	for i := range 2500 {
		tn := "acme"
		if i%5 == 0 {
			tn = "other"
		}
		entries = append(entries, store.AuditEntry{Time: at, Tenant: tn, Route: fmt.Sprint(i), Status: 200})
	}
	if err := st.AppendAudit(context.Background(), entries); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tenant string
		want   int
	}{{"", 2500}, {"acme", 2000}, {"other", 500}} {
		got, err := a.Query(context.Background(), at.Add(-time.Second), at.Add(time.Second), tc.tenant, 10000)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, e := range got {
			seen[e.Route] = true
		}
		if len(got) != tc.want || len(seen) != tc.want {
			t.Errorf("tenant %q: %d entries (%d distinct), want %d", tc.tenant, len(got), len(seen), tc.want)
		}
	}
}

// TestAuditPublic: a public route's calls are audited as whom its handler
// says it runs as, or as anonymous when it refused before it knew.
func TestAuditPublic(t *testing.T) {
	_, st := newService(t, store.Quotas{})
	a := NewAudit(st, time.Hour, nil)
	mux := http.NewServeMux()
	mux.Handle("PUT /content/{id}", a.Public(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer vol-token" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		RunsAs(r.Context(), Principal{Tenant: "acme", Key: "volume-token"})
		w.WriteHeader(http.StatusNoContent)
	})))
	for _, tok := range []string{"vol-token", "wrong"} {
		req := httptest.NewRequest(http.MethodPut, "/content/v1", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		mux.ServeHTTP(httptest.NewRecorder(), req)
	}
	got, err := a.Query(context.Background(), time.Now().Add(-time.Minute), time.Now().Add(time.Minute), "", 10)
	if err != nil || len(got) != 2 {
		t.Fatalf("entries %+v, %v; want 2", got, err)
	}
	if e := got[0]; e.Tenant != "acme" || e.Key != "volume-token" || e.Route != "PUT /content/{id}" || e.Object != "v1" || e.Status != 204 {
		t.Errorf("the token's call: %+v", e)
	}
	if e := got[1]; e.Tenant != "" || e.Key != Anonymous || e.Status != 401 {
		t.Errorf("the refused call: %+v", e)
	}
	// RunsAs outside a public route does nothing.
	RunsAs(context.Background(), Admin)
}

// TestAdmitTemplate: a tenant at its templates quota may build its own
// templates again but not a new one; at its template_mb quota it may
// build nothing; the admin is not bound; Usage counts the templates.
func TestAdmitTemplate(t *testing.T) {
	ctx := context.Background()
	svc, st := newService(t, store.Quotas{})
	if _, err := svc.CreateTenant(ctx, "acme", "", store.Quotas{Templates: 1, TemplateMB: 100}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	put := func(name, tn string, bytes int64) {
		t.Helper()
		b := &store.Build{ID: "b-" + name, Tenant: tn, Template: name, State: store.BuildReady, CreatedAt: now, Result: &store.BuildImage{Image: "img-" + name, Bytes: bytes}}
		tpl := &store.Template{Name: name, Tenant: tn, Tags: map[string]store.TemplateTag{"default": {Build: b.ID, At: now}}, CreatedAt: now}
		if err := st.PutBuild(ctx, b, tpl); err != nil {
			t.Fatal(err)
		}
	}
	put("acme-one", "acme", 40<<20)
	put("platform", "", 500<<20) // the default tenant's: not acme's
	svc.SetSandboxUsage(func(ctx context.Context, t string) (Usage, error) { return Usage{Sandboxes: 2}, nil })
	acme := NewContext(ctx, Principal{Tenant: "acme", Key: "k"})
	if u, err := svc.Usage(ctx, "acme"); err != nil || u != (Usage{Sandboxes: 2, Templates: 1, TemplateMB: 40}) {
		t.Fatalf("usage of acme: %+v, %v", u, err)
	}
	ran := 0
	create := func() error { ran++; return nil }
	err := svc.AdmitTemplate(acme, "acme-two", create)
	if d, _ := errdefs.Details(err).(map[string]any); !errors.Is(err, errdefs.ErrQuotaExceeded) || d["quota"] != "templates" || d["limit"] != 1 || d["used"] != 1 {
		t.Fatalf("a second template at templates=1: %v %v", err, d)
	}
	if err := svc.AdmitTemplate(acme, "acme-one", create); err != nil {
		t.Fatalf("a build of acme's own template: %v", err)
	}
	if err := svc.AdmitTemplate(NewContext(ctx, Admin), "admin-new", create); err != nil {
		t.Fatalf("the admin: %v", err)
	}
	put("acme-one", "acme", 100<<20) // now at template_mb
	err = svc.AdmitTemplate(acme, "acme-one", create)
	if d, _ := errdefs.Details(err).(map[string]any); !errors.Is(err, errdefs.ErrQuotaExceeded) || d["quota"] != "template_mb" || d["used"] != 100 {
		t.Fatalf("a build at template_mb: %v %v", err, d)
	}
	if ran != 2 {
		t.Fatalf("create ran %d times, want 2 (the refused ones never)", ran)
	}
	// With the template service's count (layers shared by builds once),
	// that is what template_mb holds, not the builds' sum.
	svc.SetTemplateBytes(func(_ context.Context, tn string) (int64, error) {
		if tn != "acme" {
			t.Errorf("template bytes asked for %q", tn)
		}
		return 30 << 20, nil
	})
	if u, err := svc.Usage(ctx, "acme"); err != nil || u.TemplateMB != 30 {
		t.Fatalf("usage with the template service's bytes: %+v, %v; want 30 MiB", u, err)
	}
	if err := svc.AdmitTemplate(acme, "acme-one", create); err != nil {
		t.Fatalf("a build under template_mb by the shared count: %v", err)
	}
}
