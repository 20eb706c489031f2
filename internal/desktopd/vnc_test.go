package desktopd

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/accesstoken"
	"github.com/spacesandbox/space/internal/computeruse"
)

// fakeVNC is a VNC server that greets as RFB 3.8 and echoes what it gets.
func fakeVNC(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.WriteString(c, "RFB 003.008\n")
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// upgrade sends GET /vnc and answers the response and the connection.
func upgrade(t *testing.T, srv *httptest.Server, token, proto string) (*http.Response, *bufio.Reader, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req, _ := http.NewRequest("GET", srv.URL+"/vnc", nil)
	req.Header.Set("X-Access-Token", token)
	if proto != "" {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", proto)
	}
	if err := req.Write(c); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp, br, c
}

func TestVNC(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.json")
	os.WriteFile(state, []byte(`{"token":"sandbox-token"}`), 0o600)
	tok := accesstoken.Desktop("sandbox-token")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	listening := httptest.NewServer(New(Config{StatePath: state, VNCAddr: fakeVNC(t), VNCCommand: []string{"false"}, Logger: quiet}).Handler())
	t.Cleanup(listening.Close)

	for _, tc := range []struct {
		name, token, proto string
		want               int
	}{
		{"no token", "", computeruse.VNCUpgrade, 401},
		{"wrong token", accesstoken.Interpreter("sandbox-token"), computeruse.VNCUpgrade, 401},
		{"no upgrade", tok, "", 400},
		{"other upgrade", tok, "websocket", 400},
	} {
		if resp, _, _ := upgrade(t, listening, tc.token, tc.proto); resp.StatusCode != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}

	t.Run("relays", func(t *testing.T) {
		resp, br, c := upgrade(t, listening, tok, computeruse.VNCUpgrade)
		if resp.StatusCode != 101 {
			t.Fatalf("status %d, want 101", resp.StatusCode)
		}
		line, err := br.ReadString('\n')
		if err != nil || line != "RFB 003.008\n" {
			t.Fatalf("greeting %q, %v", line, err)
		}
		io.WriteString(c, "RFB 003.008\n")
		if line, err = br.ReadString('\n'); err != nil || line != "RFB 003.008\n" {
			t.Fatalf("echo %q, %v", line, err)
		}
	})

	t.Run("server exits", func(t *testing.T) {
		// Nothing listens and the command exits at once: a display the
		// VNC server cannot serve.
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		addr := ln.Addr().String()
		ln.Close()
		srv := httptest.NewServer(New(Config{StatePath: state, VNCAddr: addr, VNCCommand: []string{"false"}, Logger: quiet}).Handler())
		t.Cleanup(srv.Close)
		resp, _, _ := upgrade(t, srv, tok, computeruse.VNCUpgrade)
		body, _ := io.ReadAll(resp.Body)
		if code := resp.StatusCode; code != 409 || !strings.Contains(string(body), "display is not running") {
			t.Errorf("%d %q, want 409 naming the display", code, body)
		}
	})
}
