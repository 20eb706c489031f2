package e2b_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// hookReceiver is a webhook receiver on loopback (which the test's spaced
// is told to allow, SPACE_WEBHOOK_ALLOW=127.0.0.1/32): it checks every
// delivery's signature as E2B's docs tell a receiver to, and answers 503
// while down.
type hookReceiver struct {
	secret string
	srv    *http.Server
	addr   string

	mu   sync.Mutex
	down bool
	got  []hookEvent
	bad  []string
}

type hookEvent struct {
	ID        string         `json:"id"`
	Type      string         `json:"type"`
	SandboxID string         `json:"sandboxId"`
	TeamID    string         `json:"sandboxTeamId"`
	Template  string         `json:"sandboxTemplateId"`
	Version   string         `json:"version"`
	EventData map[string]any `json:"eventData"`
}

func newHookReceiver(t *testing.T, secret string) *hookReceiver {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &hookReceiver{secret: secret, addr: ln.Addr().String()}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve)}
	go r.srv.Serve(ln)
	t.Cleanup(func() { r.srv.Close() })
	return r
}

func (r *hookReceiver) url() string { return "http://" + r.addr + "/hook" }

func (r *hookReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	sum := sha256.Sum256(append([]byte(r.secret), body...))
	want := strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
	if req.Header.Get("e2b-signature") != want || req.Header.Get("e2b-signature-version") != "v1" ||
		req.Header.Get("e2b-webhook-id") == "" || req.Header.Get("e2b-delivery-id") == "" {
		r.bad = append(r.bad, fmt.Sprintf("headers %v body %.200s", req.Header, body))
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var ev hookEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		r.bad = append(r.bad, string(body))
	}
	r.got = append(r.got, ev)
}

func (r *hookReceiver) setDown(v bool) { r.mu.Lock(); r.down = v; r.mu.Unlock() }

// of returns the types of the events of sandbox id, in arrival order.
func (r *hookReceiver) of(id string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.got {
		if e.SandboxID == id {
			out = append(out, e.Type)
		}
	}
	return out
}

func (r *hookReceiver) all() []hookEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hookEvent(nil), r.got...)
}

