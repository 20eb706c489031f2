package httpapi

import (
	"io"
	"net/http"
	"strconv"

	"github.com/spacesandbox/space/api/native"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/volume"
)

func mountsOf(in []native.VolumeMount) []sandbox.VolumeMount {
	var out []sandbox.VolumeMount
	for _, m := range in {
		out = append(out, sandbox.VolumeMount{Name: m.Name, Path: m.Path, ReadOnly: deref(m.ReadOnly)})
	}
	return out
}

func toVolumeJSON(v *volume.Volume) native.Volume {
	out := native.Volume{Id: v.ID, Name: v.Name, SizeMb: v.SizeMB, UsedBytes: ptr(v.UsedBytes), CreatedAt: v.CreatedAt, RestoredFrom: opt(v.RestoredFrom), Mounts: []native.VolumeHolder{}}
	for _, m := range v.Mounts {
		out.Mounts = append(out.Mounts, native.VolumeHolder{SandboxId: ptr(m.SandboxID), Path: ptr(m.Path), ReadOnly: ptr(m.ReadOnly), State: ptr(m.State)})
	}
	return out
}

func toVolumeEntry(e *volume.Entry) native.VolumeEntry {
	return native.VolumeEntry{Name: ptr(e.Name), Type: ptr(native.VolumeEntryType(e.Type)), Path: ptr(e.Path), Size: ptr(e.Size),
		Mode: ptr(int(e.Mode)), Uid: ptr(int(e.UID)), Gid: ptr(int(e.GID)),
		Atime: ptr(e.Atime), Mtime: ptr(e.Mtime), Ctime: ptr(e.Ctime), Target: opt(e.Target)}
}

func toBackupJSON(b *volume.Backup) native.VolumeBackup {
	return native.VolumeBackup{Id: ptr(b.ID), VolumeId: ptr(b.VolumeID), Volume: ptr(b.VolumeName), SizeMb: ptr(b.SizeMB), CreatedAt: ptr(b.CreatedAt),
		Files: ptr(b.Files), FileBytes: ptr(b.FileBytes), Bytes: ptr(b.Bytes), TookMs: ptr(b.Took.Milliseconds())}
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
	var req native.CreateVolumeJSONRequestBody
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	vs, ok := s.vols(w, r)
	if !ok {
		return
	}
	if deref(req.SizeMb) < 0 {
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "size_mb must not be negative"))
		return
	}
	v, err := vs.Create(r.Context(), volume.CreateRequest{Name: req.Name, SizeMB: deref(req.SizeMb), FromBackup: deref(req.FromBackup)})
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
		Volumes []native.Volume `json:"volumes"`
	}{Volumes: []native.Volume{}}
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
		Entries []native.VolumeEntry `json:"entries"`
	}{Entries: []native.VolumeEntry{}}
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
	var req native.MakeVolumeDirJSONRequestBody
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	// uid, gid and mode are 32-bit: the spec's ranges say so, and the
	// validator has refused others.
	var a volume.Attrs
	for _, f := range []struct {
		in  *int
		dst **uint32
	}{{req.Uid, &a.UID}, {req.Gid, &a.GID}, {req.Mode, &a.Mode}} {
		if f.in != nil {
			u := uint32(*f.in)
			*f.dst = &u
		}
	}
	e, err := vs.MakeDir(r.Context(), volumeRef, req.Path, deref(req.Parents), a)
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
		Backups []native.VolumeBackup `json:"backups"`
	}{Backups: []native.VolumeBackup{}}
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
