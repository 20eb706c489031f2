package httpapi

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/api/native"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// A sandbox's metrics over time and its log, as spaced keeps them
// (sandbox.Telemetry): GET /v1/sandboxes/{id}/metrics and /logs.

type metricsJSON struct {
	IntervalSeconds float64      `json:"interval_seconds"`
	Samples         []sampleJSON `json:"samples"`
}

type sampleJSON struct {
	Time       time.Time `json:"time"`
	CPUCount   int       `json:"cpu_count"`
	CPUUsedPct float64   `json:"cpu_used_pct"`
	MemUsed    uint64    `json:"mem_used"`
	MemTotal   uint64    `json:"mem_total"`
	MemCache   uint64    `json:"mem_cache"`
	DiskUsed   uint64    `json:"disk_used"`
	DiskTotal  uint64    `json:"disk_total"`
}

type logsJSON struct {
	Logs []logJSON `json:"logs"`
}

type logJSON struct {
	Time    time.Time         `json:"time"`
	Level   string            `json:"level"`
	Message string            `json:"message"`
	Fields  map[string]string `json:"fields,omitempty"`
}

func (s *Server) GetSandboxMetrics(w http.ResponseWriter, r *http.Request, id native.SandboxID, params native.GetSandboxMetricsParams) {
	if s.telemetry == nil {
		writeError(w, r, errdefs.New(errdefs.ErrUnavailable, "this spaced keeps no sandbox metrics"))
		return
	}
	q := r.URL.Query()
	from, err := timeParam("start", q.Get("start"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	to, err := timeParam("end", q.Get("end"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	ms, err := s.telemetry.Metrics(r.Context(), id, from, to)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := metricsJSON{IntervalSeconds: s.telemetry.Interval().Seconds(), Samples: make([]sampleJSON, 0, len(ms))}
	for _, m := range ms {
		out.Samples = append(out.Samples, toSampleJSON(m))
	}
	writeJSON(w, http.StatusOK, out)
}

func toSampleJSON(m sandbox.MetricSample) sampleJSON {
	return sampleJSON{
		Time: m.Time, CPUCount: m.CPUCount, CPUUsedPct: m.CPUUsedPct,
		MemUsed: m.MemUsed, MemTotal: m.MemTotal, MemCache: m.MemCache,
		DiskUsed: m.DiskUsed, DiskTotal: m.DiskTotal,
	}
}

func (s *Server) GetSandboxLogs(w http.ResponseWriter, r *http.Request, id native.SandboxID, params native.GetSandboxLogsParams) {
	if s.telemetry == nil {
		writeError(w, r, errdefs.New(errdefs.ErrUnavailable, "this spaced keeps no sandbox logs"))
		return
	}
	q := r.URL.Query()
	var lq sandbox.LogQuery
	var err error
	if lq.Cursor, err = timeParam("cursor", q.Get("cursor")); err != nil {
		writeError(w, r, err)
		return
	}
	if v := q.Get("limit"); v != "" {
		if lq.Limit, err = strconv.Atoi(v); err != nil || lq.Limit < 1 || lq.Limit > 10000 {
			writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "limit must be between 1 and 10000"))
			return
		}
	}
	switch d := q.Get("direction"); d {
	case "", "forward":
	case "backward":
		lq.Backward = true
	default:
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "direction must be forward or backward"))
		return
	}
	switch l := q.Get("level"); l {
	case "", "debug", "info", "warn", "error":
		lq.Level = l
	default:
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "level must be debug, info, warn or error"))
		return
	}
	lq.Search = q.Get("search")
	follow := false
	if v := q.Get("follow"); v != "" {
		if follow, err = strconv.ParseBool(v); err != nil {
			writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "follow %q is neither true nor false", v))
			return
		}
	}
	if follow {
		if lq.Backward {
			writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "follow goes forward: direction backward does not go with it"))
			return
		}
		s.followLogs(w, r, id, lq)
		return
	}
	entries, err := s.telemetry.Logs(r.Context(), id, lq)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := logsJSON{Logs: make([]logJSON, 0, len(entries))}
	for _, e := range entries {
		out.Logs = append(out.Logs, toLogJSON(e))
	}
	writeJSON(w, http.StatusOK, out)
}

func toLogJSON(e sandbox.LogEntry) logJSON {
	return logJSON{Time: e.Time, Level: e.Level, Message: e.Message, Fields: e.Fields}
}

// followLogs streams the sandbox's log as SSE, as tail -f does: `log`
// events of the lines lq selects (the newest lq.Limit of them), then of
// each new line it selects, until the client leaves or the sandbox's
// record is gone. They carry no id: a client that reconnects gets the
// selected lines again, and starts its view afresh.
func (s *Server) followLogs(w http.ResponseWriter, r *http.Request, id string, lq sandbox.LogQuery) {
	now, next, cancel, err := s.telemetry.FollowLogs(r.Context(), id, lq)
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer cancel()
	sse := newSSE(w)
	defer sse.Close()
	for _, e := range now {
		if err := sse.Event(0, "log", mustJSON(toLogJSON(e))); err != nil {
			return
		}
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case e, ok := <-next:
			if !ok {
				return
			}
			if !lq.Selects(e) {
				continue
			}
			if err := sse.Event(0, "log", mustJSON(toLogJSON(e))); err != nil {
				return
			}
		}
	}
}

// timeParam reads query parameter name, an RFC 3339 time or unix seconds
// ("" is the zero time).
func timeParam(name, v string) (time.Time, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		return time.Unix(n, 0), nil
	}
	return time.Time{}, errdefs.New(errdefs.ErrInvalidArgument, "%s %q is neither an RFC 3339 time nor unix seconds", name, v)
}
