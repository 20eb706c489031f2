package console

import (
	"net/http"
	"strings"
)

// apiPrefix is where the page reaches the public API.
const apiPrefix = Prefix + "api"

// forward hands a call of the page to the public API, in-process, as the
// session's key: /ui/api/v1/sandboxes is the API's /v1/sandboxes. The
// response (JSON, SSE, a file, a WebSocket) goes back as the API writes it.
// Only the API's own routes are reachable: /v1/..., /metrics, /healthz.
func (c *Console) forward(w http.ResponseWriter, r *http.Request, s *session) {
	path := strings.TrimPrefix(r.URL.Path, apiPrefix)
	if !strings.HasPrefix(path, "/v1/") && path != "/metrics" && path != "/healthz" {
		writeError(w, http.StatusNotFound, "not_found", "the console forwards /v1/..., /metrics and /healthz only")
		return
	}
	out := r.Clone(r.Context())
	out.URL.Path = path
	out.URL.RawPath = ""
	if raw := r.URL.RawPath; raw != "" {
		out.URL.RawPath = strings.TrimPrefix(raw, apiPrefix)
	}
	out.RequestURI = out.URL.RequestURI()
	// The browser's credentials are the console's business; the API gets
	// the session's key and nothing else that could stand for one.
	for _, h := range []string{"Cookie", csrfHeader, "Authorization", "X-API-Key"} {
		out.Header.Del(h)
	}
	out.Header.Set("Authorization", "Bearer "+s.key)
	c.opts.API.ServeHTTP(w, out)
}
