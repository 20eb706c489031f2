package jupyter

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func TestEncodeDecode(t *testing.T) {
	s := signer{key: []byte("secret")}
	id, frames, err := s.encode("sess", "execute_request", map[string]any{"code": "1+1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		prefix [][]byte
	}{
		{"no identities", nil},
		{"iopub topic", [][]byte{[]byte("kernel.1.status")}},
		{"router identities", [][]byte{[]byte("id1"), []byte("id2")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := s.decode(append(append([][]byte{}, tc.prefix...), frames...))
			if err != nil {
				t.Fatal(err)
			}
			if m.Header.MsgID != id || m.Type() != "execute_request" || m.Header.Session != "sess" || m.Header.Version != Version {
				t.Errorf("header %+v", m.Header)
			}
			var c struct{ Code string }
			if json.Unmarshal(m.Content, &c); c.Code != "1+1" {
				t.Errorf("content %s", m.Content)
			}
		})
	}

	tampered := append([][]byte{}, frames...)
	tampered[5] = []byte(`{"code":"evil"}`)
	if _, err := s.decode(tampered); !errors.Is(err, errBadSignature) {
		t.Errorf("tampered content: %v", err)
	}
	if _, err := (signer{key: []byte("other")}).decode(frames); !errors.Is(err, errBadSignature) {
		t.Errorf("other key: %v", err)
	}
	if _, err := s.decode(frames[:4]); err == nil {
		t.Error("short message decoded")
	}
	// An empty key turns signing off on both sides.
	_, unsigned, _ := signer{}.encode("s", "x", struct{}{})
	if len(unsigned[1]) != 0 {
		t.Errorf("signature with an empty key: %q", unsigned[1])
	}
	if _, err := (signer{}).decode(unsigned); err != nil {
		t.Errorf("unsigned: %v", err)
	}
}

func TestConnInfo(t *testing.T) {
	c := NewIPC("/run/x/k")
	if got := c.Endpoint(c.ShellPort); got != "ipc:///run/x/k-1" {
		t.Errorf("endpoint %s", got)
	}
	if len(c.Key) != 64 || c.SignatureScheme != "hmac-sha256" {
		t.Errorf("key %q scheme %q", c.Key, c.SignatureScheme)
	}
	tcp := ConnInfo{Transport: "tcp", IP: "127.0.0.1"}
	if got := tcp.Endpoint(5555); got != "tcp://127.0.0.1:5555" {
		t.Errorf("tcp endpoint %s", got)
	}
	if NewID() == NewID() {
		t.Error("ids repeat")
	}
}

func TestTCPListening(t *testing.T) {
	c, err := NewTCP("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range []int{c.ShellPort, c.IOPubPort, c.StdinPort, c.ControlPort, c.HBPort} {
		if p <= 0 || seen[p] {
			t.Fatalf("ports %+v", c)
		}
		seen[p] = true
	}
	if ok, err := c.Listening(); ok || err != nil {
		t.Fatalf("listening before anything listens: %v %v", ok, err)
	}
	for _, p := range []int{c.ShellPort, c.IOPubPort, c.ControlPort} {
		l, err := net.Listen("tcp", net.JoinHostPort(c.IP, strconv.Itoa(p)))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				conn.Close()
			}
		}()
	}
	if ok, err := c.Listening(); !ok || err != nil {
		t.Fatalf("not listening: %v %v", ok, err)
	}
	dir := t.TempDir()
	ipc := NewIPC(filepath.Join(dir, "k"))
	if ok, _ := ipc.Listening(); ok {
		t.Fatal("ipc listening without sockets")
	}
	for _, p := range []int{1, 2, 4} {
		if err := os.WriteFile(filepath.Join(dir, "k-"+strconv.Itoa(p)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if ok, _ := ipc.Listening(); !ok {
		t.Fatal("ipc not listening with its sockets there")
	}
}
