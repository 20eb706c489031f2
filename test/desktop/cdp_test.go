package desktop_test

import (
	"fmt"
	"html"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/spacesandbox/space/test/harness"
)

// The browser-automation tests (python/test_cdp.py) load pages from two
// hosts outside the sandbox: a network namespace of the test's own holding
// an address the sandbox's egress policy allows and one it does not. The
// addresses are in 198.18.0.0/15 (benchmarking, outside the platform floor
// and outside every other suite's stand-ins), on a link only this test made.
const (
	cdpHostSide = "198.18.23.1"
	cdpAllowed  = "198.18.23.10"
	cdpDenied   = "198.18.23.66"
)

// cdpHosts makes the namespace and serves the form page on port 80 of both
// addresses; it returns the environment that tells the Python tests where
// they are. Each server counts the requests it got (GET /hits answers the
// count, to the host only: the tests read it to show the denied host got
// nothing from the sandbox, and the allowed one did).
func cdpHosts(t *testing.T) []string {
	t.Helper()
	host, err := harness.NewTestHost(harness.TestHostOptions{
		Prefix: "cdp", HostAddrs: []string{cdpHostSide + "/24"},
		Addrs: []string{cdpAllowed + "/24", cdpDenied + "/24"}, Gateway: cdpHostSide,
	})
	if err != nil {
		t.Fatalf("test host for the browser tests: %v", err)
	}
	t.Cleanup(host.Close)
	for _, ip := range []string{cdpAllowed, cdpDenied} {
		ln, err := host.Listen("tcp4", ip+":80")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: formServer(ip)}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	return []string{"SPACE_CDP_ALLOWED=" + cdpAllowed, "SPACE_CDP_DENIED=" + cdpDenied}
}

// formServer serves a form (GET /) whose POST /submit answers with what
// was sent, and the count of those requests (GET /hits, from the host's
// side of the link only).
func formServer(name string) http.Handler {
	var mu sync.Mutex
	hits := 0
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hits", func(w http.ResponseWriter, r *http.Request) {
		if ip, _, _ := net.SplitHostPort(r.RemoteAddr); ip != cdpHostSide {
			http.Error(w, "not for you", http.StatusForbidden)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprint(w, hits)
	})
	count := func() { mu.Lock(); hits++; mu.Unlock() }
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		count()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>form at %s</title>
<form method="post" action="/submit"><input id="name" name="name"><button id="go" type="submit">Send</button></form>`, name)
	})
	mux.HandleFunc("POST /submit", func(w http.ResponseWriter, r *http.Request) {
		count()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>sent</title><p id="result">%s got %s</p>`,
			name, html.EscapeString(strings.TrimSpace(r.PostFormValue("name"))))
	})
	return mux
}
