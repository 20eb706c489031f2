package tenant

import (
	"bytes"
	"context"
	"crypto/rand"
	"net/http"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
)

// KeyOf returns the API key a request sends: X-API-Key (what the E2B SDKs
// send) or a bearer token.
func KeyOf(r *http.Request) string {
	if key := r.Header.Get("X-API-Key"); key != "" {
		return key
	}
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return strings.TrimSpace(tok)
	}
	return ""
}

// Authenticate wraps next so it runs as the principal of the request's
// key, for as long as the key stands; refuse answers a request without a
// valid key (missing says how to send one).
func (s *Service) Authenticate(next http.Handler, missing string, refuse func(http.ResponseWriter, *http.Request, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := KeyOf(r)
		if key == "" {
			refuse(w, r, errdefs.New(errdefs.ErrUnauthenticated, "%s", missing))
			return
		}
		p, err := s.Principal(key)
		if err != nil {
			refuse(w, r, err)
			return
		}
		ctx, release := s.Hold(r.Context(), p)
		defer release()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// SandboxOwners says who owns a sandbox (internal/sandbox's Service).
type SandboxOwners interface {
	// Owner returns the sandbox's tenant and whether it is known here.
	Owner(ctx context.Context, id string) (string, bool)
}

// GuardSandbox wraps next, a route whose path value "id" is a sandbox,
// so that a sandbox of another tenant is answered exactly as an unknown
// one: the handler serves the request for an id of the same shape that no
// sandbox has, and the answer names the id that was asked. Whatever the
// handler checks first (the body, a parameter, the sandbox), the answer
// cannot tell "another tenant's" from "none". Unknown ids go to the
// handler as they are (a sandbox paused on another node is unknown here
// and still resumable; its checkpoint names its tenant).
func GuardSandbox(owners SandboxOwners, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if owner, known := owners.Owner(r.Context(), id); known && !FromContext(r.Context()).Owns(owner) {
			stranger := unknownLike(id)
			r.SetPathValue("id", stranger)
			w = &renaming{ResponseWriter: w, from: []byte(stranger), to: []byte(id)}
		}
		next.ServeHTTP(w, r)
	})
}

// unknownLike is an id of id's shape (letters for letters, digits for
// digits) that, being random, no sandbox has.
func unknownLike(id string) string {
	const letters, digits = "abcdefghijklmnopqrstuvwxyz", "0123456789"
	b := []byte(id)
	r := make([]byte, len(b))
	rand.Read(r)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = letters[int(r[i])%len(letters)]
		case c >= 'A' && c <= 'Z':
			b[i] = letters[int(r[i])%len(letters)] - 'a' + 'A'
		case c >= '0' && c <= '9':
			b[i] = digits[int(r[i])%len(digits)]
		}
	}
	return string(b)
}

// renaming writes the answer with one id put back for another (of the
// same length, so no length changes).
type renaming struct {
	http.ResponseWriter
	from, to []byte
}

func (w *renaming) Write(b []byte) (int, error) {
	return w.ResponseWriter.Write(bytes.ReplaceAll(b, w.from, w.to))
}

func (w *renaming) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *renaming) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// LimitCreates wraps next, a route that starts a sandbox (a create,
// resume or fork), so it draws on its tenant's rate of creates.
func (s *Service) LimitCreates(next http.Handler, refuse func(http.ResponseWriter, *http.Request, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.AllowCreate(FromContext(r.Context()), 1); err != nil {
			refuse(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// RequireAdmin wraps next so only the admin key reaches it.
func RequireAdmin(next http.Handler, refuse func(http.ResponseWriter, *http.Request, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !FromContext(r.Context()).Admin {
			refuse(w, r, errdefs.New(errdefs.ErrPermissionDenied, "this route needs the admin key"))
			return
		}
		next.ServeHTTP(w, r)
	})
}
