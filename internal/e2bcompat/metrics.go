package e2bcompat

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/tenant"
)

// Telemetry is what the E2B layer needs of spaced's per-sandbox metrics
// series and logs (sandbox.Telemetry).
type Telemetry interface {
	Metrics(ctx context.Context, id string, from, to time.Time) ([]sandbox.MetricSample, error)
	LatestMetrics(ids []string) map[string]sandbox.MetricSample
	Logs(ctx context.Context, id string, q sandbox.LogQuery) ([]sandbox.LogEntry, error)
}

func (s *Server) telemetry(w http.ResponseWriter) bool {
	if s.opts.Telemetry == nil {
		writeStatus(w, http.StatusNotImplemented, "sandbox metrics and logs are not kept by this spaced")
		return false
	}
	return true
}

// metrics is GET /sandboxes/{id}/metrics?start=&end= (unix seconds): the
// sandbox's series as spaced sampled it, oldest first.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	if !s.telemetry(w) {
		return
	}
	q := r.URL.Query()
	start, err := unixParam(q.Get("start"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	end, err := unixParam(q.Get("end"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	var from, to time.Time
	if start > 0 {
		from = time.Unix(start, 0)
	}
	if end > 0 {
		to = time.Unix(end, 0).Add(time.Second - time.Nanosecond) // the whole second
	}
	ms, err := s.opts.Telemetry.Metrics(r.Context(), r.PathValue("id"), from, to)
	if err != nil {
		writeError(w, r, notFoundAsE2B(r.PathValue("id"), err))
		return
	}
	out := make([]metricJSON, 0, len(ms))
	for _, m := range ms {
		out = append(out, toMetric(m))
	}
	writeJSON(w, http.StatusOK, out)
}

// batchMetrics is GET /sandboxes/metrics?sandbox_ids=a,b: the latest sample
// of each sandbox named that has one.
func (s *Server) batchMetrics(w http.ResponseWriter, r *http.Request) {
	if !s.telemetry(w) {
		return
	}
	ids := splitList(r.URL.Query()["sandbox_ids"])
	if len(ids) == 0 || len(ids) > 100 {
		writeStatus(w, http.StatusBadRequest, "sandbox_ids must name 1 to 100 sandboxes")
		return
	}
	// Another tenant's sandboxes are left out, as unknown ones are.
	p := tenant.FromContext(r.Context())
	var own []string
	for _, id := range ids {
		if owner, known := s.opts.Sandboxes.Owner(r.Context(), id); known && p.Owns(owner) {
			own = append(own, id)
		}
	}
	out := map[string]metricJSON{}
	for id, m := range s.opts.Telemetry.LatestMetrics(own) {
		out[id] = toMetric(m)
	}
	writeJSON(w, http.StatusOK, map[string]any{"sandboxes": out})
}

func toMetric(m sandbox.MetricSample) metricJSON {
	return metricJSON{
		Timestamp: m.Time, TimestampUnix: m.Time.Unix(),
		CPUCount: m.CPUCount, CPUUsedPct: m.CPUUsedPct,
		MemUsed: m.MemUsed, MemTotal: m.MemTotal, MemCache: m.MemCache,
		DiskUsed: m.DiskUsed, DiskTotal: m.DiskTotal,
	}
}

// sandboxLogJSON is SandboxLogEntry.
type sandboxLogJSON struct {
	Timestamp time.Time         `json:"timestamp"`
	Level     string            `json:"level"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields"`
}

// logLineJSON is SandboxLog (v1): the line is the entry as one JSON object,
// as envd writes its log lines.
type logLineJSON struct {
	Timestamp time.Time `json:"timestamp"`
	Line      string    `json:"line"`
}

func toSandboxLog(e sandbox.LogEntry) sandboxLogJSON {
	f := e.Fields
	if f == nil {
		f = map[string]string{}
	}
	return sandboxLogJSON{Timestamp: e.Time, Level: e.Level, Message: e.Message, Fields: f}
}

// logsV2 is GET /v2/sandboxes/{id}/logs?cursor=&limit=&direction=&level=&search=:
// cursor in unix milliseconds; limit 1-1000 (default 1000); direction
// forward (default: oldest first, from the cursor) or backward (newest
// first, up to the cursor); level the lowest one returned.
func (s *Server) logsV2(w http.ResponseWriter, r *http.Request) {
	if !s.telemetry(w) {
		return
	}
	q := r.URL.Query()
	lq, err := logQuery(q.Get("cursor"), q.Get("limit"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	switch d := q.Get("direction"); d {
	case "", "forward":
	case "backward":
		lq.Backward = true
	default:
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "direction must be forward or backward, not %q", d))
		return
	}
	switch l := q.Get("level"); l {
	case "", "debug", "info", "warn", "error":
		lq.Level = l
	default:
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "level must be debug, info, warn or error, not %q", l))
		return
	}
	lq.Search = q.Get("search")
	entries, err := s.opts.Telemetry.Logs(r.Context(), r.PathValue("id"), lq)
	if err != nil {
		writeError(w, r, notFoundAsE2B(r.PathValue("id"), err))
		return
	}
	out := make([]sandboxLogJSON, 0, len(entries))
	for _, e := range entries {
		out = append(out, toSandboxLog(e))
	}
	writeJSON(w, http.StatusOK, map[string]any{"logs": out})
}

// logsV1 is GET /sandboxes/{id}/logs?start=&limit= (start in unix
// milliseconds): the same lines oldest first, both as JSON lines and as
// structured entries.
func (s *Server) logsV1(w http.ResponseWriter, r *http.Request) {
	if !s.telemetry(w) {
		return
	}
	q := r.URL.Query()
	lq, err := logQuery(q.Get("start"), q.Get("limit"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	entries, err := s.opts.Telemetry.Logs(r.Context(), r.PathValue("id"), lq)
	if err != nil {
		writeError(w, r, notFoundAsE2B(r.PathValue("id"), err))
		return
	}
	lines := make([]logLineJSON, 0, len(entries))
	structured := make([]sandboxLogJSON, 0, len(entries))
	for _, e := range entries {
		obj := map[string]string{}
		for k, v := range e.Fields {
			obj[k] = v
		}
		obj["level"], obj["message"], obj["time"] = e.Level, e.Message, e.Time.Format(time.RFC3339Nano)
		line, _ := json.Marshal(obj)
		lines = append(lines, logLineJSON{Timestamp: e.Time, Line: string(line)})
		structured = append(structured, toSandboxLog(e))
	}
	writeJSON(w, http.StatusOK, map[string]any{"logs": lines, "logEntries": structured})
}

func logQuery(cursor, limit string) (sandbox.LogQuery, error) {
	var q sandbox.LogQuery
	if cursor != "" {
		ms, err := strconv.ParseInt(strings.TrimSpace(cursor), 10, 64)
		if err != nil || ms < 0 {
			return q, errdefs.New(errdefs.ErrInvalidArgument, "the cursor must be unix milliseconds")
		}
		q.Cursor = time.UnixMilli(ms)
	}
	q.Limit = 1000
	if limit != "" {
		n, err := strconv.Atoi(strings.TrimSpace(limit))
		if err != nil || n < 0 || n > 1000 {
			return q, errdefs.New(errdefs.ErrInvalidArgument, "limit must be between 0 and 1000")
		}
		if n > 0 {
			q.Limit = n
		}
	}
	return q, nil
}

// notFoundAsE2B words a NotFound as E2B does.
func notFoundAsE2B(id string, err error) error {
	if errdefs.Class(err) == errdefs.ErrNotFound {
		return notRunning(id)
	}
	return err
}

func unixParam(v string) (int64, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, errdefs.New(errdefs.ErrInvalidArgument, "start and end must be unix seconds")
	}
	return n, nil
}
