package jupyter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	zmq "github.com/go-zeromq/zmq4"
)

// fakeKernel is a kernel's three sockets (go-zeromq's ROUTER and PUB on
// unix sockets), publishing what a test makes it.
type fakeKernel struct {
	info ConnInfo
	pub  zmq.Socket
	sig  signer
}

func newFakeKernel(t *testing.T) *fakeKernel {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	info := NewIPC(filepath.Join(t.TempDir(), "k"))
	k := &fakeKernel{info: info, sig: signer{key: []byte(info.Key)}}
	socks := map[int]zmq.Socket{info.ShellPort: zmq.NewRouter(ctx), info.ControlPort: zmq.NewRouter(ctx), info.IOPubPort: zmq.NewPub(ctx)}
	for port, s := range socks {
		if err := s.Listen(info.Endpoint(port)); err != nil {
			t.Fatal(err)
		}
	}
	k.pub = socks[info.IOPubPort]
	t.Cleanup(func() {
		cancel()
		for _, s := range socks {
			s.Close()
		}
	})
	return k
}

// frames is an IOPub message answering parent, signed with key.
func (k *fakeKernel) frames(key []byte, parent, msgType string, content []byte) [][]byte {
	h, _ := json.Marshal(Header{MsgID: NewID(), MsgType: msgType, Version: Version})
	p, _ := json.Marshal(Header{MsgID: parent})
	md := []byte("{}")
	return [][]byte{[]byte("kernel.x." + msgType), delimiter, signer{key: key}.sign(h, p, md, content), h, p, md, content}
}

func (k *fakeKernel) publish(t *testing.T, frames [][]byte) {
	t.Helper()
	if err := k.pub.SendMulti(zmq.NewMsgFrom(frames...)); err != nil {
		t.Fatal(err)
	}
}

// route dials the fake kernel with maxFrame and returns a route for its
// messages, once a published message reaches it (ZeroMQ's slow joiner).
func (k *fakeKernel) route(t *testing.T, maxFrame int64) (*Client, *Route) {
	t.Helper()
	c, err := Dial(context.Background(), k.info, maxFrame, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(nil) })
	r, err := c.Request(Shell, "kernel_info_request", struct{}{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	for deadline := time.Now().Add(10 * time.Second); ; {
		k.publish(t, k.frames(k.sig.key, r.ID(), "status", []byte(`{"execution_state":"busy"}`)))
		if m, _ := r.Recv(context.Background(), 50*time.Millisecond); m != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no message reached the client")
		}
	}
	for m, _ := r.Recv(context.Background(), 100*time.Millisecond); m != nil; m, _ = r.Recv(context.Background(), 100*time.Millisecond) {
	}
	return c, r
}

func recv(t *testing.T, r *Route) *Message {
	t.Helper()
	m, err := r.Recv(context.Background(), 10*time.Second)
	if err != nil || m == nil {
		t.Fatalf("no message: %v", err)
	}
	return m
}

// TestFrameLimit: a message over the limit arrives cut to it, its
// signature checked over the whole, and the client never allocates the
// whole (without the limiting transport zmq4 allocates every frame at its
// announced size); a cut message with a bad signature is dropped; small
// ones pass untouched.
func TestFrameLimit(t *testing.T) {
	const max = 64 << 10
	k := newFakeKernel(t)
	c, r := k.route(t, max)

	small := []byte(`{"name":"stdout","text":"hello"}`)
	k.publish(t, k.frames(k.sig.key, r.ID(), "stream", small))
	if m := recv(t, r); m.Cut || !bytes.Equal(m.Content, small) || m.Type() != "stream" {
		t.Fatalf("small message: cut %v, %s", m.Cut, m.Content)
	}

	big := []byte(`{"name":"stdout","text":"` + strings.Repeat("x", 32<<20) + `"}`)
	bigFrames := k.frames(k.sig.key, r.ID(), "stream", big)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	k.publish(t, bigFrames)
	m := recv(t, r)
	runtime.ReadMemStats(&after)
	// The sender (zmq4's PUB, in this process) writes the frame as it is;
	// the receiving side reads through 64 KiB buffers.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
		t.Errorf("receiving a 32 MiB message allocated %d MiB", alloc>>20)
	}
	if !m.Cut || len(m.Content) != max || !bytes.Equal(m.Content, big[:max]) || m.Type() != "stream" || m.Parent() != r.ID() {
		t.Fatalf("big message: cut %v, %d bytes, type %q", m.Cut, len(m.Content), m.Type())
	}

	// Signed with another key: the limit checks the signature the client
	// cannot, and the message goes.
	k.publish(t, k.frames([]byte("not the key"), r.ID(), "stream", big))
	k.publish(t, k.frames(k.sig.key, r.ID(), "stream", small))
	if m := recv(t, r); m.Cut || !bytes.Equal(m.Content, small) {
		t.Fatalf("after a forged big message got cut %v %.60s", m.Cut, m.Content)
	}

	// A flood of messages over the limit: each arrives cut, none is lost
	// to the limit's wait, and the count of what is held goes back to 0.
	for i := 0; i < 40; i++ {
		k.publish(t, k.frames(k.sig.key, r.ID(), "stream", big[:1<<20]))
	}
	for i := 0; i < 40; i++ {
		if m := recv(t, r); !m.Cut || len(m.Content) != max {
			t.Fatalf("flood message %d: cut %v, %d bytes", i, m.Cut, len(m.Content))
		}
	}
	held := func() int64 {
		c.limit.mu.Lock()
		defer c.limit.mu.Unlock()
		return c.limit.held
	}
	// The last message's count goes once the client has routed it.
	for deadline := time.Now().Add(10 * time.Second); held() != 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := held(); n != 0 {
		t.Errorf("%d bytes still counted as held", n)
	}
}

