package tenant

import (
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
