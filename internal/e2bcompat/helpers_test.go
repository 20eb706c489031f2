package e2bcompat

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
)

// TestMain keeps the layer's logs out of test output.
func TestMain(m *testing.M) {
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	os.Exit(m.Run())
}

const testKey = "e2b_0123456789abcdef0123456789abcdef01234567"

// harness is an E2B server over a fake sandbox service whose every
// sandbox address dials one fake agent (or user service).
type harness struct {
	t     *testing.T
	fake  *fakeSandboxes
	tel   *fakeTelemetry
	srv   *httptest.Server
	agent *httptest.Server

	mu      sync.Mutex
	dials   []string    // sandbox addresses dialled, in order
	release chan string // /stream waits for this before its second chunk
}

// seen is what the fake upstream reports back about a request.
type seen struct {
	Path, Query, Host, Token, SandboxID, Port, Traffic string
}

// newHarness serves the E2B layer over fakes; opts change its Options.
func newHarness(t *testing.T, opts ...func(*Options)) *harness {
	h := &harness{t: t, fake: newFakeSandboxes(), release: make(chan string, 1)}
	h.tel = &fakeTelemetry{sbs: h.fake}
	h.agent = httptest.NewServer(http.HandlerFunc(h.upstream))
	t.Cleanup(h.agent.Close)
	upstream := h.agent.Listener.Addr().String()
	native := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "native "+r.URL.Path)
	})
	o := Options{
		Sandboxes: h.fake, Checkpoints: h.fake, Snapshots: h.fake, Targets: h.fake, Telemetry: h.tel, Tenants: testTenants(t, testKey), Next: native,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			h.mu.Lock()
			h.dials = append(h.dials, addr)
			h.mu.Unlock()
			return (&net.Dialer{}).DialContext(ctx, network, upstream)
		},
	}
	for _, f := range opts {
		f(&o)
	}
	s := New(o)
	h.srv = httptest.NewServer(s)
	t.Cleanup(h.srv.Close)
	return h
}

func (h *harness) upstream(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/early":
		// Answers before it has read the request's body (full duplex:
		// net/http would otherwise wait for the body's end first), as a
		// user's server in a sandbox may.
		http.NewResponseController(w).EnableFullDuplex()
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "early")
		http.NewResponseController(w).Flush()
		return
	case "/cut", "/cut-mid-envelope", "/cut-large":
		// A stream whose sandbox goes away: one whole envelope, maybe the
		// start of another, then the connection drops.
		w.Header().Set("Content-Type", "application/connect+json")
		w.WriteHeader(200)
		w.Write(envelope(0, `{"event":{"start":{"pid":7}}}`))
		switch r.URL.Path {
		case "/cut-mid-envelope":
			w.Write(envelope(0, `{"event":{}}`)[:8])
		case "/cut-large":
			w.Write([]byte{0, 0, 0x30, 0, 0})
			w.Write(bytes.Repeat([]byte("x"), 100))
		}
		w.(http.Flusher).Flush()
		conn, _, _ := http.NewResponseController(w).Hijack()
		conn.Close()
	case "/health":
		if r.URL.Query().Has("stuck") { // a live agent that never answers
			<-r.Context().Done()
			return
		}
		writeJSON(w, 200, seen{Path: r.URL.Path, Host: r.Host})
	case "/stream":
		w.Header().Set("Content-Type", "application/connect+json")
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		io.WriteString(w, <-h.release)
	default:
		io.Copy(io.Discard, r.Body)
		writeJSON(w, 200, seen{
			Path: r.URL.Path, Query: r.URL.RawQuery, Host: r.Host, Token: r.Header.Get("X-Access-Token"),
			SandboxID: r.Header.Get(headerSandboxID), Port: r.Header.Get(headerSandboxPort),
			Traffic: r.Header.Get(headerTraffic),
		})
	}
}

// envelope is one Connect stream envelope.
func envelope(flags byte, body string) []byte {
	b := []byte{flags, 0, 0, 0, byte(len(body))}
	return append(b, body...)
}

func (h *harness) lastDial() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.dials) == 0 {
		return ""
	}
	return h.dials[len(h.dials)-1]
}

// do sends a request to the E2B server; hdr may set Host.
func (h *harness) do(method, path string, body any, hdr map[string]string) *http.Response {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, h.srv.URL+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// api sends a control-plane request with the API key.
func (h *harness) api(method, path string, body any) *http.Response {
	h.t.Helper()
	return h.do(method, path, body, map[string]string{"X-API-KEY": testKey})
}

// create makes a sandbox through POST /v2/sandboxes and returns its body.
func (h *harness) create(body map[string]any) sandboxJSON {
	h.t.Helper()
	if body == nil {
		body = map[string]any{"templateID": "base"}
	}
	resp := h.api("POST", "/v2/sandboxes", body)
	if resp.StatusCode != 201 {
		h.t.Fatalf("create: %d %s", resp.StatusCode, readAll(resp))
	}
	var sb sandboxJSON
	decode(h.t, resp, &sb)
	return sb
}

func decode(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("decode %s: %v", resp.Request.URL.Path, err)
	}
}

func readAll(resp *http.Response) string {
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// wantError checks E2B's error body: code equal to the status, a message.
func wantError(t *testing.T, resp *http.Response, status int) errorJSON {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("%s %s: status %d, want %d (%s)", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, status, readAll(resp))
	}
	var e errorJSON
	decode(t, resp, &e)
	if e.Code != status || e.Message == "" {
		t.Fatalf("%s %s: error body %+v, want code %d and a message", resp.Request.Method, resp.Request.URL.Path, e, status)
	}
	return e
}
