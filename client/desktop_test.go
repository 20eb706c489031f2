package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/coder/websocket"
)

func TestDesktopVNC(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/sandboxes/plain/desktop/vnc" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"error":{"code":"failed_precondition","message":"sandbox plain has no desktop"}}`)
			return
		}
		if r.URL.Path != "/v1/sandboxes/s1/desktop/vnc" || r.Header.Get("Authorization") == "" {
			t.Errorf("%s %q", r.URL, r.Header.Get("Authorization"))
		}
		conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"binary"}})
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.CloseNow()
		if conn.Subprotocol() != "binary" {
			t.Errorf("subprotocol %q", conn.Subprotocol())
		}
		// The version in two frames, then the viewer's answer echoed.
		conn.Write(r.Context(), websocket.MessageBinary, []byte("RFB 003"))
		conn.Write(r.Context(), websocket.MessageBinary, []byte(".008\n"))
		_, data, err := conn.Read(r.Context())
		if err != nil {
			return
		}
		conn.Write(r.Context(), websocket.MessageBinary, data)
	})
	ctx := context.Background()
	conn, err := c.DesktopVNC(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var v [12]byte
	if _, err := io.ReadFull(conn, v[:]); err != nil || string(v[:]) != "RFB 003.008\n" {
		t.Fatalf("version %q, %v", v[:], err)
	}
	conn.Write([]byte("RFB 003.008\n"))
	if _, err := io.ReadFull(conn, v[:]); err != nil || string(v[:]) != "RFB 003.008\n" {
		t.Fatalf("echo %q, %v", v[:], err)
	}

	_, err = c.DesktopVNC(ctx, "plain")
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict || apiErr.Code != "failed_precondition" {
		t.Fatalf("a sandbox without a desktop: %v", err)
	}
}
