package bodylimit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

// server serves a route table through Wrap; each handler reads its whole
// body and counts what it read, answering 413 on the limit's error.
func server(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var read atomic.Int64
	limits := New(1<<10, map[string]int64{
		"PUT /upload/{x}": 64 << 10,
		"PUT /stream":     Unbounded,
	}).Setting("PUT /upload/{x}", "SPACE_TEST_MAX_UPLOAD").Admit("PUT /upload/{x}", func(n int64) error {
		if n > 32<<10 {
			return errdefs.New(errdefs.ErrNoSpace, "the node's disk is too full to take this")
		}
		return nil
	})
	h := func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		read.Add(n)
		if err != nil {
			refuse(w, r, err)
			return
		}
		fmt.Fprintf(w, `{"read":%d}`, n)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /upload/{x}", h)
	mux.HandleFunc("PUT /stream", h)
	mux.HandleFunc("POST /json", h)
	srv := httptest.NewServer(limits.Wrap(mux, refuse))
	t.Cleanup(srv.Close)
	return srv, &read
}

func refuse(w http.ResponseWriter, r *http.Request, err error) {
	code, name := errdefs.HTTPStatus(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"code": name, "message": errdefs.PublicMessage(err)})
}

func TestLimitsOf(t *testing.T) {
	l := New(1<<20, map[string]int64{"PUT /v1/files/{hash}": 4 << 30, "PUT /v1/sandboxes/{id}/files": Unbounded})
	for _, tc := range []struct {
		method, path string
		want         int64
	}{
		{"PUT", "/v1/files/abc", 4 << 30},
		{"POST", "/v1/files/abc", 1 << 20}, // another method: the default
		{"PUT", "/v1/sandboxes/s1/files", Unbounded},
		{"PUT", "/v1/sandboxes/s1/files/x", 1 << 20},
		{"POST", "/v1/builds", 1 << 20},
		{"PUT", "/v1//files/abc", 4 << 30}, // not clean: as the API's mux (which redirects) matches it
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		if got := l.Of(r); got != tc.want {
			t.Errorf("%s %s: limit %d, want %d", tc.method, tc.path, got, tc.want)
		}
	}
}

// TestWrap sends bodies with a client that reads the answer as it writes
// (Go's): declared over the limit, chunked over it, and within it.
func TestWrap(t *testing.T) {
	for _, tc := range []struct {
		name     string
		method   string
		path     string
		size     int
		chunked  bool
		declared int64 // Content-Length sent (0: size)
		want     int
		maxRead  int64 // the handler reads at most this
	}{
		{name: "json within", method: "POST", path: "/json", size: 100, want: 200, maxRead: 100},
		{name: "json declared over", method: "POST", path: "/json", size: 4 << 10, want: 413, maxRead: 0},
		{name: "json chunked over", method: "POST", path: "/json", size: 4 << 10, chunked: true, want: 413, maxRead: 1 << 10},
		{name: "upload within", method: "PUT", path: "/upload/a", size: 32 << 10, want: 200, maxRead: 32 << 10},
		{name: "upload not admitted", method: "PUT", path: "/upload/a", size: 64 << 10, want: 507, maxRead: 0},
		{name: "upload declared over", method: "PUT", path: "/upload/a", size: 64<<10 + 1, want: 413, maxRead: 0},
		{name: "upload chunked over", method: "PUT", path: "/upload/a", size: 1 << 20, chunked: true, want: 413, maxRead: 64 << 10},
		{name: "stream unbounded", method: "PUT", path: "/stream", size: 2 << 20, chunked: true, want: 200, maxRead: 2 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, read := server(t)
			var body io.Reader = strings.NewReader(strings.Repeat("x", tc.size))
			if tc.chunked {
				body = io.MultiReader(body) // hides the length: sent chunked
			}
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, body)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatalf("request: %v", err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, b, tc.want)
			}
			if tc.want == 413 && !strings.Contains(string(b), "too_large") {
				t.Errorf("413 body %s does not name the limit", b)
			}
			if tc.want == 413 && strings.HasPrefix(tc.path, "/upload/") && !strings.Contains(string(b), "SPACE_TEST_MAX_UPLOAD") {
				t.Errorf("413 body %s does not name the route's setting", b)
			}
			if tc.want == 507 && !strings.Contains(string(b), "disk") {
				t.Errorf("507 body %s does not say why", b)
			}
			if got := read.Load(); got > tc.maxRead {
				t.Errorf("the handler read %d bytes, want at most %d", got, tc.maxRead)
			}
		})
	}
}

// TestWrapWriteFirst is a client that writes its whole body before it
// reads the answer, and one that asks 100-continue: each reads a 413, not
// a reset connection.
func TestWrapWriteFirst(t *testing.T) {
	for _, tc := range []struct {
		name, head string
		body       int
	}{
		{"declared over", "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 12582912\r\n\r\n", 12 << 20},
		{"chunked over", "POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", 12 << 20},
		{"expect 100-continue", "PUT /upload/a HTTP/1.1\r\nHost: x\r\nContent-Length: 5368709120\r\nExpect: 100-continue\r\n\r\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, read := server(t)
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			w := bufio.NewWriter(c)
			w.WriteString(tc.head)
			chunked := strings.Contains(tc.head, "chunked")
			chunk := strings.Repeat("x", 32<<10)
			for sent := 0; sent < tc.body; sent += len(chunk) {
				if chunked {
					fmt.Fprintf(w, "%x\r\n%s\r\n", len(chunk), chunk)
				} else {
					w.WriteString(chunk)
				}
			}
			if chunked {
				w.WriteString("0\r\n\r\n")
			}
			if err := w.Flush(); err != nil {
				t.Fatalf("writing the body: %v", err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("reading the answer: %v (a reset instead of the 413)", err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 413 || !strings.Contains(string(b), "limit") {
				t.Fatalf("answer %d %s, want 413 naming the limit", resp.StatusCode, b)
			}
			if read.Load() > 1<<10 {
				t.Errorf("the handler read %d bytes past the limit of 1024", read.Load())
			}
		})
	}
}

func TestLimitedReader(t *testing.T) {
	for _, tc := range []struct {
		size, limit int
		ok          bool
	}{{10, 10, true}, {11, 10, false}, {0, 0, true}, {1, 0, false}, {100 << 10, 64 << 10, false}} {
		b := &limited{r: io.NopCloser(strings.NewReader(strings.Repeat("x", tc.size))), left: int64(tc.limit), limit: int64(tc.limit)}
		n, err := io.Copy(io.Discard, b)
		if tc.ok != (err == nil) || n > int64(tc.limit) {
			t.Errorf("size %d limit %d: read %d, err %v", tc.size, tc.limit, n, err)
		}
		var m *http.MaxBytesError
		if !tc.ok && (!errors.As(err, &m) || errdefs.Class(err) != errdefs.ErrTooLarge) {
			t.Errorf("size %d limit %d: err %v is not TooLarge and a MaxBytesError", tc.size, tc.limit, err)
		}
	}
}
