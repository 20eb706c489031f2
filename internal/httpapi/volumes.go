package httpapi

import (
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/spacesandbox/space/api/native"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/volume"
)

// volumeMountJSON is one volume of a sandbox (create and answers).
type volumeMountJSON struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
	// VolumeID is set in answers.
	VolumeID string `json:"volume_id,omitempty"`
}

func mountsOf(in []volumeMountJSON) []sandbox.VolumeMount {
	var out []sandbox.VolumeMount
	for _, m := range in {
		out = append(out, sandbox.VolumeMount{Name: m.Name, Path: m.Path, ReadOnly: m.ReadOnly})
	}
	return out
}

type volumeJSON struct {
	ID           string      `json:"id"`
	Name         string      `json:"name"`
	SizeMB       int         `json:"size_mb"`
	UsedBytes    int64       `json:"used_bytes"`
	CreatedAt    time.Time   `json:"created_at"`
	RestoredFrom string      `json:"restored_from,omitempty"`
	Mounts       []mountJSON `json:"mounts"`
}

type mountJSON struct {
	SandboxID string `json:"sandbox_id"`
	Path      string `json:"path"`
	ReadOnly  bool   `json:"read_only"`
	State     string `json:"state"`
}

func toVolumeJSON(v *volume.Volume) volumeJSON {
	out := volumeJSON{ID: v.ID, Name: v.Name, SizeMB: v.SizeMB, UsedBytes: v.UsedBytes, CreatedAt: v.CreatedAt, RestoredFrom: v.RestoredFrom, Mounts: []mountJSON{}}
	for _, m := range v.Mounts {
		out.Mounts = append(out.Mounts, mountJSON{SandboxID: m.SandboxID, Path: m.Path, ReadOnly: m.ReadOnly, State: m.State})
	}
	return out
}

type volumeEntryJSON struct {
	Name   string    `json:"name"`
	Type   string    `json:"type"`
	Path   string    `json:"path"`
	Size   int64     `json:"size"`
	Mode   uint32    `json:"mode"`
	UID    uint32    `json:"uid"`
	GID    uint32    `json:"gid"`
	Atime  time.Time `json:"atime"`
	Mtime  time.Time `json:"mtime"`
	Ctime  time.Time `json:"ctime"`
	Target string    `json:"target,omitempty"`
}

func toVolumeEntry(e *volume.Entry) volumeEntryJSON {
	return volumeEntryJSON{Name: e.Name, Type: e.Type, Path: e.Path, Size: e.Size, Mode: e.Mode, UID: e.UID, GID: e.GID,
		Atime: e.Atime, Mtime: e.Mtime, Ctime: e.Ctime, Target: e.Target}
}

type backupJSON struct {
	ID        string    `json:"id"`
	VolumeID  string    `json:"volume_id"`
	Volume    string    `json:"volume"`
	SizeMB    int       `json:"size_mb"`
	CreatedAt time.Time `json:"created_at"`
	Files     int       `json:"files"`
	FileBytes int64     `json:"file_bytes"`
	Bytes     int64     `json:"bytes"`
	TookMS    int64     `json:"took_ms"`
}

func toBackupJSON(b *volume.Backup) backupJSON {
	return backupJSON{ID: b.ID, VolumeID: b.VolumeID, Volume: b.VolumeName, SizeMB: b.SizeMB, CreatedAt: b.CreatedAt,
		Files: b.Files, FileBytes: b.FileBytes, Bytes: b.Bytes, TookMS: b.Took.Milliseconds()}
}

// vols returns the volume service, or answers that this node has none.
func (s *Server) vols(w http.ResponseWriter, r *http.Request) (*volume.Service, bool) {
	if s.volumes == nil {
		writeError(w, r, errdefs.New(errdefs.ErrFailedPrecondition, "this node has no volumes"))
		return nil, false
	}
	return s.volumes, true
}

func (s *Server) CreateVolume(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name       string `json:"name"`
		SizeMB     int    `json:"size_mb"`
		FromBackup string `json:"from_backup"`
	}
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	vs, ok := s.vols(w, r)
	if !ok {
		return
	}
	if req.SizeMB < 0 {
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "size_mb must not be negative"))
		return
	}
	v, err := vs.Create(r.Context(), volume.CreateRequest{Name: req.Name, SizeMB: req.SizeMB, FromBackup: req.FromBackup})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, toVolumeJSON(v))
}

func (s *Server) ListVolumes(w http.ResponseWriter, r *http.Request) {
	vs, ok := s.vols(w, r)
	if !ok {
		return
	}
	all, err := vs.List(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := struct {
		Volumes []volumeJSON `json:"volumes"`
	}{Volumes: []volumeJSON{}}
	for _, v := range all {
		out.Volumes = append(out.Volumes, toVolumeJSON(v))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) GetVolume(w http.ResponseWriter, r *http.Request, volumeRef native.VolumeRef) {
	vs, ok := s.vols(w, r)
	if !ok {
		return
	}
	v, err := vs.Get(r.Context(), volumeRef)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toVolumeJSON(v))
}

func (s *Server) DeleteVolume(w http.ResponseWriter, r *http.Request, volumeRef native.VolumeRef) {
	vs, ok := s.vols(w, r)
	if !ok {
		return
	}
	if err := vs.Delete(r.Context(), volumeRef); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) ReadVolumeFile(w http.ResponseWriter, r *http.Request, volumeRef native.VolumeRef, params native.ReadVolumeFileParams) {
	vs, ok := s.vols(w, r)
	if !ok {
		return
	}
	p, err := pathParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	rc, e, err := vs.Open(r.Context(), volumeRef, p)
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(e.Size, 10))
	w.WriteHeader(http.StatusOK)
	io.Copy(w, rc)
}

