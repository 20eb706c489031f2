package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"

	"github.com/spacesandbox/space/internal/accesstoken"
	"github.com/spacesandbox/space/internal/computeruse"
	"github.com/spacesandbox/space/internal/desktop"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// desktopServer serves the API's desktop routes over a desktop client
// whose sandbox "sb" is srv, a stand-in for space-desktop's wire (the
// real one is tested in internal/desktopd and test/desktop); with srv nil
// nothing listens on the sandbox's port.
func desktopServer(t *testing.T, srv func(w http.ResponseWriter, r *http.Request, body string)) (http.Handler, *[]string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	addr := "127.0.0.1:1" // nothing listens: refused
	if srv != nil {
		fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			seen = append(seen, r.Method+" "+r.URL.RequestURI()+" "+string(body))
			mu.Unlock()
			if r.Header.Get("X-Access-Token") != accesstoken.Desktop("tok") {
				http.Error(w, "bad token", 401)
				return
			}
			srv(w, r, string(body))
		}))
		t.Cleanup(fake.Close)
		addr = fake.Listener.Addr().String()
	}
	d := desktop.New(desktop.Options{
		Target: func(id string) (sandbox.Target, error) {
			if id != "sb" {
				return sandbox.Target{}, errdefs.New(errdefs.ErrNotFound, "sandbox %q not found", id)
			}
			return sandbox.Target{ID: id, IP: netip.MustParseAddr("10.0.0.7"), AccessToken: "tok"}, nil
		},
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	})
	s := &Server{log: slog.New(slog.DiscardHandler), desktop: d, tenants: testTenants(t, "k"), owners: defaultOwner{}, metrics: http.NotFoundHandler()}
	return s.routes(), &seen
}

func TestDesktopRoutes(t *testing.T) {
	h, seen := desktopServer(t, func(w http.ResponseWriter, r *http.Request, body string) {
		switch r.URL.Path {
		case "/screenshot":
			w.Header().Set("Content-Type", "image/png")
			io.WriteString(w, "PNG-"+r.URL.RawQuery)
		case "/actions":
			var a struct{ Coordinate []int }
			json.Unmarshal([]byte(body), &a)
			if len(a.Coordinate) == 2 && a.Coordinate[0] >= 1024 {
				http.Error(w, "coordinate [5000, 1] is off the screen (1024x768: x from 0 to 1023, y from 0 to 767)", 400)
				return
			}
			io.WriteString(w, `{"cursor":{"x":1,"y":2},"screen":{"width":1024,"height":768},"screenshot":"UE5H"}`)
		}
	})
	rec := doCode(h, "GET", "/v1/sandboxes/sb/desktop/screenshot?width=512", "")
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "image/png" || rec.Body.String() != "PNG-width=512" {
		t.Fatalf("screenshot: %d %s %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	rec = doCode(h, "POST", "/v1/sandboxes/sb/desktop/actions", `{"action":"left_click","coordinate":[10,20],"screenshot":true}`)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"screenshot":"UE5H"`) || !strings.Contains(rec.Body.String(), `"cursor":{"x":1,"y":2}`) {
		t.Fatalf("action: %d %s", rec.Code, rec.Body)
	}
	// zoom's region reaches the sandbox as it came.
	rec = doCode(h, "POST", "/v1/sandboxes/sb/desktop/actions", `{"action":"zoom","region":[1,2,30,40]}`)
	if rec.Code != 200 || !strings.Contains((*seen)[len(*seen)-1], `"region":[1,2,30,40]`) {
		t.Fatalf("zoom: %d %s, the sandbox got %v", rec.Code, rec.Body, (*seen)[len(*seen)-1])
	}
	// The screen's own refusal reaches the caller as 400 with its words.
	rec = doCode(h, "POST", "/v1/sandboxes/sb/desktop/actions", `{"action":"left_click","coordinate":[5000,1]}`)
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), "off the screen") {
		t.Fatalf("off the screen: %d %s", rec.Code, rec.Body)
	}
	before := len(*seen)
	for _, tc := range []struct{ body, want string }{
		{`{"action":"teleport"}`, "action"},
		{`{}`, "action"},
		{`{"action":"type"}`, "text"},
		{`{"action":"type","text":5}`, "text"},
		{`{"action":"left_click","coordinate":["a",1]}`, "coordinate"},
		{`{"action":"left_click","coordinate":[1]}`, "coordinate"},
		{`{"action":"left_click","coordinate":[-1,1]}`, "coordinate"},
		{`{"action":"left_click","button":"left"}`, "button"},
		{`{"action":"mouse_move","coordinate":[1,1],"duration":1}`, "duration"},
		{`{"action":"scroll","scroll_direction":"in","scroll_amount":1}`, "scroll_direction"},
		{`{"action":"key","text":"ctrl+nosuch"}`, "nosuch"},
		{`{"action":"wait","duration":61}`, "duration"},
		{`{"action":"zoom"}`, "region"},
		{`{"action":"zoom","region":[0,0,5]}`, "region"},
		{`{"action":"zoom","region":[5,0,5,5]}`, "region"},
		{`{"action":"left_click","region":[0,0,5,5]}`, "region"},
		{`not json`, "JSON"},
	} {
		rec := doCode(h, "POST", "/v1/sandboxes/sb/desktop/actions", tc.body)
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("%s: %d %s, want 400 naming %q", tc.body, rec.Code, rec.Body, tc.want)
		}
	}
	if rec := doCode(h, "GET", "/v1/sandboxes/sb/desktop/screenshot?width=0", ""); rec.Code != 400 {
		t.Errorf("width=0: %d %s", rec.Code, rec.Body)
	}
	if n := len(*seen) - before; n != 0 {
		t.Errorf("%d refused requests reached the sandbox: %v", n, (*seen)[before:])
	}
}

