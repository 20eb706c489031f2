// Package httpapi is spaced's public REST + SSE API (api/openapi.yaml is
// the contract): handlers, authentication, the SSE writer and the mapping
// of error classes to HTTP statuses.
package httpapi

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/egress/secrets"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/template"
	"github.com/spacesandbox/space/internal/volume"
)

// Server serves the API.
type Server struct {
	sandboxes *sandbox.Service
	templates *template.Service
	secrets   *secrets.Store
	code      CodeRunner
	volumes   *volume.Service
	apiKey    string
	maxUpload int64
	metrics   http.Handler
	telemetry *sandbox.Telemetry
}

// Options are what the API serves.
type Options struct {
	Sandboxes *sandbox.Service
	Templates *template.Service
	Secrets   *secrets.Store
	// Code runs cells in sandboxes' code interpreters.
	Code    CodeRunner
	Volumes *volume.Service
	APIKey  string
	// MaxUpload bounds one file set upload.
	MaxUpload int64
	Metrics   http.Handler
	// Telemetry keeps sandboxes' metrics series and logs (nil: those
	// routes answer 503).
	Telemetry *sandbox.Telemetry
}

// New returns the API's handler.
func New(o Options) http.Handler {
	s := &Server{sandboxes: o.Sandboxes, templates: o.Templates, secrets: o.Secrets, code: o.Code, volumes: o.Volumes,
		apiKey: o.APIKey, maxUpload: o.MaxUpload, metrics: o.Metrics, telemetry: o.Telemetry}
	return s.routes()
}

// route is one entry of the route table, checked against the OpenAPI spec
// by a test.
type route struct {
	method, path string
	public       bool
	handler      http.HandlerFunc
}

