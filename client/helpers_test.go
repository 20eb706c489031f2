package client

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const testKey = "secret"

// newTestClient serves h with a check of the API key, and returns a client of it
// built from the address without scheme.
func newTestClient(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Authorization"); got != "Bearer "+testKey {
			writeAPIError(w, http.StatusUnauthorized, "unauthenticated", "bad key "+got)
			return
		}
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return New(strings.TrimPrefix(srv.URL, "http://"), testKey)
}

func writeAPIError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"code":%q,"message":%q}}`, code, msg)
}

// sse writes events and flushes each, as the daemon does.
type sse struct {
	w http.ResponseWriter
}

func startSSE(w http.ResponseWriter) sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	return sse{w}
}

func (s sse) event(id int, typ, data string) {
	fmt.Fprintf(s.w, "id: %d\nevent: %s\ndata: %s\n\n", id, typ, data)
	s.w.(http.Flusher).Flush()
}

func (s sse) raw(text string) {
	fmt.Fprint(s.w, text)
	s.w.(http.Flusher).Flush()
}