// TestFrameLimitOff: without a limit, the same big message arrives whole.
func TestFrameLimitOff(t *testing.T) {
	k := newFakeKernel(t)
	_, r := k.route(t, 0)
	big := []byte(`{"text":"` + strings.Repeat("y", 1<<20) + `"}`)
	k.publish(t, k.frames(k.sig.key, r.ID(), "stream", big))
	if m := recv(t, r); m.Cut || !bytes.Equal(m.Content, big) {
		t.Fatalf("cut %v, %d bytes", m.Cut, len(m.Content))
	}
}

// TestLimitConnFrames drives a limitConn with hand-made ZMTP: the
// greeting passes, a command passes, a frame over the limit is cut with
// its message's last frame marked "more" and the trailer after it, and a
// command over 64 KiB ends the connection.
func TestLimitConnFrames(t *testing.T) {
	key := []byte("k")
	s := signer{key: key}
	h, p, md := []byte(`{"msg_type":"stream"}`), []byte(`{"msg_id":"parent"}`), []byte("{}")
	content := bytes.Repeat([]byte("z"), 1000)
	msg := [][]byte{[]byte("topic"), delimiter, s.sign(h, p, md, content), h, p, md, content}

	var wire bytes.Buffer
	greeting := bytes.Repeat([]byte{7}, zmtpGreeting)
	wire.Write(greeting)
	wire.Write(header(flagCommand, 5))
	wire.WriteString("READY")
	for i, f := range msg {
		flags := byte(flagMore)
		if i == len(msg)-1 {
			flags = 0
		}
		wire.Write(header(flags, uint64(len(f))))
		wire.Write(f)
	}
	wire.Write(header(flagCommand, maxCommand+1))

	c := newLimitConn(fakeConn{r: &wire}, newFrameLimit(100, key))
	c.lim.release(1 << 40) // nothing handles the messages here
	got, err := io.ReadAll(io.LimitReader(c, int64(zmtpGreeting+2+5)))
	if err != nil || !bytes.Equal(got[:zmtpGreeting], greeting) || string(got[zmtpGreeting+2:]) != "READY" {
		t.Fatalf("greeting and command: %q %v", got, err)
	}
	var frames [][]byte
	for {
		var hdr [2]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			t.Fatalf("after %d frames: %v", len(frames), err)
		}
		if hdr[0]&flagLong != 0 {
			t.Fatalf("a long frame reached zmq4: %x", hdr)
		}
		body := make([]byte, hdr[1])
		if _, err := io.ReadFull(c, body); err != nil {
			t.Fatal(err)
		}
		frames = append(frames, body)
		if hdr[0]&flagMore == 0 {
			break
		}
	}
	if len(frames) != len(msg)+1 {
		t.Fatalf("%d frames, want %d and the trailer", len(frames), len(msg))
	}
	m, err := s.decode(frames)
	if err != nil || !m.Cut || !bytes.Equal(m.Content, content[:100]) || m.Parent() != "parent" {
		t.Fatalf("decoded %+v, %v", m, err)
	}
	if _, err := c.Read(make([]byte, 10)); err == nil || !strings.Contains(err.Error(), "ZMTP command") {
		t.Errorf("a command over the limit: %v", err)
	}
}

// fakeConn is a net.Conn that reads from a buffer.
type fakeConn struct {
	net.Conn
	r io.Reader
}

func (f fakeConn) Read(p []byte) (int, error) { return f.r.Read(p) }

// A port that accepts and never greets (another process took the
// kernel's port) cannot hold Dial past its context: zmq4 reads the ZMTP
// greeting with no deadline of its own.
func TestDialGivesUpOnSilentPeer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, silent, until the test ends
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	info := ConnInfo{Transport: "tcp", IP: "127.0.0.1", ShellPort: port, IOPubPort: port, StdinPort: port, ControlPort: port, HBPort: port,
		Key: "k", SignatureScheme: "hmac-sha256"}
	for _, maxFrame := range []int64{0, 1 << 20} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		begun := time.Now()
		c, err := Dial(ctx, info, maxFrame, slog.New(slog.DiscardHandler))
		cancel()
		if err == nil {
			c.Close(nil)
			t.Fatalf("maxFrame %d: Dial to a peer that never greets succeeded", maxFrame)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("maxFrame %d: Dial's error %v does not say its context ended", maxFrame, err)
		}
		if el := time.Since(begun); el > 10*time.Second {
			t.Errorf("maxFrame %d: Dial gave up after %s", maxFrame, el)
		}
	}
}