// attrsParams reads uid, gid and mode (octal: "644" or "0644") from the
// query.
func attrsParams(r *http.Request) (volume.Attrs, error) {
	var a volume.Attrs
	q := r.URL.Query()
	for _, f := range []struct {
		name string
		base int
		dst  **uint32
	}{{"uid", 10, &a.UID}, {"gid", 10, &a.GID}, {"mode", 8, &a.Mode}} {
		if v := q.Get(f.name); v != "" {
			n, err := strconv.ParseUint(v, f.base, 32)
			if err != nil {
				return a, errdefs.New(errdefs.ErrInvalidArgument, "%s must be a number (mode in octal)", f.name)
			}
			u := uint32(n)
			*f.dst = &u
		}
	}
	return a, nil
}

func (s *Server) WriteVolumeFile(w http.ResponseWriter, r *http.Request, volumeRef native.VolumeRef, params native.WriteVolumeFileParams) {
	vs, ok := s.vols(w, r)
	if !ok {
		return
	}
	p, err := pathParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	a, err := attrsParams(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	e, err := vs.Write(r.Context(), volumeRef, p, r.Body, a)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, toVolumeEntry(e))
}

func (s *Server) RemoveVolumeFile(w http.ResponseWriter, r *http.Request, volumeRef native.VolumeRef, params native.RemoveVolumeFileParams) {
	vs, ok := s.vols(w, r)
	if !ok {
		return
	}
	p, err := pathParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := vs.Remove(r.Context(), volumeRef, p); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) ListVolumeFiles(w http.ResponseWriter, r *http.Request, volumeRef native.VolumeRef, params native.ListVolumeFilesParams) {
	vs, ok := s.vols(w, r)
	if !ok {
		return
	}
	p := r.URL.Query().Get("path")
	if p == "" {
		p = "/"
	}
	depth := 1
	if v := r.URL.Query().Get("depth"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "depth must be an integer"))
			return
		}
		depth = n
	}
	es, err := vs.ListDir(r.Context(), volumeRef, p, depth)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := struct {
		Entries []volumeEntryJSON `json:"entries"`
	}{Entries: []volumeEntryJSON{}}
	for _, e := range es {
		out.Entries = append(out.Entries, toVolumeEntry(e))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) StatVolumeFile(w http.ResponseWriter, r *http.Request, volumeRef native.VolumeRef, params native.StatVolumeFileParams) {
	vs, ok := s.vols(w, r)
	if !ok {
		return
	}
	p, err := pathParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	e, err := vs.Stat(r.Context(), volumeRef, p)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toVolumeEntry(e))
}

func (s *Server) MakeVolumeDir(w http.ResponseWriter, r *http.Request, volumeRef native.VolumeRef) {
	vs, ok := s.vols(w, r)
	if !ok {
		return
	}
	var req struct {
		Path    string  `json:"path"`
		Parents bool    `json:"parents"`
		Mode    *uint32 `json:"mode"`
		UID     *uint32 `json:"uid"`
		GID     *uint32 `json:"gid"`
	}
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	e, err := vs.MakeDir(r.Context(), volumeRef, req.Path, req.Parents, volume.Attrs{UID: req.UID, GID: req.GID, Mode: req.Mode})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, toVolumeEntry(e))
}

func (s *Server) BackupVolume(w http.ResponseWriter, r *http.Request, volumeRef native.VolumeRef) {
	vs, ok := s.vols(w, r)
	if !ok {
		return
	}
	b, err := vs.TakeBackup(r.Context(), volumeRef)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, toBackupJSON(b))
}

func (s *Server) ListVolumeBackups(w http.ResponseWriter, r *http.Request, params native.ListVolumeBackupsParams) {
	vs, ok := s.vols(w, r)
	if !ok {
		return
	}
	all, err := vs.Backups(r.Context(), r.URL.Query().Get("volume"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := struct {
		Backups []backupJSON `json:"backups"`
	}{Backups: []backupJSON{}}
	for _, b := range all {
		out.Backups = append(out.Backups, toBackupJSON(b))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) GetVolumeBackup(w http.ResponseWriter, r *http.Request, backup string) {
	vs, ok := s.vols(w, r)
	if !ok {
		return
	}
	b, err := vs.GetBackup(r.Context(), backup)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toBackupJSON(b))
}

func (s *Server) DeleteVolumeBackup(w http.ResponseWriter, r *http.Request, backup string) {
	vs, ok := s.vols(w, r)
	if !ok {
		return
	}
	if err := vs.DeleteBackup(r.Context(), backup); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
