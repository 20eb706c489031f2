// Package bodylimit bounds request bodies at the edge, by route, before a
// handler sees them: a body whose declared length is over its route's limit
// is answered 413 before a byte of it is read, and one of unknown length
// (chunked) fails its reader at the limit. Both APIs keep one table each,
// so a route's limit is read in one place, not in its handler.
package bodylimit

import (
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Unbounded is the limit of a route whose body is bounded elsewhere: a
// file streamed to a sandbox's agent (the sandbox's disk refuses it) or to
// a volume (its filesystem's size does).
const Unbounded int64 = -1

// DefaultUpload is an upload route's limit when none is set (the default
// of SPACE_TEMPLATE_MAX_UPLOAD).
const DefaultUpload int64 = 4 << 30

// Drain bounds what is read and dropped of a refused body so that a client
// that writes its whole body before reading the answer gets the 413 rather
// than a reset connection. A body larger than this is not read at all: the
// connection is closed after the answer.
const Drain = 16 << 20

// drainTimeout bounds how long a refused client may take to send what is
// drained.
const drainTimeout = 10 * time.Second

// Limits is a per-route table of body limits: "METHOD /pattern" (as
// http.ServeMux spells them) to bytes; every other request gets the
// default.
type Limits struct {
	mux    *http.ServeMux
	limits map[string]int64
	def    int64
	// admit are checks of a declared length within the limit, by route
	// (the node's free disk for an upload).
	admit map[string]func(n int64) error
	// settings name the setting a route's limit is, for the refusal.
	settings map[string]string
}

// New returns the table: def for every route, except those in routes.
func New(def int64, routes map[string]int64) *Limits {
	l := &Limits{mux: http.NewServeMux(), limits: routes, def: def, admit: map[string]func(int64) error{}, settings: map[string]string{}}
	for pattern := range routes {
		l.mux.Handle(pattern, http.NotFoundHandler())
	}
	return l
}

// Admit adds a check of route pattern (one of New's) that a body's
// declared length must pass, within the limit, before a byte of it is
// read: whether the node has the disk for it, say. Its error is answered
// as the route's refusal is.
func (l *Limits) Admit(pattern string, check func(n int64) error) *Limits {
	l.admit[pattern] = check
	return l
}

// Setting names the setting route pattern's limit is (an environment
// variable), which its refusal then names.
func (l *Limits) Setting(pattern, name string) *Limits {
	l.settings[pattern] = name
	return l
}

// Of is r's limit (Unbounded or bytes).
func (l *Limits) Of(r *http.Request) int64 {
	n, _ := l.of(r)
	return n
}

func (l *Limits) of(r *http.Request) (int64, string) {
	if _, pattern := l.mux.Handler(r); pattern != "" {
		if n, ok := l.limits[pattern]; ok {
			return n, pattern
		}
	}
	return l.def, ""
}

// TooLarge is the error of a body over its limit (class ErrTooLarge,
// answered 413); it also matches *http.MaxBytesError, which handlers that
// read JSON look for.
func TooLarge(limit int64, setting string) error {
	if setting != "" {
		setting = " (" + setting + ")"
	}
	return errdefs.Wrap(errdefs.ErrTooLarge, &http.MaxBytesError{Limit: limit}, "the request body is larger than this route's limit of %d bytes%s", limit, setting)
}

// Wrap bounds the bodies next reads by l; refuse writes the 413 in the
// API's own error format.
func (l *Limits) Wrap(next http.Handler, refuse func(http.ResponseWriter, *http.Request, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit, pattern := l.of(r)
		var admitErr error
		if check := l.admit[pattern]; check != nil && r.ContentLength > 0 && r.ContentLength <= limit {
			admitErr = check(r.ContentLength)
		}
		switch {
		case limit == Unbounded || r.Body == nil || r.Body == http.NoBody:
			next.ServeHTTP(w, r)
		case r.ContentLength > limit:
			refuseDeclared(w, r, refuse, TooLarge(limit, l.settings[pattern]))
		case admitErr != nil:
			refuseDeclared(w, r, refuse, admitErr)
		case r.ContentLength >= 0:
			// Declared within the limit: the server reads no more than
			// the declared length.
			next.ServeHTTP(w, r)
		default:
			// Unknown length (chunked): the reader fails past the limit,
			// the handler answers its error (TooLarge), and a little more
			// is dropped for a client that writes before it reads.
			rc := http.NewResponseController(w)
			rc.EnableFullDuplex()
			body := &limited{r: r.Body, left: limit, limit: limit, setting: l.settings[pattern]}
			orig := r.Body
			r.Body = body
			next.ServeHTTP(w, r)
			if body.hit {
				rc.Flush()
				discard(rc, orig, Drain)
			}
			// A full-duplex body left open makes the server panic
			// reading the next request (golang/go#68560): closed here,
			// what is left of it read and dropped within a bound.
			rc.SetReadDeadline(time.Now().Add(drainTimeout))
			orig.Close()
			rc.SetReadDeadline(time.Time{})
		}
	})
}

// refuseDeclared answers err to a body refused on its declared length:
// nothing of it is read, but a small one is dropped after the answer so
// that a client that writes first, then reads, reads the refusal.
func refuseDeclared(w http.ResponseWriter, r *http.Request, refuse func(http.ResponseWriter, *http.Request, error), err error) {
	rc := http.NewResponseController(w)
	drain := r.ContentLength <= Drain && r.Header.Get("Expect") == ""
	if drain {
		rc.EnableFullDuplex()
	}
	refuse(w, r, err)
	if drain {
		rc.Flush()
		discard(rc, r.Body, r.ContentLength)
	}
}

// discard reads and drops at most n bytes of body, for a bounded time.
func discard(rc *http.ResponseController, body io.Reader, n int64) {
	rc.SetReadDeadline(time.Now().Add(drainTimeout))
	io.CopyN(io.Discard, body, n)
}

// limited is a body of unknown length that fails past limit.
type limited struct {
	r       io.ReadCloser
	left    int64
	limit   int64
	setting string
	hit     bool
}

func (b *limited) Read(p []byte) (int, error) {
	if b.hit {
		return 0, TooLarge(b.limit, b.setting)
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.r.Read(p)
	if int64(n) > b.left {
		b.hit = true
		return int(b.left), TooLarge(b.limit, b.setting)
	}
	b.left -= int64(n)
	return n, err
}

func (b *limited) Close() error { return b.r.Close() }

// IsTooLarge reports whether err is a body over its limit (this package's
// or http.MaxBytesReader's).
func IsTooLarge(err error) bool {
	var m *http.MaxBytesError
	return errors.As(err, &m)
}
