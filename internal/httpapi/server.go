// Package httpapi is spaced's public REST + SSE API (api/openapi.yaml is
// the contract): handlers, authentication, the SSE writer and the mapping
// of error classes to HTTP statuses.
package httpapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/spacesandbox/space/api/native"

	"github.com/spacesandbox/space/internal/cluster"
	"github.com/spacesandbox/space/internal/egress/secrets"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/httpjson"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/template"
	"github.com/spacesandbox/space/internal/tenant"
	"github.com/spacesandbox/space/internal/volume"
)

// Server serves the API.
type Server struct {
	log         *slog.Logger
	lifecycle   Lifecycle
	changes     Changes
	checkpoints Checkpoints
	snapshots   Snapshots
	keys        Keys
	commands    Commands
	files       Files
	templates   *template.Service
	secrets     *secrets.Store
	code        CodeRunner
	desktop     Desktop
	volumes     *volume.Service
	tenants     *tenant.Service
	audit       *tenant.Audit
	// owners says whose a sandbox is (the sandbox service; a test's own).
	owners    tenant.SandboxOwners
	maxUpload int64
	metrics   http.Handler
	// metricsToken, if set, opens /metrics as the admin key does.
	metricsToken string
	telemetry    Telemetry
	cluster      Cluster
	pools        Pools
}

// Options are what the API serves.
type Options struct {
	// Logger receives the API's log lines (nil: discarded).
	Logger    *slog.Logger
	Sandboxes Sandboxes
	// Changes is the feed of sandboxes' state changes (sandbox.Feed).
	Changes Changes
	// Checkpoints pauses, resumes and forks sandboxes
	// (sandbox.Checkpoints).
	Checkpoints Checkpoints
	// Snapshots takes and keeps sandboxes' snapshots (sandbox.Snapshots).
	Snapshots Snapshots
	// Keys are the customer keys (sandbox.CustomerKeys; nil: none can be
	// loaded).
	Keys Keys
	// Commands and Files run commands in and move files of sandboxes
	// (sandbox.Commands, sandbox.Files).
	Commands  Commands
	Files     Files
	Templates *template.Service
	Secrets   *secrets.Store
	// Code runs cells in sandboxes' code interpreters.
	Code CodeRunner
	// Desktop drives desktop sandboxes' displays (nil: those routes
	// answer 503).
	Desktop Desktop
	Volumes *volume.Service
	// Tenants checks API keys and keeps tenants; Audit records every
	// state-changing call.
	Tenants *tenant.Service
	Audit   *tenant.Audit
	// MaxUpload bounds one file set upload.
	MaxUpload int64
	// Metrics serves /metrics to the admin key, or to MetricsToken (a
	// bearer token of its own for a Prometheus server) if that is set.
	Metrics      http.Handler
	MetricsToken string
	// Telemetry keeps sandboxes' metrics series and logs (nil: those
	// routes answer 503).
	Telemetry Telemetry
	// Cluster is cluster mode's node administration (nil with one
	// node: those routes answer 404).
	Cluster Cluster
	// Pools are the node's warm pools (nil: those routes answer 404).
	Pools Pools
}

// Cluster is what the node routes need of cluster mode (cluster.Drainer).
type Cluster interface {
	Self() string
	Members(ctx context.Context) ([]store.Member, error)
	Drain(ctx context.Context) (*cluster.DrainReport, error)
	Undrain(ctx context.Context) error
}

// New returns the API's handler.
func New(o Options) http.Handler {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Keys == nil {
		o.Keys = sandbox.NewCustomerKeys(nil, nil, o.Logger) // no object store: every key call says so
	}
	s := &Server{log: o.Logger, lifecycle: o.Sandboxes, changes: o.Changes, checkpoints: o.Checkpoints, snapshots: o.Snapshots, keys: o.Keys,
		commands: o.Commands, files: o.Files, templates: o.Templates, secrets: o.Secrets, code: o.Code, desktop: o.Desktop, volumes: o.Volumes,
		tenants: o.Tenants, audit: o.Audit, owners: o.Sandboxes, maxUpload: o.MaxUpload, metrics: o.Metrics, metricsToken: o.MetricsToken,
		telemetry: o.Telemetry, cluster: o.Cluster, pools: o.Pools}
	return s.routes()
}

// routes serves the generated router (native.HandlerWithOptions: every
// operation of api/openapi.yaml, its path and query parameters bound and
// typed) through this server's handlers, each behind its chain.
func (s *Server) routes() http.Handler {
	c, err := loadContract()
	if err != nil {
		panic(err) // the embedded spec is generated with the code: a test catches a broken one
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, errdefs.New(errdefs.ErrNotFound, "no route for %s %s", r.Method, r.URL.Path))
	})
	native.HandlerWithOptions(s, native.StdHTTPServerOptions{
		BaseRouter:       &chainMux{mux: mux, s: s, c: c},
		ErrorHandlerFunc: paramError,
	})
	return logRequests(recoverPanics(s.limitBodies(mux)), s.log)
}

// chainMux is the router's ServeMux: it puts each route's chain (from its
// operation in the spec) in front of the generated wrapper, so a request
// is authenticated before its parameters are looked at.
type chainMux struct {
	mux *http.ServeMux
	s   *Server
	c   *contract
}

func (m *chainMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	op := m.c.operation(pattern)
	if op == nil {
		panic("httpapi: the router registered " + pattern + ", which the spec does not have")
	}
	m.mux.Handle(pattern, m.s.chain(pattern, op, m.c.validate(pattern, op, http.HandlerFunc(h))))
}

