package httpapi

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// sampledSandboxes has no changes but a reset, and follows samples the
// test hands it: one now, then those sent on next.
type sampledSandboxes struct {
	recordingSandboxes
	now      []sandbox.SandboxSample
	next     chan sandbox.SandboxSample
	followed atomic.Bool
}

func (f *sampledSandboxes) ChangesNow() (uint64, error) { return 7, nil }

func (f *sampledSandboxes) Changes(ctx context.Context, seq uint64) ([]sandbox.Change, uint64, bool, error) {
	<-ctx.Done()
	return nil, seq, false, ctx.Err()
}

func (f *sampledSandboxes) FollowMetrics() ([]sandbox.SandboxSample, <-chan sandbox.SandboxSample, func()) {
	f.followed.Store(true)
	return f.now, f.next, func() {}
}

// TestEventsWithMetrics: GET /v1/events?metrics=true sends the reset
// first, then `metrics` events of the sandboxes the key's tenant owns
// (the newest samples, then new ones; another tenant's never), and none
// without ?metrics; a metrics value that is not a boolean is a 400.
func TestEventsWithMetrics(t *testing.T) {
	tenants := testTenants(t, "admin-key")
	ctx := context.Background()
	if _, err := tenants.CreateTenant(ctx, "alpha", "", store.Quotas{}); err != nil {
		t.Fatal(err)
	}
	alphaKey, _, err := tenants.IssueKey(ctx, "alpha", "")
	if err != nil {
		t.Fatal(err)
	}
	sample := func(id, tenant string, pct float64) sandbox.SandboxSample {
		return sandbox.SandboxSample{Sandbox: id, Tenant: tenant, MetricSample: sandbox.MetricSample{Time: time.Now().UTC(), CPUCount: 1, CPUUsedPct: pct, MemUsed: 1 << 20}}
	}

	for _, tc := range []struct {
		name, key, query string
		status           int
		// events is how many to read: the reset and the samples the
		// key may see, in the order they were taken.
		events        int
		want, notWant []string
	}{
		{name: "tenant", key: alphaKey, query: "?metrics=true", status: 200, events: 3,
			want:    []string{`"id":"alphaold"`, `"cpu_used_pct":42,"disk_total":0,"disk_used":0,"id":"alphanew"`},
			notWant: []string{"betaold", "betanew"}},
		{name: "admin", key: "admin-key", query: "?metrics=1", status: 200, events: 5,
			want: []string{`"id":"alphaold"`, `"id":"betaold"`, `"id":"alphanew"`, `"id":"betanew"`}},
		{name: "without metrics", key: alphaKey, query: "", status: 200, events: 1},
		{name: "not a boolean", key: alphaKey, query: "?metrics=yes", status: 400, want: []string{`metrics \"yes\" is neither true nor false`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &sampledSandboxes{
				now:  []sandbox.SandboxSample{sample("alphaold", "alpha", 1), sample("betaold", "beta", 2)},
				next: make(chan sandbox.SandboxSample, 4),
			}
			fake.next <- sample("betanew", "beta", 3)
			fake.next <- sample("alphanew", "alpha", 42)
			srv := httptest.NewServer(New(Options{Sandboxes: fake, Changes: fake, Telemetry: fake, Tenants: tenants, Metrics: http.NotFoundHandler()}))
			defer srv.Close()
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(rctx, "GET", srv.URL+"/v1/events"+tc.query, nil)
			req.Header.Set("Authorization", "Bearer "+tc.key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			var got strings.Builder
			if tc.status != 200 {
				io.Copy(&got, resp.Body)
			}
			rd := bufio.NewReader(resp.Body)
			for events := 0; events < tc.events; {
				line, err := rd.ReadString('\n')
				got.WriteString(line)
				if err != nil {
					t.Fatalf("after %d events: %v\n%s", events, err, got.String())
				}
				if line == "\n" {
					events++
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(got.String(), w) {
					t.Errorf("stream lacks %q:\n%s", w, got.String())
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(got.String(), w) {
					t.Errorf("stream has %q:\n%s", w, got.String())
				}
			}
			if tc.status == 200 && !strings.HasPrefix(got.String(), "id: 7\nevent: reset") {
				t.Errorf("the first event is not the reset:\n%s", got.String())
			}
			if followed := fake.followed.Load(); followed != (tc.query != "" && tc.status == 200) {
				t.Errorf("samples followed: %v", followed)
			}
		})
	}
}

// followedLogs has one line now, and the lines the test sends on next.
type followedLogs struct {
	recordingSandboxes
	next chan sandbox.LogEntry
	q    sandbox.LogQuery
}

func (f *followedLogs) FollowLogs(_ context.Context, _ string, q sandbox.LogQuery) ([]sandbox.LogEntry, <-chan sandbox.LogEntry, func(), error) {
	f.q = q
	return []sandbox.LogEntry{{Level: "info", Message: "was there"}}, f.next, func() {}, nil
}

// TestFollowLogs: GET /v1/sandboxes/{id}/logs?follow=true is an SSE stream
// of `log` events, the lines there first, then each new line the query
// selects (a debug line is left out at level=info), and it ends when the
// log's channel closes (the sandbox is gone).
func TestFollowLogs(t *testing.T) {
	fake := &followedLogs{next: make(chan sandbox.LogEntry, 4)}
	fake.next <- sandbox.LogEntry{Level: "debug", Message: "too quiet"}
	fake.next <- sandbox.LogEntry{Level: "warn", Message: "came later", Fields: map[string]string{"source": "agent"}}
	close(fake.next)
	srv := httptest.NewServer(New(Options{Sandboxes: fake, Telemetry: fake, Tenants: testTenants(t, "k"), Metrics: http.NotFoundHandler()}))
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+"/v1/sandboxes/sb1/logs?follow=true&level=info&limit=5", nil)
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body) // the stream ends with the channel
	if err != nil || resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %s %v", resp.StatusCode, resp.Header.Get("Content-Type"), err)
	}
	got := string(body)
	if strings.Count(got, "event: log\n") != 2 || !strings.Contains(got, `"message":"was there"`) || !strings.Contains(got, `{"fields":{"source":"agent"},"level":"warn","message":"came later"`) ||
		strings.Index(got, "was there") > strings.Index(got, "came later") {
		t.Errorf("stream:\n%s\nwant the line there, then the warn line", got)
	}
	if strings.Contains(got, "too quiet") {
		t.Errorf("the debug line was sent at level=info:\n%s", got)
	}
	if fake.q.Level != "info" || fake.q.Limit != 5 {
		t.Errorf("the service was asked %+v", fake.q)
	}
}
