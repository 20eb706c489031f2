package e2bcompat

import (
	"net/http"

	"github.com/spacesandbox/space/internal/bodylimit"
)

// bodyLimits are the E2B API's request body limits: a JSON body is small;
// an uploaded file set is bounded by SPACE_TEMPLATE_MAX_UPLOAD; a file
// written into a volume streams to the volume's filesystem, whose size
// refuses it. Requests for a sandbox's envd (the proxy) stream to the
// sandbox, whose disk bounds them: they never reach this table.
func bodyLimits(maxUpload int64) *bodylimit.Limits {
	if maxUpload <= 0 {
		maxUpload = bodylimit.DefaultUpload
	}
	return bodylimit.New(maxJSONBody, map[string]int64{
		"PUT /templates/{id}/files/{hash}/upload": maxUpload,
		"PUT /volumecontent/{id}/file":            bodylimit.Unbounded,
	})
}

// limitBodies answers 413 to a body over its route's limit before a
// handler reads it (bodylimit.Limits.Wrap).
func (s *Server) limitBodies(next http.Handler) http.Handler {
	return bodyLimits(s.opts.MaxUpload).Wrap(next, writeError)
}
