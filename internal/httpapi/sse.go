package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// HeartbeatInterval is how often a quiet SSE stream gets a comment line.
var HeartbeatInterval = 15 * time.Second

// sseWriter writes server-sent events, flushing each one, and sends a
// heartbeat comment whenever the stream has been quiet for a while.
type sseWriter struct {
	mu      sync.Mutex
	w       io.Writer
	flusher http.Flusher
	rc      *http.ResponseController
	last    time.Time
	stop    chan struct{}
}

func newSSE(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	s := &sseWriter{w: w, flusher: f, rc: http.NewResponseController(w), last: time.Now(), stop: make(chan struct{})}
	s.flush()
	go s.heartbeats()
	return s
}

// writeTimeout drops a client that stops reading: a stream must not hold a
// handler (and the agent stream behind it) forever.
const writeTimeout = 30 * time.Second

func (s *sseWriter) write(p string) error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := io.WriteString(s.w, p)
	return err
}

func (s *sseWriter) flush() {
	if s.flusher != nil {
		s.flusher.Flush()
	}
}

func (s *sseWriter) heartbeats() {
	t := time.NewTicker(HeartbeatInterval / 3)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.mu.Lock()
			select {
			case <-s.stop:
				// Close ran while we waited for the lock: the handler may
				// have returned, and its response must not be touched.
				s.mu.Unlock()
				return
			default:
			}
			if time.Since(s.last) >= HeartbeatInterval {
				if err := s.write(": keepalive\n\n"); err == nil {
					s.flush()
				}
				s.last = time.Now()
			}
			s.mu.Unlock()
		}
	}
}

// Event writes one event. id 0 means no id line. data must be one line
// (JSON is), but newlines are handled anyway.
func (s *sseWriter) Event(id uint64, event string, data []byte) error {
	var b strings.Builder
	if id > 0 {
		fmt.Fprintf(&b, "id: %d\n", id)
	}
	fmt.Fprintf(&b, "event: %s\n", event)
	for _, line := range strings.Split(string(data), "\n") {
		fmt.Fprintf(&b, "data: %s\n", line)
	}
	b.WriteString("\n")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = time.Now()
	if err := s.write(b.String()); err != nil {
		return err
	}
	s.flush()
	return nil
}

// Close stops the heartbeats; the handler returning ends the response.
func (s *sseWriter) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
}