// A sandbox without space-desktop on its port: 409 naming the template.
func TestDesktopNoDisplay(t *testing.T) {
	h, _ := desktopServer(t, nil)
	for _, rec := range []*httptest.ResponseRecorder{
		doCode(h, "GET", "/v1/sandboxes/sb/desktop/screenshot", ""),
		doCode(h, "POST", "/v1/sandboxes/sb/desktop/actions", `{"action":"cursor_position"}`),
		doCode(h, "GET", "/v1/sandboxes/sb/desktop/vnc", "", "Connection", "Upgrade", "Upgrade", "websocket"),
	} {
		if rec.Code != 409 || !strings.Contains(rec.Body.String(), "desktop template") {
			t.Errorf("%d %s, want 409 naming the desktop template", rec.Code, rec.Body)
		}
	}
	if rec := doCode(h, "GET", "/v1/sandboxes/other/desktop/screenshot", ""); rec.Code != 404 {
		t.Errorf("unknown sandbox: %d %s", rec.Code, rec.Body)
	}
}

// The viewer's WebSocket carries space-desktop's upgraded connection
// both ways, in binary frames.
func TestDesktopVNC(t *testing.T) {
	h, seen := desktopServer(t, func(w http.ResponseWriter, r *http.Request, body string) {
		if r.URL.Path != "/vnc" || r.Header.Get("Upgrade") != computeruse.VNCUpgrade {
			http.Error(w, "not an upgrade to rfb", 400)
			return
		}
		c, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: rfb\r\n\r\nRFB 003.008\n")
		io.Copy(c, brw) // echo
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	ctx := context.Background()
	conn, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/sandboxes/sb/desktop/vnc", &websocket.DialOptions{
		HTTPHeader:   http.Header{"Authorization": {"Bearer k"}},
		Subprotocols: []string{"binary"},
	})
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	defer conn.CloseNow()
	if conn.Subprotocol() != "binary" {
		t.Errorf("subprotocol %q, want binary", conn.Subprotocol())
	}
	typ, b, err := conn.Read(ctx)
	if err != nil || typ != websocket.MessageBinary || string(b) != "RFB 003.008\n" {
		t.Fatalf("greeting: %v %q %v", typ, b, err)
	}
	conn.Write(ctx, websocket.MessageBinary, []byte("ping"))
	if _, b, err = conn.Read(ctx); err != nil || string(b) != "ping" {
		t.Fatalf("echo: %q %v", b, err)
	}
	if len(*seen) != 1 || !strings.HasPrefix((*seen)[0], "GET /vnc") {
		t.Errorf("the sandbox saw %q", *seen)
	}
}
