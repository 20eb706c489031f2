package httpapi

import (
	"net/http"

	"github.com/spacesandbox/space/internal/bodylimit"
	"github.com/spacesandbox/space/internal/template"
)

// bodyLimits are the native API's request body limits: a JSON body is
// small; an uploaded file set is bounded by SPACE_TEMPLATE_MAX_UPLOAD; a
// file written into a sandbox or a volume streams through spaced to a
// filesystem whose own size refuses it (the sandbox's disk, the volume's
// image), so spaced sets no bound of its own there.
func bodyLimits(maxUpload int64, templates *template.Service) *bodylimit.Limits {
	if maxUpload <= 0 {
		maxUpload = bodylimit.DefaultUpload
	}
	l := bodylimit.New(maxJSONBody, map[string]int64{
		"PUT /v1/files/{hash}":           maxUpload,
		"PUT /v1/sandboxes/{id}/files":   bodylimit.Unbounded,
		"PUT /v1/volumes/{volume}/files": bodylimit.Unbounded,
	}).Setting("PUT /v1/files/{hash}", "SPACE_TEMPLATE_MAX_UPLOAD")
	if templates != nil {
		// An upload the node's disk cannot take is refused (507) before
		// it is read.
		l.Admit("PUT /v1/files/{hash}", templates.AdmitUpload)
	}
	return l
}

// limitBodies answers 413 to a body over its route's limit before a
// handler reads it (bodylimit.Limits.Wrap).
func (s *Server) limitBodies(next http.Handler) http.Handler {
	return bodyLimits(s.maxUpload, s.templates).Wrap(next, writeError)
}