func (m *chainMux) ServeHTTP(w http.ResponseWriter, r *http.Request) { m.mux.ServeHTTP(w, r) }

// chain wraps a route's handler: authentication (the request runs as its
// key's principal, and ends when the key is revoked), the audit log, the
// admin check of /v1/admin routes, the rate of creates, and the guard of
// routes that name a sandbox.
//
// What a route needs comes from its operation in the spec: "security: []"
// makes it public, "x-space-creates: true" says it starts sandboxes.
func (s *Server) chain(pattern string, op *openapi3.Operation, h http.Handler) http.Handler {
	_, path, _ := strings.Cut(pattern, " ")
	if op.Security != nil && len(*op.Security) == 0 {
		return h
	}
	if path == "/metrics" {
		return s.metricsGate(h)
	}
	if strings.HasPrefix(path, "/v1/sandboxes/{id}") {
		h = tenant.GuardSandbox(s.owners, h)
	}
	if creates, _ := op.Extensions["x-space-creates"].(bool); creates {
		h = s.tenants.LimitCreates(h, writeError)
	}
	if strings.HasPrefix(path, "/v1/admin/") {
		h = tenant.RequireAdmin(h, writeError)
	}
	if s.audit != nil {
		h = s.audit.Middleware(h)
	}
	return s.tenants.Authenticate(h, "missing API key: send Authorization: Bearer <key> or X-API-Key", writeError)
}

// metricsGate lets the admin key, or the metrics token if one is set,
// reach /metrics: it names every tenant and what each holds. A tenant's key
// gets 403, no key 401.
func (s *Server) metricsGate(next http.Handler) http.Handler {
	admin := s.tenants.Authenticate(tenant.RequireAdmin(next, writeError), "missing API key: send Authorization: Bearer <the admin key or SPACE_METRICS_TOKEN>", writeError)
	token := []byte(s.metricsToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(token) > 0 && subtle.ConstantTimeCompare([]byte(tenant.KeyOf(r)), token) == 1 {
			next.ServeHTTP(w, r)
			return
		}
		admin.ServeHTTP(w, r)
	})
}

func recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				writeError(w, r, fmt.Errorf("panic: %v", v))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func logRequests(next http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r.WithContext(httpjson.WithLogger(r.Context(), log)))
		log.Debug("http", "method", r.Method, "path", r.URL.Path, "status", rec.status, "ms", time.Since(start).Milliseconds())
	})
}

// Metrics serves /metrics (the chain lets only the admin key or the
// metrics token through).
func (s *Server) Metrics(w http.ResponseWriter, r *http.Request) { s.metrics.ServeHTTP(w, r) }

func (s *Server) Healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// maxJSONBody bounds request bodies that are JSON (uploads stream instead).
const maxJSONBody = 1 << 20

// decodeJSON reads a JSON body strictly: unknown fields, trailing data and
// wrong types are errors that say where. An empty body is allowed when
// optional.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	body := http.MaxBytesReader(w, r.Body, maxJSONBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if errors.Is(err, io.EOF) {
		if optional {
			return nil
		}
		return errdefs.New(errdefs.ErrInvalidArgument, "request body is empty; expected a JSON object")
	}
	if err != nil {
		var maxErr *http.MaxBytesError
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &maxErr):
			return errdefs.New(errdefs.ErrTooLarge, "request body is larger than %d bytes", maxErr.Limit)
		case errors.As(err, &syn):
			return errdefs.New(errdefs.ErrInvalidArgument, "malformed JSON at byte %d: %v", syn.Offset, syn)
		case errors.As(err, &typ):
			return errdefs.New(errdefs.ErrInvalidArgument, "field %q must be %s, not %s", typ.Field, typ.Type, typ.Value)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return errdefs.New(errdefs.ErrInvalidArgument, "malformed JSON: unexpected end of body")
		}
		return errdefs.New(errdefs.ErrInvalidArgument, "malformed JSON: %v", err)
	}
	if dec.More() {
		return errdefs.New(errdefs.ErrInvalidArgument, "malformed JSON: data after the object")
	}
	return nil
}

// SandboxOf answers the sandbox a native API request names (the {id} of a
// path under /v1/sandboxes/), "" for none. A cluster node forwards by it.
func SandboxOf(r *http.Request) string {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/sandboxes/")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	if id == "" || len(id) > 64 || strings.Trim(id, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
		return ""
	}
	return id
}

// BuildOf answers the template build r reads the log of or cancels (""
// for none): in a cluster those go to the build's node.
func BuildOf(r *http.Request) string {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/builds/")
	if !ok {
		return ""
	}
	id, what, _ := strings.Cut(rest, "/")
	if id == "" || len(id) > 64 || !(r.Method == http.MethodGet && what == "logs" || r.Method == http.MethodPost && what == "cancel") {
		return ""
	}
	return id
}

// IsCreate reports whether r creates a sandbox (a cluster places it).
func IsCreate(r *http.Request) bool {
	return r.Method == http.MethodPost && r.URL.Path == "/v1/sandboxes"
}

// CreateTemplate answers the template a create's body asks for ("base"
// when it names none or does not decode: the create itself says what is
// wrong).
func CreateTemplate(body []byte) string {
	var req struct {
		Template string `json:"template"`
	}
	if json.Unmarshal(body, &req) != nil || req.Template == "" {
		return "base"
	}
	return req.Template
}

// deref answers what p points at, the zero value for nil (an optional
// parameter the request left out).
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
