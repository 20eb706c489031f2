package httpapi

import (
	"encoding/base64"
	"net/http"

	"github.com/spacesandbox/space/api/native"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/tenant"
)

// Pause, resume, fork, disk snapshots and customer keys.

func (s *Server) PauseSandbox(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	// keep_memory false keeps the disk only: the processes end, and a
	// resume boots afresh on that disk.
	var req native.PauseSandboxJSONRequestBody
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
	var req native.ResumeSandboxJSONRequestBody
	if err := decodeJSON(w, r, &req, true); err != nil {
		writeError(w, r, err)
		return
	}
	if deref(req.TimeoutSeconds) < 0 {
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "timeout_seconds must not be negative"))
		return
	}
	sb, err := s.checkpoints.Resume(r.Context(), id, seconds(deref(req.TimeoutSeconds)))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toJSON(sb))
}

func (s *Server) ForkSandbox(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	var req native.ForkSandboxJSONRequestBody
	if err := decodeJSON(w, r, &req, true); err != nil {
		writeError(w, r, err)
		return
	}
	if deref(req.TimeoutSeconds) < 0 || deref(req.Count) < 0 {
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "count and timeout_seconds must not be negative"))
		return
	}
	forks, err := s.checkpoints.Fork(r.Context(), id, sandbox.ForkRequest{
		Count: deref(req.Count), Timeout: seconds(deref(req.TimeoutSeconds)), Metadata: deref(req.Metadata),
	})
	if err != nil && len(forks) == 0 {
		writeError(w, r, err)
		return
	}
	resp := struct {
		Sandboxes []native.Sandbox `json:"sandboxes"`
		Error     *errorDetail     `json:"error,omitempty"`
	}{Sandboxes: []native.Sandbox{}}
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

func snapshotToJSON(sn *sandbox.Snapshot) native.Snapshot {
	return native.Snapshot{
		Id: sn.ID, SandboxId: sn.SandboxID, Template: sn.Template, CreatedAt: sn.CreatedAt, Bytes: sn.Bytes, TookMs: ptr(sn.Took.Milliseconds()), KeyId: opt(sn.KeyID),
		Memory: ptr(sn.Memory), Name: opt(sn.Name), Tag: opt(sn.Tag),
	}
}

func (s *Server) TakeSnapshot(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	var req native.TakeSnapshotJSONRequestBody
	if err := decodeJSON(w, r, &req, true); err != nil {
		writeError(w, r, err)
		return
	}
	sn, err := s.snapshots.TakeSnapshot(r.Context(), id, sandbox.SnapshotOptions{Memory: deref(req.Memory), Name: deref(req.Name)})
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
	resp := native.SnapshotList{Snapshots: []native.Snapshot{}}
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

func decodeKey(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	// A customer key: 32 bytes, standard base64.
	var req native.KeyRequest
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
