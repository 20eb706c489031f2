package e2bcompat

import (
	"net"
	"net/http"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/tenant"
)

// route of the E2B control plane.
type apiRoute struct {
	pattern string
	public  bool
	handler http.HandlerFunc
}

// table lists every E2B control-plane route spaced answers. docs/e2b.md has
// the same list with what each does here.
// api/e2b-routes.txt lists them for the tests that must cover every route
// (TestRoutesFile keeps it current).
func (s *Server) table() []apiRoute { return s.routeTable(s.opts.Templates != nil) }

// routeTable is the table; without templates, the template routes answer
// 501.
func (s *Server) routeTable(templates bool) []apiRoute {
	routes := []apiRoute{
		{"GET /health", true, s.health},
		{"POST /sandboxes", false, s.create(false)},
		{"POST /v2/sandboxes", false, s.create(true)},
		{"GET /sandboxes", false, s.listV1},
		{"GET /v2/sandboxes", false, s.listV2},
		{"GET /sandboxes/metrics", false, s.batchMetrics},
		{"GET /sandboxes/{id}", false, s.detail},
		{"DELETE /sandboxes/{id}", false, s.kill},
		{"POST /sandboxes/{id}/timeout", false, s.setTimeout},
		{"POST /sandboxes/{id}/refreshes", false, s.refresh},
		{"POST /sandboxes/{id}/connect", false, s.connect(false)},
		{"POST /v2/sandboxes/{id}/connect", false, s.connect(true)},
		{"GET /sandboxes/{id}/metrics", false, s.metrics},
		{"PUT /sandboxes/{id}/network", false, s.updateNetwork},
		{"POST /sandboxes/{id}/pause", false, s.pause},
		{"POST /sandboxes/{id}/resume", false, s.resume},
		{"POST /sandboxes/{id}/fork", false, s.fork},
		{"POST /sandboxes/{id}/snapshots", false, s.createSnapshot},
		{"GET /snapshots", false, s.listSnapshots},
		// delete_snapshot calls DELETE /templates/{id} too.
		{"DELETE /templates/{id}", false, s.deleteTemplateOrSnapshot},
		{"GET /sandboxes/{id}/logs", false, s.logsV1},
		{"GET /v2/sandboxes/{id}/logs", false, s.logsV2},
	}
	routes = append(routes, s.volumeRoutes()...)
	routes = append(routes, s.webhookRoutes()...)
	tmpl := []apiRoute{
		{"POST /v3/templates", false, s.requestTemplateBuild},
		{"POST /v2/templates", false, s.requestTemplateBuild},
		{"GET /templates", false, s.listTemplates},
		{"GET /templates/{id}/files/{hash}", false, s.filesLink},
		// The upload link: signed, and the SDKs send no API key with it.
		{"PUT /templates/{id}/files/{hash}/upload", true, s.uploadFiles},
		{"POST /v2/templates/{id}/builds/{build}", false, s.startTemplateBuild},
		{"GET /templates/{id}/builds/{build}/status", false, s.buildStatus},
		// /templates/aliases/{alias} and /templates/{id}/tags overlap.
		{"GET /templates/{a}/{b}", false, s.aliasOrTags},
		{"POST /templates/tags", false, s.assignTags},
		{"DELETE /templates/tags", false, s.removeTags},
	}
	if !templates {
		for i := range tmpl {
			tmpl[i].handler = s.notYet("template builds are not served by this spaced (it has no template service)")
		}
	}
	routes = append(routes, tmpl...)
	return routes
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range s.table() {
		mux.Handle(rt.pattern, s.chain(rt))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, http.StatusNotFound, "no E2B route for "+r.Method+" "+r.URL.Path)
	})
	return s.limitBodies(mux)
}

// creates are the routes that start sandboxes (create, connect to a
// paused one, resume, fork): they draw on the tenant's rate of creates.
var creates = map[string]bool{
	"POST /sandboxes": true, "POST /v2/sandboxes": true, "POST /sandboxes/{id}/connect": true,
	"POST /v2/sandboxes/{id}/connect": true, "POST /sandboxes/{id}/resume": true, "POST /sandboxes/{id}/fork": true,
}

// chain wraps a route's handler as the native API's chain does: the API
// key's principal, the audit log, the rate of creates, and another
// tenant's sandbox answered as an unknown one. A public route checks its
// caller itself (a volume's token, a signed upload link) and names who it
// runs as to the audit log (tenant.RunsAs).
func (s *Server) chain(rt apiRoute) http.Handler {
	h := http.Handler(rt.handler)
	if rt.public {
		if s.opts.Audit != nil {
			h = s.opts.Audit.Public(h)
		}
		return h
	}
	_, path, _ := strings.Cut(rt.pattern, " ")
	if strings.HasPrefix(path, "/sandboxes/{id}") || strings.HasPrefix(path, "/v2/sandboxes/{id}") {
		h = tenant.GuardSandbox(s.opts.Sandboxes, h)
	}
	if creates[rt.pattern] {
		h = s.opts.Tenants.LimitCreates(h, writeError)
	}
	if s.opts.Audit != nil {
		h = s.opts.Audit.Middleware(h)
	}
	return s.opts.Tenants.Authenticate(h, "missing API key: send X-API-KEY", writeError)
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("Health check successful"))
}

func (s *Server) notYet(msg string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, http.StatusNotImplemented, msg)
	}
}

// domain is the sandboxes' domain as reported to clients.
func (s *Server) domain(r *http.Request) *string {
	if s.opts.Domain != "" {
		d := s.opts.Domain
		return &d
	}
	host, port, err := net.SplitHostPort(r.Host)
	if err != nil {
		host, port = r.Host, ""
	}
	if ip := net.ParseIP(strings.Trim(host, "[]")); ip != nil {
		if !ip.IsLoopback() {
			// <port>-<id>.<an IP> is no host name: let the SDK use its own domain.
			return nil
		}
		host = "localhost"
	}
	if host == "" {
		return nil
	}
	if port != "" {
		host = net.JoinHostPort(host, port)
	}
	return &host
}

// notRunning is the error for a sandbox that is not (or no longer) running.
func notRunning(id string) error {
	return errdefs.New(errdefs.ErrNotFound, "sandbox %q not found", id)
}
