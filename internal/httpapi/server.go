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

	"github.com/spacesandbox/space/internal/cluster"
	"github.com/spacesandbox/space/internal/egress/secrets"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/template"
	"github.com/spacesandbox/space/internal/tenant"
	"github.com/spacesandbox/space/internal/volume"
)

// Server serves the API.
type Server struct {
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
	Code    CodeRunner
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
	if o.Keys == nil {
		o.Keys = sandbox.NewCustomerKeys(nil, nil) // no object store: every key call says so
	}
	s := &Server{lifecycle: o.Sandboxes, changes: o.Changes, checkpoints: o.Checkpoints, snapshots: o.Snapshots, keys: o.Keys,
		commands: o.Commands, files: o.Files, templates: o.Templates, secrets: o.Secrets, code: o.Code, volumes: o.Volumes,
		tenants: o.Tenants, audit: o.Audit, owners: o.Sandboxes, maxUpload: o.MaxUpload, metrics: o.Metrics, metricsToken: o.MetricsToken,
		telemetry: o.Telemetry, cluster: o.Cluster, pools: o.Pools}
	return s.routes()
}

// route is one entry of the route table, checked against the OpenAPI spec
// by a test.
type route struct {
	method, path string
	public       bool
	handler      http.HandlerFunc
	// creates: the route starts sandboxes (a create, resume or fork),
	// so it draws on its tenant's rate of creates.
	creates bool
}

