package e2bcompat

import (
	"encoding/binary"
	"encoding/json"
	"net/http"
	"strings"
)

// streamWriter passes a proxied answer to the client and, when it is a
// Connect stream, follows its envelopes (a flags byte and a big-endian
// length, then that many bytes), so that a stream cut off by its sandbox
// can still be ended properly: with an end-of-stream envelope carrying an
// error, appended at an envelope boundary. Without it the client would see
// a truncated body and could only report a framing error.
type streamWriter struct {
	http.ResponseWriter
	connect bool // the answer is a Connect stream
	ended   bool // its end-of-stream envelope has gone through
	prefix  [5]byte
	have    int    // bytes of the current envelope's prefix seen
	left    uint32 // bytes of its body still to come
}

// Unwrap lets http.ResponseController reach Flush and Hijack.
func (w *streamWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *streamWriter) WriteHeader(status int) {
	w.connect = status == http.StatusOK && strings.HasPrefix(w.Header().Get("Content-Type"), "application/connect+")
	w.ResponseWriter.WriteHeader(status)
}

func (w *streamWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	if w.connect {
		w.follow(b[:n])
	}
	return n, err
}

// follow moves along the envelopes in b.
func (w *streamWriter) follow(b []byte) {
	for len(b) > 0 {
		if w.have < len(w.prefix) {
			c := copy(w.prefix[w.have:], b)
			w.have += c
			b = b[c:]
			if w.have < len(w.prefix) {
				return
			}
			w.left = binary.BigEndian.Uint32(w.prefix[1:])
		}
		c := min(uint32(len(b)), w.left)
		w.left -= c
		b = b[c:]
		if w.left == 0 {
			if w.prefix[0]&connectEndStreamFlag != 0 {
				w.ended = true
			}
			w.have = 0
		}
	}
}

const connectEndStreamFlag = 0x02

// endStream ends a Connect stream whose upstream broke with an unavailable
// error saying msg, and reports whether it could: not for another kind of
// answer, nor in the middle of an envelope. A stream that had already
// ended needs nothing more.
func (w *streamWriter) endStream(msg string) bool {
	if !w.connect || w.have != 0 {
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
	if _, err := w.ResponseWriter.Write(append(env, body...)); err != nil {
		return false
	}
	w.ended = true
	_ = http.NewResponseController(w.ResponseWriter).Flush()
	return true
}
