package httpapi

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/api/native"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

type createSandboxRequest struct {
	Template       string            `json:"template"`
	TimeoutSeconds int               `json:"timeout_seconds"`
	Env            map[string]string `json:"env"`
	Metadata       map[string]string `json:"metadata"`
	CPU            int               `json:"cpu"`
	MemoryMB       int               `json:"memory_mb"`
	DiskMB         int               `json:"disk_mb"`
	MaxProcesses   int               `json:"max_processes"`
	Pool           *bool             `json:"pool"`
	// Snapshot starts the sandbox from a snapshot (ID or name[:tag]).
	Snapshot             string `json:"snapshot"`
	SnapshotEverySeconds int    `json:"snapshot_every_seconds"`
	SnapshotKeep         int    `json:"snapshot_keep"`
	AutoPause            bool   `json:"auto_pause"`
	AutoResume           bool   `json:"auto_resume"`
	// AutoPauseKeepMemory false makes the pause at the timeout keep the
	// disk only.
	AutoPauseKeepMemory *bool        `json:"auto_pause_keep_memory"`
	KeyID               string       `json:"key_id"`
	Network             *networkJSON `json:"network"`
	// Secrets maps env var names to secret names (PUT /v1/secrets).
	Secrets map[string]string `json:"secrets"`
	// Volumes are mounted into the sandbox.
	Volumes []volumeMountJSON `json:"volumes"`
}

type sandboxJSON struct {
	ID           string            `json:"id"`
	State        string            `json:"state"`
	Template     string            `json:"template"`
	CreatedAt    time.Time         `json:"created_at"`
	ExpiresAt    time.Time         `json:"expires_at"`
	CPU          int               `json:"cpu"`
	MemoryMB     int               `json:"memory_mb"`
	DiskMB       int               `json:"disk_mb"`
	MaxProcesses int               `json:"max_processes"`
	Metadata     map[string]string `json:"metadata"`
	AccessToken  string            `json:"access_token,omitempty"`
	Reason       string            `json:"reason,omitempty"`
	AutoPause    bool              `json:"auto_pause,omitempty"`
	AutoResume   bool              `json:"auto_resume,omitempty"`
	// AutoPauseKeepMemory is false (and set) for a disk-only auto-pause.
	AutoPauseKeepMemory *bool  `json:"auto_pause_keep_memory,omitempty"`
	KeyID               string `json:"key_id,omitempty"`
	// SnapshotEverySeconds and SnapshotKeep: the disk snapshot schedule.
	SnapshotEverySeconds int               `json:"snapshot_every_seconds,omitempty"`
	SnapshotKeep         int               `json:"snapshot_keep,omitempty"`
	PausedAt             *time.Time        `json:"paused_at,omitempty"`
	Checkpoint           *checkpointJSON   `json:"checkpoint,omitempty"`
	Network              *networkJSON      `json:"network,omitempty"`
	Volumes              []volumeMountJSON `json:"volumes,omitempty"`
	// Node is the cluster node that runs it (cluster mode only).
	Node string `json:"node,omitempty"`
}

// checkpointJSON is what a sandbox shows of its latest checkpoint.
type checkpointJSON struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	Bytes     int64     `json:"bytes"`
	TookMS    int64     `json:"took_ms"`
	// Memory: it holds memory and processes; false: the disk only, and a
	// resume boots afresh on it.
	Memory bool `json:"memory"`
}

func toJSON(s *sandbox.Sandbox) sandboxJSON {
	md := s.Metadata
	if md == nil {
		md = map[string]string{}
	}
	out := sandboxJSON{
		ID: s.ID, State: s.State, Template: s.Template, CreatedAt: s.CreatedAt, ExpiresAt: s.ExpiresAt,
		CPU: s.CPU, MemoryMB: s.MemoryMB, DiskMB: s.DiskMB, MaxProcesses: s.MaxProcs,
		Metadata: md, AccessToken: s.AccessToken, Reason: s.Reason, Network: networkOf(s.Network),
		AutoPause: s.AutoPause, AutoResume: s.AutoResume, KeyID: s.KeyID,
		SnapshotEverySeconds: int(s.SnapshotEvery / time.Second), SnapshotKeep: s.SnapshotKeep, Node: s.Node,
	}
	if !s.PausedAt.IsZero() {
		out.PausedAt = &s.PausedAt
	}
	if s.AutoPauseDiskOnly {
		keep := false
		out.AutoPauseKeepMemory = &keep
	}
	for _, v := range s.Volumes {
		out.Volumes = append(out.Volumes, volumeMountJSON{Name: v.Name, Path: v.Path, ReadOnly: v.ReadOnly, VolumeID: v.VolumeID})
	}
	if c := s.Checkpoint; c != nil {
		out.Checkpoint = &checkpointJSON{ID: c.ID, CreatedAt: c.CreatedAt, Bytes: c.Bytes, TookMS: c.Took.Milliseconds(), Memory: !c.DiskOnly}
	}
	return out
}

