package cutproxy

import (
	"io"
	"net"
	"testing"
	"time"
)

// server writes size bytes to every connection, in small writes, then
// closes it; pace is the wait between writes.
func server(t *testing.T, size int, pace time.Duration) string {
	t.Helper()
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
				chunk := make([]byte, 100)
				for sent := 0; sent < size; sent += len(chunk) {
					if _, err := c.Write(chunk); err != nil {
						return
					}
					time.Sleep(pace)
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// fetch reads one connection through the proxy to its end. A cut may
// come before the dial returns (a budget smaller than the first write).
func fetch(t *testing.T, addr string) (int, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	n, err := io.Copy(io.Discard, c)
	return int(n), err
}

func TestProxy(t *testing.T) {
	const size = 100_000
	tests := []struct {
		name      string
		opts      Options
		pace      time.Duration
		wantCut   bool
		wantBelow int // a cut connection got fewer bytes than this
	}{
		{name: "no cut", opts: Options{}, wantCut: false},
		{name: "by bytes", opts: Options{MeanBytes: 1000, Seed: 1}, wantCut: true, wantBelow: size},
		{name: "by time", opts: Options{MeanLife: 20 * time.Millisecond, Seed: 2}, pace: time.Millisecond, wantCut: true, wantBelow: size},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Target = server(t, size, tt.pace)
			p, err := Listen(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			const conns = 5
			for range conns {
				n, err := fetch(t, p.Addr())
				if !tt.wantCut {
					if n != size || err != nil {
						t.Errorf("uncut connection: %d bytes of %d, err %v", n, size, err)
					}
					continue
				}
				if n >= tt.wantBelow {
					t.Errorf("cut connection got %d bytes, want fewer than %d", n, tt.wantBelow)
				}
			}
			s := p.Stats()
			wantCuts := int64(0)
			if tt.wantCut {
				wantCuts = conns
			}
			if s.Conns != conns || s.Cuts != wantCuts {
				t.Errorf("stats %+v, want %d conns and %d cuts", s, conns, wantCuts)
			}
		})
	}
}

// TestSeed: the same seed cuts sequential connections at the same bytes,
// another seed elsewhere. The bytes are the proxy's count: a reset client
// may lose what it had not read yet.
func TestSeed(t *testing.T) {
	target := server(t, 1_000_000, 0)
	cutsAt := func(seed uint64) []int {
		p, err := Listen(Options{Target: target, MeanBytes: 5000, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		var out []int
		for range 4 {
			before := p.Stats().Bytes
			fetch(t, p.Addr())
			out = append(out, int(p.Stats().Bytes-before))
		}
		return out
	}
	a, b, c := cutsAt(7), cutsAt(7), cutsAt(8)
	if !equal(a, b) {
		t.Errorf("seed 7 cut at %v, then at %v", a, b)
	}
	if equal(a, c) {
		t.Errorf("seeds 7 and 8 both cut at %v", a)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestCloseEndsOpenConnections(t *testing.T) {
	p, err := Listen(Options{Target: server(t, 1<<30, time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); fetch(t, p.Addr()) }()
	time.Sleep(50 * time.Millisecond)
	p.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a connection outlived Close")
	}
	if s := p.Stats(); s.Cuts != 0 {
		t.Errorf("Close counted %d cuts", s.Cuts)
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{{}, {Target: "127.0.0.1:1", MeanBytes: -1}} {
		if p, err := Listen(o); err == nil {
			p.Close()
			t.Errorf("Listen(%+v): want an error", o)
		}
	}
}