func (s *Server) table() []route {
	return []route{
		{"GET", "/healthz", true, s.healthz},
		{"GET", "/metrics", true, s.metrics.ServeHTTP},
		{"POST", "/v1/sandboxes", false, s.createSandbox},
		{"GET", "/v1/sandboxes", false, s.listSandboxes},
		{"GET", "/v1/sandboxes/{id}", false, s.getSandbox},
		{"GET", "/v1/events", false, s.sandboxEvents},
		{"DELETE", "/v1/sandboxes/{id}", false, s.killSandbox},
		{"POST", "/v1/sandboxes/{id}/timeout", false, s.setTimeout},
		{"PUT", "/v1/sandboxes/{id}/network", false, s.setNetwork},
		{"GET", "/v1/sandboxes/{id}/metrics", false, s.sandboxMetrics},
		{"GET", "/v1/sandboxes/{id}/logs", false, s.sandboxLogs},
		{"POST", "/v1/sandboxes/{id}/commands", false, s.runCommand},
		{"GET", "/v1/sandboxes/{id}/commands", false, s.listCommands},
		{"GET", "/v1/sandboxes/{id}/commands/{pid}/events", false, s.commandEvents},
		{"POST", "/v1/sandboxes/{id}/commands/{pid}/stdin", false, s.sendStdin},
		{"POST", "/v1/sandboxes/{id}/commands/{pid}/signal", false, s.signalCommand},
		{"POST", "/v1/sandboxes/{id}/code", false, s.runCode},
		{"GET", "/v1/sandboxes/{id}/code", false, s.listCode},
		{"GET", "/v1/sandboxes/{id}/code/{execution}/events", false, s.codeEvents},
		{"POST", "/v1/sandboxes/{id}/code/{execution}/interrupt", false, s.interruptCode},
		{"GET", "/v1/sandboxes/{id}/contexts", false, s.listCodeContexts},
		{"POST", "/v1/sandboxes/{id}/contexts", false, s.createCodeContext},
		{"DELETE", "/v1/sandboxes/{id}/contexts/{context}", false, s.deleteCodeContext},
		{"POST", "/v1/sandboxes/{id}/contexts/{context}/restart", false, s.restartCodeContext},
		{"GET", "/v1/sandboxes/{id}/files", false, s.downloadFile},
		{"PUT", "/v1/sandboxes/{id}/files", false, s.uploadFile},
		{"DELETE", "/v1/sandboxes/{id}/files", false, s.removeFile},
		{"GET", "/v1/sandboxes/{id}/files/list", false, s.listFiles},
		{"GET", "/v1/sandboxes/{id}/files/stat", false, s.statFile},
		{"POST", "/v1/sandboxes/{id}/files/mkdir", false, s.makeDir},
		{"POST", "/v1/sandboxes/{id}/files/move", false, s.moveFile},
		{"GET", "/v1/sandboxes/{id}/files/watch", false, s.watchFiles},
		{"GET", "/v1/sandboxes/{id}/pty", false, s.openPTY},
		{"POST", "/v1/sandboxes/{id}/pause", false, s.pauseSandbox},
		{"POST", "/v1/sandboxes/{id}/resume", false, s.resumeSandbox},
		{"POST", "/v1/sandboxes/{id}/fork", false, s.forkSandbox},
		{"POST", "/v1/sandboxes/{id}/snapshots", false, s.takeSnapshot},
		{"GET", "/v1/sandboxes/{id}/snapshots", false, s.listSnapshots},
		{"GET", "/v1/snapshots", false, s.listSnapshots},
		{"GET", "/v1/snapshots/{snapshot}", false, s.getSnapshot},
		{"DELETE", "/v1/snapshots/{snapshot}", false, s.deleteSnapshot},
		{"GET", "/v1/keys", false, s.listKeys},
		{"PUT", "/v1/keys/{key}", false, s.putKey},
		{"POST", "/v1/keys/{key}/rotate", false, s.rotateKey},
		{"DELETE", "/v1/keys/{key}", false, s.deleteKey},
		{"GET", "/v1/secrets", false, s.listSecrets},
		{"PUT", "/v1/secrets/{name}", false, s.putSecret},
		{"DELETE", "/v1/secrets/{name}", false, s.deleteSecret},
		{"PUT", "/v1/files/{hash}", false, s.putFiles},
		{"GET", "/v1/files/{hash}", false, s.getFiles},
		{"POST", "/v1/builds", false, s.startBuild},
		{"GET", "/v1/builds", false, s.listBuilds},
		{"GET", "/v1/builds/{id}", false, s.getBuild},
		{"GET", "/v1/builds/{id}/logs", false, s.buildLogs},
		{"POST", "/v1/builds/{id}/cancel", false, s.cancelBuild},
		{"GET", "/v1/templates", false, s.listTemplates},
		{"GET", "/v1/templates/{name}", false, s.getTemplate},
		{"DELETE", "/v1/templates/{name}", false, s.deleteTemplate},
		{"PUT", "/v1/templates/{name}/tags/{tag}", false, s.setTag},
		{"DELETE", "/v1/templates/{name}/tags/{tag}", false, s.deleteTag},
		{"POST", "/v1/volumes", false, s.createVolume},
		{"GET", "/v1/volumes", false, s.listVolumes},
		{"GET", "/v1/volumes/{volume}", false, s.getVolume},
		{"DELETE", "/v1/volumes/{volume}", false, s.deleteVolume},
		{"GET", "/v1/volumes/{volume}/files", false, s.readVolumeFile},
		{"PUT", "/v1/volumes/{volume}/files", false, s.writeVolumeFile},
		{"DELETE", "/v1/volumes/{volume}/files", false, s.removeVolumeFile},
		{"GET", "/v1/volumes/{volume}/files/list", false, s.listVolumeFiles},
		{"GET", "/v1/volumes/{volume}/files/stat", false, s.statVolumeFile},
		{"POST", "/v1/volumes/{volume}/files/mkdir", false, s.makeVolumeDir},
		{"POST", "/v1/volumes/{volume}/backups", false, s.backupVolume},
		{"GET", "/v1/volume-backups", false, s.listVolumeBackups},
		{"GET", "/v1/volume-backups/{backup}", false, s.getVolumeBackup},
		{"DELETE", "/v1/volume-backups/{backup}", false, s.deleteVolumeBackup},
	}
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range s.table() {
		h := http.Handler(rt.handler)
		if !rt.public {
			h = s.authenticate(h)
		}
		mux.Handle(rt.method+" "+rt.path, h)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, errdefs.New(errdefs.ErrNotFound, "no route for %s %s", r.Method, r.URL.Path))
	})
	return logRequests(recoverPanics(mux))
}

// authenticate accepts the API key as a bearer token or in X-API-Key.
func (s *Server) authenticate(next http.Handler) http.Handler {
	want := []byte(s.apiKey)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-API-Key")
		if auth := r.Header.Get("Authorization"); key == "" && auth != "" {
			if tok, ok := strings.CutPrefix(auth, "Bearer "); ok {
				key = strings.TrimSpace(tok)
			}
		}
		if key == "" {
			writeError(w, r, errdefs.New(errdefs.ErrUnauthenticated, "missing API key: send Authorization: Bearer <key> or X-API-Key"))
			return
		}
		if subtle.ConstantTimeCompare([]byte(key), want) != 1 {
			writeError(w, r, errdefs.New(errdefs.ErrUnauthenticated, "invalid API key"))
			return
		}
		next.ServeHTTP(w, r)
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

// agent returns the connection to the agent of the sandbox named in the
// path, or answers the error (unknown or not running) and returns false.
func (s *Server) agent(w http.ResponseWriter, r *http.Request) (*sandbox.AgentConn, bool) {
	agent, err := s.sandboxes.Agent(r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return nil, false
	}
	return agent, true
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
			return errdefs.New(errdefs.ErrInvalidArgument, "request body is larger than %d bytes", maxJSONBody)
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
