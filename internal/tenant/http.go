package tenant

import (
	"context"
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

// GuardSandbox wraps next, a route whose path value "id" is a sandbox: a
// sandbox of another tenant is answered as the API answers an unknown one
// (the handler answers those itself: a sandbox paused on another node is
// unknown here and still resumable, and its checkpoint names its tenant).
func GuardSandbox(owners SandboxOwners, next http.Handler, refuse func(http.ResponseWriter, *http.Request, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if owner, known := owners.Owner(r.Context(), id); known && !FromContext(r.Context()).Owns(owner) {
			refuse(w, r, errdefs.New(errdefs.ErrNotFound, "sandbox %q not found", id))
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