func (s *Server) table() []route {
	return []route{
		{"GET", "/healthz", true, s.healthz, false},
		{"GET", "/metrics", false, s.metrics.ServeHTTP, false},
		{"POST", "/v1/sandboxes", false, s.createSandbox, true},
		{"GET", "/v1/sandboxes", false, s.listSandboxes, false},
		{"GET", "/v1/sandboxes/{id}", false, s.getSandbox, false},
		{"GET", "/v1/events", false, s.sandboxEvents, false},
		{"DELETE", "/v1/sandboxes/{id}", false, s.killSandbox, false},
		{"POST", "/v1/sandboxes/{id}/timeout", false, s.setTimeout, false},
		{"PUT", "/v1/sandboxes/{id}/network", false, s.setNetwork, false},
		{"GET", "/v1/sandboxes/{id}/metrics", false, s.sandboxMetrics, false},
		{"GET", "/v1/sandboxes/{id}/logs", false, s.sandboxLogs, false},
		{"POST", "/v1/sandboxes/{id}/commands", false, s.runCommand, false},
		{"GET", "/v1/sandboxes/{id}/commands", false, s.listCommands, false},
		{"GET", "/v1/sandboxes/{id}/commands/{pid}/events", false, s.commandEvents, false},
		{"POST", "/v1/sandboxes/{id}/commands/{pid}/stdin", false, s.sendStdin, false},
		{"POST", "/v1/sandboxes/{id}/commands/{pid}/signal", false, s.signalCommand, false},
		{"POST", "/v1/sandboxes/{id}/code", false, s.runCode, false},
		{"GET", "/v1/sandboxes/{id}/code", false, s.listCode, false},
		{"GET", "/v1/sandboxes/{id}/code/{execution}/events", false, s.codeEvents, false},
		{"POST", "/v1/sandboxes/{id}/code/{execution}/interrupt", false, s.interruptCode, false},
		{"GET", "/v1/sandboxes/{id}/contexts", false, s.listCodeContexts, false},
		{"POST", "/v1/sandboxes/{id}/contexts", false, s.createCodeContext, false},
		{"DELETE", "/v1/sandboxes/{id}/contexts/{context}", false, s.deleteCodeContext, false},
		{"POST", "/v1/sandboxes/{id}/contexts/{context}/restart", false, s.restartCodeContext, false},
		{"GET", "/v1/sandboxes/{id}/files", false, s.downloadFile, false},
		{"PUT", "/v1/sandboxes/{id}/files", false, s.uploadFile, false},
		{"DELETE", "/v1/sandboxes/{id}/files", false, s.removeFile, false},
		{"GET", "/v1/sandboxes/{id}/files/list", false, s.listFiles, false},
		{"GET", "/v1/sandboxes/{id}/files/stat", false, s.statFile, false},
		{"POST", "/v1/sandboxes/{id}/files/mkdir", false, s.makeDir, false},
		{"POST", "/v1/sandboxes/{id}/files/move", false, s.moveFile, false},
		{"GET", "/v1/sandboxes/{id}/files/watch", false, s.watchFiles, false},
		{"GET", "/v1/sandboxes/{id}/pty", false, s.openPTY, false},
		{"POST", "/v1/sandboxes/{id}/pause", false, s.pauseSandbox, false},
		{"POST", "/v1/sandboxes/{id}/resume", false, s.resumeSandbox, true},
		{"POST", "/v1/sandboxes/{id}/fork", false, s.forkSandbox, true},
		{"POST", "/v1/sandboxes/{id}/snapshots", false, s.takeSnapshot, false},
		{"GET", "/v1/sandboxes/{id}/snapshots", false, s.listSnapshots, false},
		{"GET", "/v1/snapshots", false, s.listSnapshots, false},
		{"GET", "/v1/snapshots/{snapshot}", false, s.getSnapshot, false},
		{"DELETE", "/v1/snapshots/{snapshot}", false, s.deleteSnapshot, false},
		{"GET", "/v1/keys", false, s.listKeys, false},
		{"PUT", "/v1/keys/{key}", false, s.putKey, false},
		{"POST", "/v1/keys/{key}/rotate", false, s.rotateKey, false},
		{"DELETE", "/v1/keys/{key}", false, s.deleteKey, false},
		{"GET", "/v1/secrets", false, s.listSecrets, false},
		{"PUT", "/v1/secrets/{name}", false, s.putSecret, false},
		{"DELETE", "/v1/secrets/{name}", false, s.deleteSecret, false},
		{"PUT", "/v1/files/{hash}", false, s.putFiles, false},
		{"GET", "/v1/files/{hash}", false, s.getFiles, false},
		{"POST", "/v1/builds", false, s.startBuild, false},
		{"GET", "/v1/builds", false, s.listBuilds, false},
		{"GET", "/v1/builds/{id}", false, s.getBuild, false},
		{"GET", "/v1/builds/{id}/logs", false, s.buildLogs, false},
		{"POST", "/v1/builds/{id}/cancel", false, s.cancelBuild, false},
		{"GET", "/v1/templates", false, s.listTemplates, false},
		{"GET", "/v1/templates/{name}", false, s.getTemplate, false},
		{"DELETE", "/v1/templates/{name}", false, s.deleteTemplate, false},
		{"PUT", "/v1/templates/{name}/tags/{tag}", false, s.setTag, false},
		{"DELETE", "/v1/templates/{name}/tags/{tag}", false, s.deleteTag, false},
		{"POST", "/v1/volumes", false, s.createVolume, false},
		{"GET", "/v1/volumes", false, s.listVolumes, false},
		{"GET", "/v1/volumes/{volume}", false, s.getVolume, false},
		{"DELETE", "/v1/volumes/{volume}", false, s.deleteVolume, false},
		{"GET", "/v1/volumes/{volume}/files", false, s.readVolumeFile, false},
		{"PUT", "/v1/volumes/{volume}/files", false, s.writeVolumeFile, false},
		{"DELETE", "/v1/volumes/{volume}/files", false, s.removeVolumeFile, false},
		{"GET", "/v1/volumes/{volume}/files/list", false, s.listVolumeFiles, false},
		{"GET", "/v1/volumes/{volume}/files/stat", false, s.statVolumeFile, false},
		{"POST", "/v1/volumes/{volume}/files/mkdir", false, s.makeVolumeDir, false},
		{"POST", "/v1/volumes/{volume}/backups", false, s.backupVolume, false},
		{"GET", "/v1/volume-backups", false, s.listVolumeBackups, false},
		{"GET", "/v1/volume-backups/{backup}", false, s.getVolumeBackup, false},
		{"DELETE", "/v1/volume-backups/{backup}", false, s.deleteVolumeBackup, false},
		{"GET", "/v1/usage", false, s.usage, false},
		{"POST", "/v1/admin/tenants", false, s.createTenant, false},
		{"GET", "/v1/admin/tenants", false, s.listTenants, false},
		{"GET", "/v1/admin/tenants/{tenant}", false, s.getTenant, false},
		{"PUT", "/v1/admin/tenants/{tenant}/quotas", false, s.setQuotas, false},
		{"POST", "/v1/admin/tenants/{tenant}/keys", false, s.issueKey, false},
		{"GET", "/v1/admin/tenants/{tenant}/keys", false, s.listAPIKeys, false},
		{"GET", "/v1/admin/keys", false, s.listAPIKeys, false},
		{"DELETE", "/v1/admin/keys/{key}", false, s.revokeKey, false},
		{"GET", "/v1/admin/audit", false, s.auditLog, false},
		{"GET", "/v1/admin/nodes", false, s.listNodes, false},
		{"POST", "/v1/admin/nodes/{node}/drain", false, s.drainNode, false},
		{"DELETE", "/v1/admin/nodes/{node}/drain", false, s.undrainNode, false},
		{"GET", "/v1/admin/pools", false, s.listPools, false},
		{"PUT", "/v1/admin/pools/{template}", false, s.setPool, false},
	}
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range s.table() {
		mux.Handle(rt.method+" "+rt.path, s.chain(rt))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, errdefs.New(errdefs.ErrNotFound, "no route for %s %s", r.Method, r.URL.Path))
	})
	return logRequests(recoverPanics(s.limitBodies(mux)))
}

// chain wraps a route's handler: authentication (the request runs as its
// key's principal, and ends when the key is revoked), the audit log, the
// admin check of /v1/admin routes, the rate of creates, and the guard of
// routes that name a sandbox.
func (s *Server) chain(rt route) http.Handler {
	h := http.Handler(rt.handler)
	if rt.public {
		return h
	}
	if rt.path == "/metrics" {
		return s.metricsGate(h)
	}
	if strings.HasPrefix(rt.path, "/v1/sandboxes/{id}") {
		h = tenant.GuardSandbox(s.owners, h)
	}
	if rt.creates {
		h = s.tenants.LimitCreates(h, writeError)
	}
	if strings.HasPrefix(rt.path, "/v1/admin/") {
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

func logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		slog.Debug("http", "method", r.Method, "path", r.URL.Path, "status", rec.status, "ms", time.Since(start).Milliseconds())
	})
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
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
