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
func bodyLimits(maxUpload int64, templates Templates) *bodylimit.Limits {
	if maxUpload <= 0 {
		maxUpload = bodylimit.DefaultUpload
	}
	l := bodylimit.New(maxJSONBody, map[string]int64{
		"PUT /templates/{id}/files/{hash}/upload": maxUpload,
		"PUT /volumecontent/{id}/file":            bodylimit.Unbounded,
	}).Setting("PUT /templates/{id}/files/{hash}/upload", "SPACE_TEMPLATE_MAX_UPLOAD")
	// An upload the node's disk cannot take is refused (507) before it is
	// read, where the template service can say (template.Service can).
	if a, ok := templates.(interface{ AdmitUpload(n int64) error }); ok {
		l.Admit("PUT /templates/{id}/files/{hash}/upload", a.AdmitUpload)
	}
	return l
}

// limitBodies answers 413 to a body over its route's limit before a
// handler reads it (bodylimit.Limits.Wrap).
func (s *Server) limitBodies(next http.Handler) http.Handler {
	return bodyLimits(s.opts.MaxUpload, s.opts.Templates).Wrap(next, writeError)
}
