package interpreter

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Who may do what on /contexts (doc.go, Auth, says why): a request with
// the sandbox's token (or the one derived from it) is the sandbox's
// owner, and so is every request when auth is off; a request without
// one is anonymous. Anonymous requests see, restart and delete only the
// contexts anonymous requests made, and make at most
// MaxAnonymousContexts; everyone together at most MaxContexts.

// Idle kernels hold about 50 MiB (ipykernel) to 200 MiB (Deno) each, and
// gVisor kills the whole sandbox when it passes its memory. The caps keep
// what anyone can start within it.
const (
	contextShare         = 128 << 20 // of the sandbox's memory per context
	anonymousKernelBytes = 200 << 20 // the largest idle kernel, Deno's
)

// ContextLimits are the default caps for a sandbox with total bytes of
// memory (0: unknown): a context per 128 MiB (4 to 64; 8 in 1 GiB), and
// as many anonymous ones as idle Deno kernels fit in half the memory (at
// least 1, at most half the others; 2 in 1 GiB).
func ContextLimits(total uint64) (all, anonymous int) {
	if total == 0 {
		return 8, 4
	}
	all = int(min(max(total/contextShare, 4), 64))
	anonymous = int(min(max(total/2/anonymousKernelBytes, 1), uint64(all/2)))
	return all, anonymous
}

// contextCaller checks r's token for a /contexts route and says whether
// it is anonymous. A wrong token is an error, and so is none when
// RequireContextToken is set.
func (s *Server) contextCaller(r *http.Request) (anonymous bool, err error) {
	if _, _, err := s.checkToken(r, s.cfg.RequireContextToken); err != nil {
		return false, err
	}
	return s.state != nil && r.Header.Get("X-Access-Token") == "", nil
}

// visibleTo says whether a caller (anonymous or not) may see and act on c.
func (c *kernelContext) visibleTo(anonymous bool) bool {
	return !anonymous || c.anonymous
}

// capacityError is a new context refused by a cap.
type capacityError struct{ msg string }

func (e *capacityError) Error() string { return e.msg }

// reserve holds a place for a new context under the caps until release,
// or says which cap it would pass. s.mu is held.
func (s *Server) reserve(anonymous bool) error {
	if n := len(s.contexts) + s.starting; n >= s.cfg.MaxContexts {
		return &capacityError{fmt.Sprintf(
			"this code interpreter already has %d contexts, its limit: delete one (DELETE /contexts/{id}) before creating another", n)}
	}
	if anonymous {
		n := s.startingAnonymous
		for _, c := range s.contexts {
			if c.anonymous {
				n++
			}
		}
		if n >= s.cfg.MaxAnonymousContexts {
			return &capacityError{fmt.Sprintf(
				"this code interpreter already has %d contexts made without an access token, its limit: delete one, or send X-Access-Token", n)}
		}
		s.startingAnonymous++
	}
	s.starting++
	return nil
}

// release gives back a place reserve held. s.mu is held.
func (s *Server) release(anonymous bool) {
	s.starting--
	if anonymous {
		s.startingAnonymous--
	}
}

// writeError answers status with a JSON body {"error":{"code","message"}},
// the shape of spaced's API errors.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}
