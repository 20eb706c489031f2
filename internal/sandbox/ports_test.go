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
	"testing"

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
