package e2bcompat

import (
	"encoding/binary"
	"encoding/json"
	"net/http"
	"strings"
)

// streamWriter passes a proxied answer to the client and, when it is a
// Connect stream, passes it on whole envelopes at a time (a flags byte
// and a big-endian length, then that many bytes), holding back the start
// of one until the rest has come. So a stream cut off by its sandbox can
// always be ended properly, with an end-of-stream envelope carrying an
// error; a client that got a truncated body could only report a framing
// error. An envelope too large to hold goes through as it comes.
type streamWriter struct {
	http.ResponseWriter
	connect bool   // the answer is a Connect stream
	ended   bool   // its end-of-stream envelope has gone through
	held    []byte // the start of an envelope not yet whole
	through uint64 // bytes of a large envelope still to pass through
}

const (
	connectEndStreamFlag = 0x02
	// maxHeld is the largest envelope held back whole; the agent's events
	// are far smaller.
	maxHeld = 1 << 20
)

// Unwrap lets http.ResponseController reach Flush and Hijack.
func (w *streamWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *streamWriter) WriteHeader(status int) {
	w.connect = status == http.StatusOK && strings.HasPrefix(w.Header().Get("Content-Type"), "application/connect+")
	w.ResponseWriter.WriteHeader(status)
}

func (w *streamWriter) Write(b []byte) (int, error) {
	if !w.connect {
		return w.ResponseWriter.Write(b)
	}
	n := len(b)
	if w.through > 0 {
		k := min(uint64(len(b)), w.through)
		if _, err := w.ResponseWriter.Write(b[:k]); err != nil {
			return 0, err
		}
		w.through -= k
		b = b[k:]
	}
	w.held = append(w.held, b...)
	whole := 0
	for len(w.held)-whole >= 5 {
		size := 5 + uint64(binary.BigEndian.Uint32(w.held[whole+1:]))
		if have := uint64(len(w.held) - whole); have < size {
			if size > maxHeld {
				w.through = size - have
				whole = len(w.held)
			}
			break
		}
		if w.held[whole]&connectEndStreamFlag != 0 {
			w.ended = true
		}
		whole += int(size)
	}
	if whole > 0 {
		if _, err := w.ResponseWriter.Write(w.held[:whole]); err != nil {
			return 0, err
		}
		w.held = append(w.held[:0], w.held[whole:]...)
	}
	return n, nil
}

// endStream ends a Connect stream whose upstream broke with an unavailable
// error saying msg, and reports whether it could: not for another kind of
// answer, nor in the middle of an envelope too large to hold. A stream
// that had already ended needs nothing more.
func (w *streamWriter) endStream(msg string) bool {
	if !w.connect || w.through > 0 {
		return false
	}
	if w.ended {
		return true
	}
	// The end-of-stream envelope is JSON whatever the stream's codec.
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"code": "unavailable", "message": msg}})
	env := make([]byte, 5, 5+len(body))
	env[0] = connectEndStreamFlag
	binary.BigEndian.PutUint32(env[1:], uint32(len(body)))
	w.held = nil // the part of an envelope that never completed
	if _, err := w.ResponseWriter.Write(append(env, body...)); err != nil {
		return false
	}
	w.ended = true
	_ = http.NewResponseController(w.ResponseWriter).Flush()
	return true
}
