package httpapi

import (
	"encoding/base64"
	"net/http"
	"time"

	"github.com/spacesandbox/space/api/native"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/tenant"
)

// Pause, resume, fork, disk snapshots and customer keys.

func (s *Server) PauseSandbox(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	var req struct {
		// KeepMemory false keeps the disk only: the processes end, and a
		// resume boots afresh on that disk.
		KeepMemory *bool `json:"keep_memory"`
	}
	if err := decodeJSON(w, r, &req, true); err != nil {
		writeError(w, r, err)
		return
	}
	sb, err := s.checkpoints.Pause(r.Context(), id, sandbox.PauseOptions{DiskOnly: req.KeepMemory != nil && !*req.KeepMemory})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toJSON(sb))
}

func (s *Server) ResumeSandbox(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	var req struct {
		TimeoutSeconds int `json:"timeout_seconds"`
	}
	if err := decodeJSON(w, r, &req, true); err != nil {
		writeError(w, r, err)
		return
	}
	if req.TimeoutSeconds < 0 {
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "timeout_seconds must not be negative"))
		return
	}
	sb, err := s.checkpoints.Resume(r.Context(), id, seconds(req.TimeoutSeconds))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toJSON(sb))
}

func (s *Server) ForkSandbox(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	var req struct {
		Count          int               `json:"count"`
		TimeoutSeconds int               `json:"timeout_seconds"`
		Metadata       map[string]string `json:"metadata"`
	}
	if err := decodeJSON(w, r, &req, true); err != nil {
		writeError(w, r, err)
		return
	}
	if req.TimeoutSeconds < 0 || req.Count < 0 {
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "count and timeout_seconds must not be negative"))
		return
	}
	forks, err := s.checkpoints.Fork(r.Context(), id, sandbox.ForkRequest{
		Count: req.Count, Timeout: seconds(req.TimeoutSeconds), Metadata: req.Metadata,
	})
	if err != nil && len(forks) == 0 {
		writeError(w, r, err)
		return
	}
	resp := struct {
		Sandboxes []sandboxJSON `json:"sandboxes"`
		Error     *errorDetail  `json:"error,omitempty"`
	}{Sandboxes: []sandboxJSON{}}
	for _, f := range forks {
		resp.Sandboxes = append(resp.Sandboxes, toJSON(f))
	}
	if err != nil {
		// Some forks were made: they are the caller's, so say which.
		_, code := errdefs.HTTPStatus(err)
		resp.Error = &errorDetail{Code: code, Message: errdefs.PublicMessage(err)}
	}
	writeJSON(w, http.StatusCreated, resp)
}

type snapshotJSON struct {
	ID        string    `json:"id"`
	SandboxID string    `json:"sandbox_id"`
	Template  string    `json:"template"`
	CreatedAt time.Time `json:"created_at"`
	Bytes     int64     `json:"bytes"`
	TookMS    int64     `json:"took_ms"`
	KeyID     string    `json:"key_id,omitempty"`
	// Memory: memory and processes too, not the disk alone.
	Memory bool   `json:"memory"`
	Name   string `json:"name,omitempty"`
	Tag    string `json:"tag,omitempty"`
}

func snapshotToJSON(sn *sandbox.Snapshot) snapshotJSON {
	return snapshotJSON{
		ID: sn.ID, SandboxID: sn.SandboxID, Template: sn.Template, CreatedAt: sn.CreatedAt, Bytes: sn.Bytes, TookMS: sn.Took.Milliseconds(), KeyID: sn.KeyID,
		Memory: sn.Memory, Name: sn.Name, Tag: sn.Tag,
	}
}

func (s *Server) TakeSnapshot(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	var req struct {
		Memory bool   `json:"memory"`
		Name   string `json:"name"`
	}
	if err := decodeJSON(w, r, &req, true); err != nil {
		writeError(w, r, err)
		return
	}
	sn, err := s.snapshots.TakeSnapshot(r.Context(), id, sandbox.SnapshotOptions{Memory: req.Memory, Name: req.Name})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotToJSON(sn))
}

func (s *Server) ListSnapshots(w http.ResponseWriter, r *http.Request, params native.ListSnapshotsParams) {
	s.listSnapshots(w, r, sandbox.SnapshotFilter{SandboxID: deref(params.SandboxId), Ref: deref(params.Name)})
}

func (s *Server) ListSandboxSnapshots(w http.ResponseWriter, r *http.Request, id native.SandboxID, params native.ListSandboxSnapshotsParams) {
	s.listSnapshots(w, r, sandbox.SnapshotFilter{SandboxID: id, Ref: deref(params.Name)})
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request, filter sandbox.SnapshotFilter) {
	snaps, err := s.snapshots.Snapshots(r.Context(), filter)
	if err != nil {
		writeError(w, r, err)
		return
	}
	resp := struct {
		Snapshots []snapshotJSON `json:"snapshots"`
	}{Snapshots: []snapshotJSON{}}
	for _, sn := range snaps {
		resp.Snapshots = append(resp.Snapshots, snapshotToJSON(sn))
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) GetSnapshot(w http.ResponseWriter, r *http.Request, snapshot string) {
	sn, err := s.snapshots.GetSnapshot(r.Context(), snapshot)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, snapshotToJSON(sn))
}

func (s *Server) DeleteSnapshot(w http.ResponseWriter, r *http.Request, snapshot string) {
	if _, err := s.snapshots.DeleteSnapshot(r.Context(), snapshot); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// keyRequest carries a customer key: 32 bytes, standard base64.
type keyRequest struct {
	Key string `json:"key"`
}

func decodeKey(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	var req keyRequest
	if err := decodeJSON(w, r, &req, false); err != nil {
		return nil, err
	}
	key, err := base64.StdEncoding.DecodeString(req.Key)
	if err != nil || len(key) != 32 {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "key must be 32 bytes in standard base64")
	}
	return key, nil
}

func (s *Server) PutKey(w http.ResponseWriter, r *http.Request, key string) {
	secret, err := decodeKey(w, r)
	var id string
	if err == nil {
		id, err = scopedName(r, key)
	}
	if err == nil {
		err = s.keys.SetKey(id, secret)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) RotateKey(w http.ResponseWriter, r *http.Request, key string) {
	secret, err := decodeKey(w, r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	id, err := scopedName(r, key)
	if err != nil {
		writeError(w, r, err)
		return
	}
	n, err := s.keys.RotateKey(r.Context(), id, secret)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Rewrapped int `json:"rewrapped"`
	}{n})
}

func (s *Server) DeleteKey(w http.ResponseWriter, r *http.Request, key string) {
	id, err := scopedName(r, key)
	if err == nil {
		err = s.keys.RemoveKey(id)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// listKeys names the customer keys loaded on this node, never the keys.
func (s *Server) ListKeys(w http.ResponseWriter, r *http.Request) {
	ids, err := s.keys.KeyIDs()
	if err != nil {
		writeError(w, r, err)
		return
	}
	type keyJSON struct {
		ID string `json:"id"`
	}
	resp := struct {
		Keys []keyJSON `json:"keys"`
	}{Keys: []keyJSON{}}
	p := tenant.FromContext(r.Context())
	for _, id := range ids {
		if name, ok := tenant.Visible(p, id); ok {
			resp.Keys = append(resp.Keys, keyJSON{ID: name})
		}
	}
	writeJSON(w, http.StatusOK, resp)
}
