package sandbox

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

func TestPortTransport(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Host+" "+r.URL.Path)
	}))
	defer srv.Close()
	port, _ := strconv.Atoi(srv.URL[len("http://127.0.0.1:"):])

	var mu sync.Mutex
	var dials []string
	target := func(id string) (Target, error) {
		if id != "sb1" {
			return Target{}, errdefs.New(errdefs.ErrNotFound, "sandbox %q is killed", id)
		}
		return Target{ID: id, IP: netip.MustParseAddr("127.0.0.1")}, nil
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		dials = append(dials, addr)
		mu.Unlock()
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	hc := &http.Client{Transport: NewPortTransport(target, dial)}

	for _, tc := range []struct {
		name, url, want string
		err             error
	}{
		{"known sandbox", PortURL("sb1", port, "/health"), PortHost("sb1", port) + " /health", nil},
		{"unknown sandbox", PortURL("gone", port, "/health"), "", errdefs.ErrNotFound},
		{"not a sandbox host", srv.URL + "/x", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := hc.Get(tc.url)
			if tc.want == "" {
				if err == nil {
					resp.Body.Close()
					t.Fatal("want an error")
				}
				if tc.err != nil && !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want class %v", err, tc.err)
				}
				var ue *url.Error
				if !errors.As(err, &ue) {
					t.Fatalf("err = %T", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if string(b) != tc.want {
				t.Fatalf("got %q, want %q", b, tc.want)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dials) != 1 || dials[0] != "127.0.0.1:"+strconv.Itoa(port) {
		t.Fatalf("dials = %v", dials)
	}
}

// TestPortTransportFollowsInstances: connections belong to the sandbox
// instance they were made for. Ending it closes them at once (a stream
// open to it ends), and a new instance of the same sandbox (a resume) is
// dialled afresh, never reached over the old instance's pooled
// connections.
func TestPortTransportFollowsInstances(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			io.WriteString(w, "first\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	port, _ := strconv.Atoi(srv.URL[len("http://127.0.0.1:"):])

	var mu sync.Mutex
	current := newConnSet()
	dials := 0
	target := func(id string) (Target, error) {
		mu.Lock()
		defer mu.Unlock()
		if current == nil {
			return Target{}, errdefs.New(errdefs.ErrNotFound, "sandbox %q is paused", id)
		}
		return Target{ID: id, IP: netip.MustParseAddr("127.0.0.1"), conns: current}, nil
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		dials++
		mu.Unlock()
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	hc := &http.Client{Transport: NewPortTransport(target, dial)}
	get := func(path string) (string, error) {
		resp, err := hc.Get(PortURL("sb1", port, path))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	for range 3 {
		if got, err := get("/x"); err != nil || got != "ok" {
			t.Fatalf("get = %q, %v", got, err)
		}
	}
	first := current
	if dials != 1 || first.open() != 1 {
		t.Fatalf("dials = %d, open = %d: want one pooled connection", dials, first.open())
	}

	resp, err := hc.Get(PortURL("sb1", port, "/stream"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { _, err := io.ReadAll(resp.Body); ended <- err }()

	// The instance ends (pause): everything open to it is closed.
	mu.Lock()
	current = nil
	mu.Unlock()
	first.closeAll()
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("the stream ended cleanly; want an error")
		}
	case <-time.After(time.Second):
		t.Fatal("the stream to the ended instance is still open after 1 s")
	}
	if first.open() != 0 {
		t.Fatalf("%d connections still open to the ended instance", first.open())
	}
	if _, err := get("/x"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("request to a paused sandbox: %v, want NotFound", err)
	}

	// A resume: a new instance, dialled afresh.
	mu.Lock()
	current = newConnSet()
	mu.Unlock()
	if got, err := get("/x"); err != nil || got != "ok" {
		t.Fatalf("get after resume = %q, %v", got, err)
	}
	if dials != 2 || current.open() != 1 {
		t.Fatalf("dials = %d, open = %d: want a new connection to the new instance", dials, current.open())
	}
	// A connection made for an instance that ended in the meantime is refused.
	if _, err := first.add(nopConn{}); !errors.Is(err, errInstanceEnded) {
		t.Fatalf("add to an ended instance: %v", err)
	}
}

type nopConn struct{ net.Conn }

func (nopConn) Close() error { return nil }

// TestAgentTransportDeadlines: every request to an agent asks for stream
// keepalives and ends when its answer goes silent.
func TestAgentTransportDeadlines(t *testing.T) {
	defer func(d time.Duration) { agentReplyTimeout = d }(agentReplyTimeout)
	agentReplyTimeout = 200 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen", r.Header.Get(keepaliveHeader)+" "+r.Header.Get("X-Access-Token"))
		io.WriteString(w, "a")
		w.(http.Flusher).Flush()
		if r.URL.Path == "/slow" {
			time.Sleep(100 * time.Millisecond)
			io.WriteString(w, "b")
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	}))
	defer srv.Close()
	tok := "tok"
	var p atomic.Pointer[string]
	p.Store(&tok)
	hc := &http.Client{Transport: agentTransport{token: &p, next: http.DefaultTransport}}

	resp, err := hc.Get(srv.URL + "/slow")
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get("X-Seen"); got != strconv.Itoa(agentKeepalive)+" tok" {
		t.Fatalf("agent saw %q", got)
	}
	start := time.Now()
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ab" || !errors.Is(err, ErrSilent) {
		t.Fatalf("read %q, %v; want ab and the agent silent", b, err)
	}
	// A slow reader is not the agent's silence.
	resp, err = hc.Get(srv.URL + "/slow")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * agentReplyTimeout)
	b = make([]byte, 2)
	if _, err := io.ReadFull(resp.Body, b); err != nil || string(b) != "ab" {
		t.Fatalf("slow reader: %q, %v", b, err)
	}
	resp.Body.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %s", d)
	}
}

// TestPortTransportDeadlines: requests to the agent's port and to the
// ports named own are bounded as spaced's own requests to an agent are: a
// stuck server's answer must start in time (a /health's must come whole
// sooner), a stream with keepalives lasts while one that goes silent is
// ended, and streams are asked for keepalives often enough. A user's port
// owes no keepalives and may take its time.
func TestPortTransportDeadlines(t *testing.T) {
	defer func(d, h time.Duration) { agentReplyTimeout, agentHealthTimeout = d, h }(agentReplyTimeout, agentHealthTimeout)
	agentReplyTimeout, agentHealthTimeout = time.Second, 100*time.Millisecond
	stuck := make(chan struct{})
	defer close(stuck)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Keepalive", r.Header.Get(keepaliveHeader))
		switch r.URL.Path {
		case "/stuck", "/health": // a live server that never answers
			select {
			case <-stuck:
			case <-r.Context().Done():
			}
			return
		case "/late": // answers after two reply timeouts
			time.Sleep(2 * agentReplyTimeout)
		case "/keepalives": // a quiet stream with keepalives, then its end
			for range 5 {
				io.WriteString(w, ".")
				w.(http.Flusher).Flush()
				time.Sleep(agentReplyTimeout / 2)
			}
		case "/silent": // a stream that stops
			io.WriteString(w, ".")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		io.WriteString(w, "end")
	})
	own, user := httptest.NewServer(handler), httptest.NewServer(handler)
	defer own.Close()
	defer user.Close()
	port := func(s *httptest.Server) int { p, _ := strconv.Atoi(s.URL[len("http://127.0.0.1:"):]); return p }
	instance := newConnSet()
	defer instance.closeAll()
	target := func(id string) (Target, error) {
		return Target{ID: id, IP: netip.MustParseAddr("127.0.0.1"), conns: instance}, nil
	}
	hc := &http.Client{Transport: NewPortTransport(target, nil, port(own))}
	get := func(s *httptest.Server, path string, hdr ...string) (string, http.Header, error) {
		req, _ := http.NewRequest(http.MethodGet, PortURL("sb1", port(s), path), nil)
		if len(hdr) == 1 {
			req.Header.Set(keepaliveHeader, hdr[0])
		}
		resp, err := hc.Do(req)
		if err != nil {
			return "", nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), resp.Header, err
	}

	for _, tc := range []struct {
		name, path string
		srv        *httptest.Server
		want       string // the body, or "" for ErrSilent
		bound      time.Duration
	}{
		{"no answer", "/stuck", own, "", agentReplyTimeout},
		{"no answer to /health", "/health", own, "", agentHealthTimeout},
		{"a stream with keepalives", "/keepalives", own, ".....end", 0},
		{"a stream gone silent", "/silent", own, "", agentReplyTimeout},
		{"a user's slow service", "/late", user, "end", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			body, _, err := get(tc.srv, tc.path)
			took := time.Since(start)
			if tc.want != "" {
				if err != nil || body != tc.want {
					t.Fatalf("got %q, %v; want %q", body, err, tc.want)
				}
				return
			}
			if !errors.Is(err, ErrSilent) {
				t.Fatalf("got %q, %v; want ErrSilent", body, err)
			}
			// Ended by its own bound: not before it, and a /health not
			// by the longer bound of other requests.
			if took < tc.bound || (tc.bound < agentReplyTimeout && took >= agentReplyTimeout) {
				t.Fatalf("ended after %s; its bound is %s", took, tc.bound)
			}
		})
	}

	// Keepalives are asked for at least every agentKeepalive, whatever
	// the client asked; a shorter interval stands.
	for asked, want := range map[string]string{"": "10", "50": "10", "3600": "10", "x": "10", "2.5": "2.5"} {
		var hdr []string
		if asked != "" {
			hdr = []string{asked}
		}
		if _, h, err := get(own, "/", hdr...); err != nil || h.Get("X-Keepalive") != want {
			t.Errorf("asked %q: the server saw %q (%v), want %q", asked, h.Get("X-Keepalive"), err, want)
		}
	}
}
