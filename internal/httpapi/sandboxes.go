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

// toJSON is a sandbox as the API answers it.
func toJSON(s *sandbox.Sandbox) native.Sandbox {
	md := s.Metadata
	if md == nil {
		md = map[string]string{}
	}
	out := native.Sandbox{
		Id: s.ID, State: native.SandboxState(s.State), Template: s.Template, CreatedAt: s.CreatedAt, ExpiresAt: s.ExpiresAt,
		Cpu: ptr(s.CPU), MemoryMb: ptr(s.MemoryMB), DiskMb: ptr(s.DiskMB), MaxProcesses: ptr(s.MaxProcs),
		Metadata: &md, AccessToken: opt(s.AccessToken), Reason: opt(s.Reason), Network: networkOf(s.Network),
		AutoPause: opt(s.AutoPause), AutoResume: opt(s.AutoResume), KeyId: opt(s.KeyID),
		SnapshotEverySeconds: opt(int(s.SnapshotEvery / time.Second)), SnapshotKeep: opt(s.SnapshotKeep), Node: opt(s.Node),
		Rest: optRest(s.Rest),
	}
	switch {
	case s.IdleFreeze < 0:
		out.IdleFreezeSeconds = ptr(-1)
	case s.IdleFreeze > 0:
		out.IdleFreezeSeconds = ptr(max(1, int(s.IdleFreeze/time.Second)))
	}
	switch {
	case s.IdleHibernate < 0:
		out.IdleHibernateSeconds = ptr(-1)
	case s.IdleHibernate > 0:
		out.IdleHibernateSeconds = ptr(max(1, int(s.IdleHibernate/time.Second)))
	}
	if !s.PausedAt.IsZero() {
		out.PausedAt = ptr(s.PausedAt)
	}
	if s.AutoPauseDiskOnly {
		out.AutoPauseKeepMemory = ptr(false)
	}
	var mounts []native.VolumeMount
	for _, v := range s.Volumes {
		mounts = append(mounts, native.VolumeMount{Name: v.Name, Path: v.Path, ReadOnly: opt(v.ReadOnly), VolumeId: opt(v.VolumeID)})
	}
	out.Volumes = optSlice(mounts)
	if c := s.Checkpoint; c != nil {
		out.Checkpoint = &native.SandboxCheckpoint{Id: ptr(c.ID), CreatedAt: ptr(c.CreatedAt), Bytes: ptr(c.Bytes), TookMs: ptr(c.Took.Milliseconds()), Memory: ptr(!c.DiskOnly)}
	}
	return out
}

func (s *Server) CreateSandbox(w http.ResponseWriter, r *http.Request) {
	var req native.CreateSandboxRequest
	if err := decodeJSON(w, r, &req, true); err != nil {
		writeError(w, r, err)
		return
	}
	if deref(req.TimeoutSeconds) < 0 || deref(req.Cpu) < 0 || deref(req.MemoryMb) < 0 || deref(req.DiskMb) < 0 || deref(req.MaxProcesses) < 0 || deref(req.SnapshotEverySeconds) < 0 || deref(req.SnapshotKeep) < 0 {
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "timeout_seconds, limits and the snapshot schedule must not be negative"))
		return
	}
	sb, err := s.lifecycle.Create(r.Context(), sandbox.CreateRequest{
		Template: deref(req.Template), Timeout: seconds(deref(req.TimeoutSeconds)),
		Env: deref(req.Env), Metadata: deref(req.Metadata),
		CPU: deref(req.Cpu), MemoryMB: deref(req.MemoryMb), DiskMB: deref(req.DiskMb), MaxProcs: deref(req.MaxProcesses),
		Snapshot: deref(req.Snapshot), SnapshotEvery: seconds(deref(req.SnapshotEverySeconds)), SnapshotKeep: deref(req.SnapshotKeep),
		IdleFreeze: idleFreeze(deref(req.IdleFreezeSeconds)), IdleHibernate: idleFreeze(deref(req.IdleHibernateSeconds)),
		AutoPause: deref(req.AutoPause), AutoResume: deref(req.AutoResume), KeyID: deref(req.KeyId),
		AutoPauseDiskOnly: req.AutoPauseKeepMemory != nil && !*req.AutoPauseKeepMemory,
		NoPool:            req.Pool != nil && !*req.Pool, Network: policyOf(req.Network),
		Secrets: deref(req.Secrets), Volumes: mountsOf(deref(req.Volumes)),
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, toJSON(sb))
}

func (s *Server) ListSandboxes(w http.ResponseWriter, r *http.Request, params native.ListSandboxesParams) {
	q := r.URL.Query()
	f := sandbox.ListFilter{States: []sandbox.State{sandbox.StateRunning}}
	if v := q.Get("state"); v != "" {
		f.States = nil
		for _, st := range strings.Split(v, ",") {
			switch st = strings.TrimSpace(st); st {
			case "creating", "running", "paused", "resuming", "killed", "lost":
				f.States = append(f.States, sandbox.State(st))
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
		Sandboxes     []native.Sandbox `json:"sandboxes"`
		NextPageToken string           `json:"next_page_token,omitempty"`
	}{Sandboxes: make([]native.Sandbox, 0, len(page)), NextPageToken: next}
	for _, sb := range page {
		resp.Sandboxes = append(resp.Sandboxes, toJSON(sb))
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) GetSandbox(w http.ResponseWriter, r *http.Request, id native.SandboxID, params native.GetSandboxParams) {
	sb, err := s.lifecycle.Get(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if params.Rest != nil && *params.Rest && sb.State == sandbox.StateRunning {
		if sb.Rest, err = s.lifecycle.Rest(id); err != nil {
			writeError(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, toJSON(sb))
}

func (s *Server) SetSandboxIdleFreeze(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	var req native.SetSandboxIdleFreezeJSONBody
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	var hibernate *time.Duration
	if req.IdleHibernateSeconds != nil {
		d := idleFreeze(*req.IdleHibernateSeconds)
		hibernate = &d
	}
	sb, err := s.lifecycle.SetIdleFreeze(r.Context(), id, idleFreeze(req.IdleFreezeSeconds), hibernate)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toJSON(sb))
}

// idleFreeze is a sandbox's idle freeze delay from a request's seconds:
// 0 the node's default, -1 (any negative) never.
func idleFreeze(n int) time.Duration {
	if n < 0 {
		return -1
	}
	return seconds(n)
}

func (s *Server) KillSandbox(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	if err := s.lifecycle.Kill(r.Context(), id); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) SetSandboxTimeout(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	var req native.SetSandboxTimeoutJSONRequestBody
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
