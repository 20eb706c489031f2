package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/coder/websocket"
)

func TestPTY(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.URL.Path != "/v1/sandboxes/s1/pty" || q.Get("cols") != "100" || q.Get("rows") != "30" || q.Get("user") != "root" {
			t.Errorf("%s", r.URL)
		}
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.CloseNow()
		ctx := r.Context()
		conn.Write(ctx, websocket.MessageBinary, []byte("$ "))
		// Expect a resize, then keystrokes, echoed back.
		for range 2 {
			typ, data, err := conn.Read(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			if typ == websocket.MessageText {
				var m map[string]any
				json.Unmarshal(data, &m)
				if m["type"] != "resize" || m["cols"] != 120.0 || m["rows"] != 40.0 {
					t.Errorf("control = %s", data)
				}
				continue
			}
			conn.Write(ctx, websocket.MessageBinary, data)
		}
		conn.Write(ctx, websocket.MessageText, []byte(`{"type":"exit","exit_code":3}`))
		conn.Close(websocket.StatusNormalClosure, "")
	})
	p, err := c.OpenPTY(context.Background(), "s1", PTYOptions{Cols: 100, Rows: 30, User: "root"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Resize(120, 40); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Write([]byte("exit 3\r")); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "$ exit 3\r" {
		t.Errorf("output %q", out)
	}
	code, err := p.Wait()
	if err != nil || code != 3 {
		t.Errorf("Wait = %d, %v", code, err)
	}
}

func TestPTYDialError(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, http.StatusNotFound, "not_found", `sandbox "s1" not found`)
	})
	_, err := c.OpenPTY(context.Background(), "s1", PTYOptions{})
	if !IsNotFound(err) {
		t.Fatalf("err = %v", err)
	}
}

func TestPTYClosedWithoutExit(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		conn.Close(websocket.StatusInternalError, "agent died")
	})
	p, err := c.OpenPTY(context.Background(), "s1", PTYOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := io.ReadAll(p); err == nil {
		t.Error("ReadAll: want an error")
	}
	if _, err := p.Wait(); err == nil {
		t.Error("Wait: want an error")
	}
}
