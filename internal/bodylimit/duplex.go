package bodylimit

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"time"
)

// FullDuplex lets a proxying handler's transport read the request body
// while the answer streams (HTTP/1.1 full duplex), and returns the request
// to forward and a function to call when the handler is done with it.
//
// A transport writes the request body from a goroutine of its own, which
// may still be reading it (the end of a chunked body, or a client still
// sending) when the upstream's answer is complete and the handler returns.
// The server then reads the connection for the next request while that
// read is in progress, and net/http panics ("invalid concurrent Body.Read
// call") and closes the connection: a client that reuses it for its next
// request (the E2B JS SDK's setTimeout after envd calls, seen in CI) fails
// with "fetch failed". The same happens to a body nothing read at all (a
// sandbox that could not be dialled). done sends the answer, waits for a
// read in progress and closes the body, at most duplexWait (a client that
// stopped sending is cut off by a read deadline, and the connection is
// closed after the answer), and refuses every later read.
func FullDuplex(w http.ResponseWriter, r *http.Request) (*http.Request, func()) {
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex() // harmless when unsupported (HTTP/2 is full duplex)
	if r.Body == nil || r.Body == http.NoBody {
		return r, func() {}
	}
	b := &heldBody{ReadCloser: r.Body}
	r2 := r.WithContext(r.Context()) // a shallow copy: only its Body differs
	r2.Body = b
	return r2, func() { b.stop(rc) }
}

// duplexWait bounds how long a handler's end waits for a read of its body
// in progress.
const duplexWait = 2 * time.Second

// errHandlerDone is what a read of a body gets once its handler returned.
var errHandlerDone = errors.New("the request's handler has returned: its body is no longer read")

// heldBody serialises reads of a request body with their end: mu is held
// for the whole of a Read.
type heldBody struct {
	io.ReadCloser
	mu   sync.Mutex
	done bool
	// eof: a read reached the body's end (nothing is left to wait for).
	eof bool
}

func (b *heldBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return 0, errHandlerDone
	}
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *heldBody) stop(rc *http.ResponseController) {
	if b.mu.TryLock() {
		if b.eof {
			// Read to its end (the usual case): nothing to wait for.
			b.done = true
			_ = b.ReadCloser.Close()
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
	}
	// The answer goes out first, for a client that waits for it before it
	// sends the rest of its body; then a read in progress ends with the
	// client's next bytes, or at the deadline, and the body is closed
	// (what is left of it read and dropped, as net/http does for a
	// handler that is not full duplex): left unread, a full-duplex body
	// makes the server panic reading the next request (golang/go#68560).
	_ = rc.Flush()
	_ = rc.SetReadDeadline(time.Now().Add(duplexWait))
	b.mu.Lock()
	b.done = true
	_ = b.ReadCloser.Close()
	b.mu.Unlock()
	_ = rc.SetReadDeadline(time.Time{})
}