// e2bCall makes one E2B control-plane call with key.
func e2bCall(t *testing.T, d *harness.Daemon, key, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+d.Addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func e2bMust(t *testing.T, d *harness.Daemon, key, method, path, body string, want int) []byte {
	t.Helper()
	st, b := e2bCall(t, d, key, method, path, body)
	if st != want {
		t.Fatalf("%s %s: %d %.400s, want %d", method, path, st, b, want)
	}
	return b
}

// sandboxLife creates a sandbox through E2B's API, changes its timeout,
// pauses, resumes (connect) and kills it: every lifecycle event once.
func sandboxLife(t *testing.T, d *harness.Daemon, key string) string {
	t.Helper()
	var sbx struct{ SandboxID string }
	json.Unmarshal(e2bMust(t, d, key, "POST", "/v2/sandboxes", `{"templateID":"base","timeout":300,"metadata":{"who":"webhooks"}}`, 201), &sbx)
	e2bMust(t, d, key, "POST", "/sandboxes/"+sbx.SandboxID+"/timeout", `{"timeout":600}`, 204)
	e2bMust(t, d, key, "POST", "/sandboxes/"+sbx.SandboxID+"/pause", "", 204)
	st, b := e2bCall(t, d, key, "POST", "/v2/sandboxes/"+sbx.SandboxID+"/connect", `{"timeout":300}`)
	if st != 200 && st != 201 {
		t.Fatalf("connect (resume): %d %.300s", st, b)
	}
	e2bMust(t, d, key, "DELETE", "/sandboxes/"+sbx.SandboxID, "", 204)
	return sbx.SandboxID
}

var lifeEvents = []string{"sandbox.lifecycle.created", "sandbox.lifecycle.updated", "sandbox.lifecycle.paused",
	"sandbox.lifecycle.resumed", "sandbox.lifecycle.killed"}

// waitEvents waits until sandbox id's events are lifeEvents (the test's
// deadline bounds the wait), and fails if they are not exactly that.
func waitEvents(t *testing.T, r *hookReceiver, id string) {
	t.Helper()
	harness.WaitFor(3*time.Minute, func() bool { return len(r.of(id)) >= len(lifeEvents) })
	if got := r.of(id); strings.Join(got, " ") != strings.Join(lifeEvents, " ") {
		t.Fatalf("sandbox %s: events %v, want %v (each once, in order)", id, got, lifeEvents)
	}
}

// TestWebhooks: E2B's /events/webhooks against a real spaced and real
// sandboxes. Each lifecycle event reaches the tenant's receiver once, in
// order, signed; a receiver that is down gets them when it is back, a
// restart of spaced in between included; another tenant's receiver gets
// none of them; a floor address is refused at registration.
func TestWebhooks(t *testing.T) {
	harness.Need(t)
	d := harness.Own(t, harness.Options{Name: "webhooks", CIDR: "10.242.16.0/20", Pool: "base=1:2",
		Env: []string{"SPACE_WEBHOOK_ALLOW=127.0.0.1/32", "SPACE_WEBHOOK_RETRY_MAX=1s"}})
	ctx := harness.Ctx(t, 10*time.Minute)
	keys := map[string]string{}
	for _, tn := range []string{"hooks-a", "hooks-b"} {
		if _, err := d.Client.CreateTenant(ctx, tn, "", client.Quotas{}); err != nil {
			t.Fatal(err)
		}
		k, err := d.Client.IssueKey(ctx, tn, "webhooks")
		if err != nil {
			t.Fatal(err)
		}
		keys[tn] = k.Key
	}
	ra, rb := newHookReceiver(t, "secret-a"), newHookReceiver(t, "secret-b")

	// Refused: floor addresses (a loopback address the operator did not
	// allow, the metadata address, a private one), a bad event type, no
	// secret. Nothing is registered.
	for _, body := range []string{
		`{"name":"x","url":"http://127.0.0.2:9/hook","events":["sandbox.lifecycle.created"],"signatureSecret":"s"}`,
		`{"name":"x","url":"http://169.254.169.254/latest","signatureSecret":"s"}`,
		`{"name":"x","url":"http://10.242.16.2:8080/","signatureSecret":"s"}`,
		fmt.Sprintf(`{"name":"x","url":%q,"events":["sandbox.lifecycle.nope"],"signatureSecret":"s"}`, ra.url()),
		fmt.Sprintf(`{"name":"x","url":%q}`, ra.url()),
	} {
		st, b := e2bCall(t, d, keys["hooks-a"], "POST", "/events/webhooks", body)
		if st != 400 || !bytes.Contains(b, []byte(`"message"`)) {
			t.Errorf("register %s: %d %s, want 400 naming the problem", body, st, b)
		}
	}
	if b := e2bMust(t, d, keys["hooks-a"], "GET", "/events/webhooks", "", 200); string(bytes.TrimSpace(b)) != "[]" {
		t.Fatalf("refused registrations left webhooks: %s", b)
	}

	// Registered as E2B's docs show; the positive control of the floor
	// refusals is this allowed address.
	var hookA struct {
		ID, TeamID, URL string
		Events          []string
		Enabled         bool
	}
	json.Unmarshal(e2bMust(t, d, keys["hooks-a"], "POST", "/events/webhooks", fmt.Sprintf(
		`{"name":"a","url":%q,"enabled":true,"events":["sandbox.lifecycle.created","sandbox.lifecycle.updated","sandbox.lifecycle.killed","sandbox.lifecycle.paused","sandbox.lifecycle.resumed"],"signatureSecret":"secret-a"}`,
		ra.url()), 201), &hookA)
	if hookA.ID == "" || !hookA.Enabled || hookA.URL != ra.url() || len(hookA.Events) != 5 {
		t.Fatalf("registered webhook: %+v", hookA)
	}
	e2bMust(t, d, keys["hooks-b"], "POST", "/events/webhooks", fmt.Sprintf(`{"name":"b","url":%q,"signatureSecret":"secret-b"}`, rb.url()), 201)
	// Tenant b neither sees nor changes a's webhook.
	e2bMust(t, d, keys["hooks-b"], "GET", "/events/webhooks/"+hookA.ID, "", 404)
	e2bMust(t, d, keys["hooks-b"], "PATCH", "/events/webhooks/"+hookA.ID, `{"enabled":false}`, 404)
	e2bMust(t, d, keys["hooks-b"], "DELETE", "/events/webhooks/"+hookA.ID, "", 404)
	// An update to a floor address is refused and changes nothing.
	e2bMust(t, d, keys["hooks-a"], "PATCH", "/events/webhooks/"+hookA.ID, `{"url":"http://127.0.0.2:1/"}`, 400)
	if b := e2bMust(t, d, keys["hooks-a"], "GET", "/events/webhooks/"+hookA.ID, "", 200); !bytes.Contains(b, []byte(ra.url())) {
		t.Fatalf("a refused update changed the webhook: %s", b)
	}

	idA := sandboxLife(t, d, keys["hooks-a"])
	waitEvents(t, ra, idA)
	for _, e := range ra.all() {
		if e.TeamID != "hooks-a" || e.Version != "v2" || e.Template != "base" || e.ID == "" {
			t.Errorf("event %+v: want team hooks-a, version v2, template base, an id", e)
		}
		if md, _ := e.EventData["sandbox_metadata"].(map[string]any); md["who"] != "webhooks" {
			t.Errorf("event %s: eventData %v lacks the sandbox's metadata", e.Type, e.EventData)
		}
	}

	// Down: the events wait in the queue, across a restart of spaced.
	ra.setDown(true)
	idA2 := sandboxLife(t, d, keys["hooks-a"])
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	ra.setDown(false)
	waitEvents(t, ra, idA2)
	if log, err := os.ReadFile(d.LogPath); err != nil || !bytes.Contains(log, []byte("deliveries left by the previous run")) {
		t.Errorf("the restarted spaced did not say it found queued deliveries (%v)", err)
	}

	// Tenant b's sandbox reaches b's receiver only; b's receiver got
	// nothing of a's.
	idB := sandboxLife(t, d, keys["hooks-b"])
	waitEvents(t, rb, idB)
	if got := ra.of(idB); len(got) != 0 {
		t.Errorf("tenant a's receiver got tenant b's events: %v", got)
	}
	for _, id := range []string{idA, idA2} {
		if got := rb.of(id); len(got) != 0 {
			t.Errorf("tenant b's receiver got tenant a's events: %v", got)
		}
	}
	if len(ra.bad)+len(rb.bad) > 0 {
		t.Errorf("deliveries whose signature did not verify: %v %v", ra.bad, rb.bad)
	}
	// Deleted: no more deliveries to it.
	e2bMust(t, d, keys["hooks-a"], "DELETE", "/events/webhooks/"+hookA.ID, "", 200)
	e2bMust(t, d, keys["hooks-a"], "GET", "/events/webhooks/"+hookA.ID, "", 404)
}
