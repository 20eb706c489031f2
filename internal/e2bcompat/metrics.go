package e2bcompat

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

const metricsTimeout = 5 * time.Second

// metrics is GET /sandboxes/{id}/metrics. E2B keeps a time series; spaced
// reads the figures from the sandbox's agent when asked, so the answer is
// one sample, taken now (none when start/end exclude now).
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
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
	if _, err := s.running(r, id); err != nil {
		writeError(w, r, err)
		return
	}
	m, err := s.sample(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := []metricJSON{}
	now := m.Timestamp.Unix()
	if (start == 0 || now >= start) && (end == 0 || now <= end) {
		out = append(out, m)
	}
	writeJSON(w, http.StatusOK, out)
}

// batchMetrics is GET /sandboxes/metrics?sandbox_ids=a,b: the latest sample
// of each running sandbox named.
func (s *Server) batchMetrics(w http.ResponseWriter, r *http.Request) {
	ids := splitList(r.URL.Query()["sandbox_ids"])
	if len(ids) == 0 || len(ids) > 100 {
		writeStatus(w, http.StatusBadRequest, "sandbox_ids must name 1 to 100 sandboxes")
		return
	}
	out := map[string]metricJSON{}
	for _, id := range ids {
		if _, err := s.running(r, id); err != nil {
			continue
		}
		if m, err := s.sample(r.Context(), id); err == nil {
			out[id] = m
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"sandboxes": out})
}

// sample reads the agent's /metrics (envd's shape) through spaced's own
// connection to the agent.
func (s *Server) sample(ctx context.Context, id string) (metricJSON, error) {
	ac, err := s.opts.Sandboxes.Agent(id)
	if err != nil {
		return metricJSON{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, metricsTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ac.BaseURL+"/metrics", nil)
	if err != nil {
		return metricJSON{}, err
	}
	resp, err := ac.HTTP.Do(req)
	if err != nil {
		return metricJSON{}, errdefs.Wrap(errdefs.ErrUnavailable, err, "could not read metrics from the sandbox")
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return metricJSON{}, errdefs.Wrap(errdefs.ErrUnavailable, fmt.Errorf("agent /metrics: %s", resp.Status), "could not read metrics from the sandbox")
	}
	var am agentMetrics
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&am); err != nil {
		return metricJSON{}, errdefs.Wrap(errdefs.ErrUnavailable, err, "could not read metrics from the sandbox")
	}
	ts := time.Unix(am.TS, 0).UTC()
	if am.TS == 0 {
		ts = time.Now().UTC().Truncate(time.Second)
	}
	return metricJSON{
		Timestamp: ts, TimestampUnix: ts.Unix(),
		CPUCount: am.CPUCount, CPUUsedPct: am.CPUUsedPct,
		MemUsed: am.MemUsed, MemTotal: am.MemTotal, MemCache: am.MemCache,
		DiskUsed: am.DiskUsed, DiskTotal: am.DiskTotal,
	}, nil
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
