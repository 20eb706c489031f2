package interpreter

import (
	"bytes"
	"log/slog"
	"sync"
	"sync/atomic"
)

// lineLogger logs what a kernel process writes to its stdout and stderr
// (ipykernel's own warnings; user output goes over iopub), a line at a
// time, each cut to maxLogLine.
type lineLogger struct {
	log *slog.Logger
	oom *atomic.Bool // set when a line says an allocation failed for good (oom.go); nil: not looked for
	// portTaken is closed when a line says a port the kernel binds is
	// taken (its connection file's ports were free when picked, but
	// another process may bind one before the kernel does); nil: not
	// looked for.
	portTaken chan struct{}
	mu        sync.Mutex
	buf       []byte
	last      string // the last line that was not blank
}

const maxLogLine = 2048

func (w *lineLogger) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.emit(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > maxLogLine {
		w.emit(w.buf)
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

func (w *lineLogger) emit(line []byte) {
	if len(line) > maxLogLine {
		line = line[:maxLogLine]
	}
	if len(bytes.TrimSpace(line)) > 0 {
		w.log.Info("kernel output", "line", string(line))
		w.last = string(line)
	}
	if w.oom != nil && saysOutOfMemory(line) {
		w.oom.Store(true)
	}
	if w.portTaken != nil && bytes.Contains(line, addrInUse) {
		select {
		case <-w.portTaken: // said before
		default:
			close(w.portTaken)
		}
	}
}

// addrInUse is how JJava (ZMQException), Deno and IRkernel's ZeroMQ say
// a port they bind is taken: strerror(EADDRINUSE).
var addrInUse = []byte("Address already in use")

// lastLine is the last line the kernel wrote that was not blank, cut to
// maxLogLine ("": none).
func (w *lineLogger) lastLine() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(bytes.TrimSpace(w.buf)) > 0 {
		return string(w.buf)
	}
	return w.last
}