func (s *Server) CreateSandbox(w http.ResponseWriter, r *http.Request) {
	var req createSandboxRequest
	if err := decodeJSON(w, r, &req, true); err != nil {
		writeError(w, r, err)
		return
	}
	if req.TimeoutSeconds < 0 || req.CPU < 0 || req.MemoryMB < 0 || req.DiskMB < 0 || req.MaxProcesses < 0 || req.SnapshotEverySeconds < 0 || req.SnapshotKeep < 0 {
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "timeout_seconds, limits and the snapshot schedule must not be negative"))
		return
	}
	sb, err := s.lifecycle.Create(r.Context(), sandbox.CreateRequest{
		Template: req.Template, Timeout: seconds(req.TimeoutSeconds),
		Env: req.Env, Metadata: req.Metadata,
		CPU: req.CPU, MemoryMB: req.MemoryMB, DiskMB: req.DiskMB, MaxProcs: req.MaxProcesses,
		Snapshot: req.Snapshot, SnapshotEvery: seconds(req.SnapshotEverySeconds), SnapshotKeep: req.SnapshotKeep,
		AutoPause: req.AutoPause, AutoResume: req.AutoResume, KeyID: req.KeyID,
		AutoPauseDiskOnly: req.AutoPauseKeepMemory != nil && !*req.AutoPauseKeepMemory,
		NoPool:            req.Pool != nil && !*req.Pool, Network: req.Network.policy(),
		Secrets: req.Secrets, Volumes: mountsOf(req.Volumes),
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, toJSON(sb))
}

func (s *Server) ListSandboxes(w http.ResponseWriter, r *http.Request, params native.ListSandboxesParams) {
	q := r.URL.Query()
	f := sandbox.ListFilter{States: []string{"running"}}
	if v := q.Get("state"); v != "" {
		f.States = nil
		for _, st := range strings.Split(v, ",") {
			switch st = strings.TrimSpace(st); st {
			case "creating", "running", "paused", "resuming", "killed", "lost":
				f.States = append(f.States, st)
			default:
				writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "unknown state %q (want creating, running, paused, resuming, killed or lost)", st))
				return
			}
		}
	}
	for _, kv := range q["metadata"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "metadata filter %q must be key=value", kv))
			return
		}
		if f.Metadata == nil {
			f.Metadata = map[string]string{}
		}
		f.Metadata[k] = v
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "limit must be an integer from 1 to 1000"))
			return
		}
		limit = n
	}
	// The token is opaque: the service made it (where the last page
	// ended) and says when one is not valid.
	page, next, err := s.lifecycle.ListPage(r.Context(), f, limit, q.Get("page_token"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	resp := struct {
		Sandboxes     []sandboxJSON `json:"sandboxes"`
		NextPageToken string        `json:"next_page_token,omitempty"`
	}{Sandboxes: make([]sandboxJSON, 0, len(page)), NextPageToken: next}
	for _, sb := range page {
		resp.Sandboxes = append(resp.Sandboxes, toJSON(sb))
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) GetSandbox(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	sb, err := s.lifecycle.Get(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toJSON(sb))
}

func (s *Server) KillSandbox(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	if err := s.lifecycle.Kill(r.Context(), id); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) SetSandboxTimeout(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	var req struct {
		TimeoutSeconds int `json:"timeout_seconds"`
	}
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	sb, err := s.lifecycle.SetTimeout(r.Context(), id, seconds(req.TimeoutSeconds))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toJSON(sb))
}

// seconds converts a count of seconds from a request. A count too large
// for a time.Duration becomes the largest one, which every range check
// refuses, instead of wrapping round to a small or negative duration.
func seconds(n int) time.Duration {
	if int64(n) > math.MaxInt64/int64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(n) * time.Second
}
