package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spacesandbox/space/internal/egress/dialer"
	"github.com/spacesandbox/space/internal/egress/secrets"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
	"github.com/spacesandbox/space/internal/webhook"
)

// receiver records what arrives and whether its signature verified; it
// answers 503 while down.
type receiver struct {
	t      *testing.T
	secret string
	mu     sync.Mutex
	down   bool
	got    []webhook.Payload
	bad    int
	srv    *httptest.Server
}

func newReceiver(t *testing.T, secret string) *receiver {
	r := &receiver{t: t, secret: secret}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.down {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if req.Header.Get("e2b-signature") != webhook.Sign(r.secret, body) || req.Header.Get("e2b-signature-version") != "v1" ||
			req.Header.Get("e2b-webhook-id") == "" || req.Header.Get("e2b-delivery-id") == "" {
			r.bad++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var p webhook.Payload
		if err := json.Unmarshal(body, &p); err != nil {
			r.bad++
		}
		r.got = append(r.got, p)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) setDown(down bool) { r.mu.Lock(); r.down = down; r.mu.Unlock() }

func (r *receiver) events() []webhook.Payload {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]webhook.Payload(nil), r.got...)
}

// waitFor waits (without a time bound of its own: the test's deadline is
// the bound) until n events arrived.
func (r *receiver) waitFor(n int) []webhook.Payload {
	r.t.Helper()
	for {
		if got := r.events(); len(got) >= n {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type env struct {
	st   *store.Bolt
	w    *store.Watched
	sec  *secrets.Store
	dial *dialer.Dialer
	svc  *webhook.Service
	stop context.CancelFunc
	path string
	dir  string
}

func open(t *testing.T, path, dir string) *env {
	t.Helper()
	b, err := store.OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Loopback is refused by the tenant dialer; the operator allows
	// 127.0.0.1 alone (SPACE_WEBHOOK_ALLOW), so 127.0.0.2 stays refused.
	d := dialer.New(dialer.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	e := &env{st: b, w: store.Watch(b), sec: sec, dial: d, path: path, dir: dir}
	e.svc = webhook.New(webhook.Config{RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond}, b, sec, d)
	ctx, cancel := context.WithCancel(context.Background())
	e.stop = func() { e.svc.Close(time.Minute); cancel(); b.Close() }
	if err := e.svc.Start(ctx, e.w); err != nil {
		t.Fatal(err)
	}
	return e
}

func as(t string) context.Context {
	return tenant.NewContext(context.Background(), tenant.Principal{Tenant: t, Key: "k"})
}

func ptr[T any](v T) *T { return &v }

// lifecycle writes the records a sandbox's life writes: create, run,
// timeout change, pause, resume, kill.
func lifecycle(t *testing.T, st store.Sandboxes, id, ten string) {
	t.Helper()
	ctx := context.Background()
	rec := &store.Sandbox{ID: id, Tenant: ten, Template: "base", State: store.StateCreating, CreatedAt: time.Now(),
		ExpiresAt: time.Now().Add(time.Minute), CPU: 1, MemoryMB: 512, Metadata: map[string]string{"k": "v"}}
	if err := st.CreateSandbox(ctx, rec, 100, nil); err != nil {
		t.Fatal(err)
	}
	step := func(f func(r *store.Sandbox)) {
		t.Helper()
		from := store.Was(rec)
		f(rec)
		if err := st.UpdateSandbox(ctx, rec, from); err != nil {
			t.Fatal(err)
		}
	}
	step(func(r *store.Sandbox) { r.State = store.StateRunning })
	step(func(r *store.Sandbox) { r.ExpiresAt = r.ExpiresAt.Add(time.Hour) })
	step(func(r *store.Sandbox) {
		r.State = store.StatePaused
		r.Checkpoint = &store.CheckpointRef{ID: "c1"}
	})
	from := store.Was(rec)
	rec.State = store.StateResuming
	if err := st.ReviveSandbox(ctx, rec, from, 100, nil); err != nil {
		t.Fatal(err)
	}
	step(func(r *store.Sandbox) { r.State = store.StateRunning })
	step(func(r *store.Sandbox) { r.State = store.StateKilled })
}

var wantTypes = []string{webhook.Created, webhook.Updated, webhook.Paused, webhook.Resumed, webhook.Killed}

func checkLife(t *testing.T, got []webhook.Payload, id, ten string) {
	t.Helper()
	var types []string
	for _, p := range got {
		if p.SandboxID != id {
			continue
		}
		types = append(types, p.Type)
		if p.SandboxTeamID != ten || p.Version != "v2" || p.SandboxTemplateID != "base" || p.ID == "" {
			t.Errorf("event %+v: want team %s, version v2, template base, an id", p, ten)
		}
		if md, _ := p.EventData["sandbox_metadata"].(map[string]any); md["k"] != "v" {
			t.Errorf("event %s: eventData %v lacks the sandbox's metadata", p.Type, p.EventData)
		}
	}
	if len(types) != len(wantTypes) {
		t.Fatalf("sandbox %s: events %v, want %v (each once, in order)", id, types, wantTypes)
	}
	for i := range types {
		if types[i] != wantTypes[i] {
			t.Fatalf("sandbox %s: events %v, want %v (each once, in order)", id, types, wantTypes)
		}
	}
}

func TestDeliveries(t *testing.T) {
	dir := t.TempDir()
	e := open(t, filepath.Join(dir, "state.db"), filepath.Join(dir, "sec"))
	defer func() { e.stop() }()
	r1 := newReceiver(t, "s3cret-one")
	r2 := newReceiver(t, "s3cret-two")

	// Registration: a floor address (another loopback address, not
	// allowed) is refused, and so is a bad URL or event; the allowed
	// receiver is accepted.
	for _, spec := range []webhook.Spec{
		{URL: ptr("http://127.0.0.2:9/x"), Secret: ptr("s")},
		{URL: ptr("http://10.0.0.1/x"), Secret: ptr("s")},
		{URL: ptr("http://[::1]:9/x"), Secret: ptr("s")},
		{URL: ptr("ftp://example.com/x"), Secret: ptr("s")},
		{URL: ptr(r1.srv.URL), Secret: ptr("s"), Events: &[]string{"sandbox.lifecycle.exploded"}},
		{URL: ptr(r1.srv.URL)},
	} {
		if _, err := e.svc.Register(as("t1"), spec); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("register %s: %v, want invalid argument", *spec.URL, err)
		}
	}
	if hooks, _ := e.svc.List(as("t1")); len(hooks) != 0 {
		t.Fatalf("refused registrations left %d webhooks", len(hooks))
	}
	h1, err := e.svc.Register(as("t1"), webhook.Spec{Name: ptr("one"), URL: ptr(r1.srv.URL), Secret: ptr("s3cret-one")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Register(as("t2"), webhook.Spec{URL: ptr(r2.srv.URL), Secret: ptr("s3cret-two")}); err != nil {
		t.Fatal(err)
	}
	// Tenants see their own webhooks only.
	if _, err := e.svc.Get(as("t2"), h1.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("t2 reads t1's webhook: %v", err)
	}
	if err := e.svc.Delete(as("t2"), h1.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("t2 deletes t1's webhook: %v", err)
	}

	lifecycle(t, e.w, "sbx1", "t1")
	lifecycle(t, e.w, "sbx2", "t2")
	checkLife(t, r1.waitFor(5), "sbx1", "t1")
	checkLife(t, r2.waitFor(5), "sbx2", "t2")

	// A receiver that is down gets the events when it comes back, in
	// order; also after a restart of the service in between (the queue is
	// in the catalog).
	r1.setDown(true)
	lifecycle(t, e.w, "sbx3", "t1")
	e.stop()
	e = open(t, e.path, e.dir)
	r1.setDown(false)
	got := r1.waitFor(10)
	checkLife(t, got[5:], "sbx3", "t1")
	time.Sleep(200 * time.Millisecond) // nothing more comes (no duplicates)
	if n := len(r1.events()); n != 10 {
		t.Fatalf("receiver 1 got %d events, want 10", n)
	}
	if len(r2.events()) != 5 || r1.bad+r2.bad != 0 {
		t.Fatalf("receiver 2 got %d events (want 5: no other tenant's); bad signatures %d", len(r2.events()), r1.bad+r2.bad)
	}

	// An update that aims the webhook at a floor address is refused and
	// changes nothing; a disabled webhook gets nothing.
	if _, err := e.svc.Update(as("t1"), h1.ID, webhook.Spec{URL: ptr("http://169.254.169.254/latest")}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("update to the metadata address: %v", err)
	}
	if h, _ := e.svc.Get(as("t1"), h1.ID); h.URL != r1.srv.URL {
		t.Fatalf("refused update changed the URL to %s", h.URL)
	}
	if _, err := e.svc.Update(as("t1"), h1.ID, webhook.Spec{Enabled: ptr(false)}); err != nil {
		t.Fatal(err)
	}
	lifecycle(t, e.w, "sbx4", "t1")
	lifecycle(t, e.w, "sbx5", "t2")
	r2.waitFor(10)
	if n := len(r1.events()); n != 10 {
		t.Fatalf("a disabled webhook got events: %d", n)
	}
}

func TestSign(t *testing.T) {
	// sha256("secret" + "body") = 3b8b...; base64 with the padding cut.
	got := webhook.Sign("secret", []byte("body"))
	if len(got) != 43 || got[len(got)-1] == '=' {
		t.Fatalf("Sign = %q: want 43 base64 characters without padding", got)
	}
}

// TestOverflow: a tenant's queue holds QueueLimit deliveries; what comes
// beyond is dropped and counted, and what was queued still arrives.
func TestOverflow(t *testing.T) {
	dir := t.TempDir()
	b, err := store.OpenBolt(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sec, err := secrets.Open(filepath.Join(dir, "sec"))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	d := dialer.New(dialer.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	logs := &lockedBuffer{}
	svc := webhook.New(webhook.Config{QueueLimit: 2, RetryMin: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond, Registry: reg,
		Logger: slog.New(slog.NewTextHandler(logs, nil))}, b, sec, d)
	w := store.Watch(b)
	if err := svc.Start(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	r := newReceiver(t, "s")
	r.setDown(true)
	if _, err := svc.Register(as("t1"), webhook.Spec{URL: ptr(r.srv.URL), Secret: ptr("s")}); err != nil {
		t.Fatal(err)
	}
	lifecycle(t, w, "sbx1", "t1")
	svc.Close(time.Minute) // every write's events are queued or dropped by now
	dropped, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range dropped {
		if mf.GetName() == "space_webhook_events_dropped_total" {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == "queue_full" {
					n = m.GetCounter().GetValue()
				}
			}
		}
	}
	if n != 3 {
		t.Fatalf("dropped (queue_full) = %v, want 3 of the 5 events", n)
	}
	if got := strings.Count(logs.String(), "queue is full"); got != 3 {
		t.Fatalf("%d log lines say the queue is full, want 3:\n%s", got, logs.String())
	}
	q, err := b.WebhookDeliveries(context.Background())
	if err != nil || len(q) != 2 || q[0].EventType != webhook.Created || q[1].EventType != webhook.Updated {
		t.Fatalf("queue = %d deliveries, %v; want created and updated", len(q), err)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }
