package httpapi

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// afterClose is a ResponseWriter that counts writes made after the handler
// (the test) said it returned.
type afterClose struct {
	h        http.Header
	returned atomic.Bool
	late     atomic.Int64
}

func (w *afterClose) Header() http.Header { return w.h }
func (w *afterClose) WriteHeader(int)     {}
func (w *afterClose) Flush()              { w.count() }
func (w *afterClose) Write(p []byte) (int, error) {
	w.count()
	return len(p), nil
}

func (w *afterClose) count() {
	if w.returned.Load() {
		w.late.Add(1)
	}
}

// A heartbeat that was waiting for the stream's lock while Close ran must
// not write: the handler has returned and net/http has recycled the
// response (spaced crashed on exactly that).
func TestSSEHeartbeatAfterClose(t *testing.T) {
	old := HeartbeatInterval
	HeartbeatInterval = 30 * time.Millisecond
	defer func() { HeartbeatInterval = old }()

	w := &afterClose{h: http.Header{}}
	s := newSSE(w)
	s.mu.Lock() // an event write in progress
	time.Sleep(5 * HeartbeatInterval)
	// Close as the handler's defer does, then return: the heartbeat is
	// blocked on the lock with its tick already taken.
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	w.returned.Store(true)
	s.mu.Unlock()
	time.Sleep(3 * HeartbeatInterval)
	// The heartbeat took the lock after us and has returned: locking once
	// more orders its reads of HeartbeatInterval before the deferred reset.
	s.mu.Lock()
	s.mu.Unlock()
	if n := w.late.Load(); n != 0 {
		t.Errorf("the heartbeat wrote %d times after the stream was closed", n)
	}
}
