package e2bcompat

import (
	"context"
	"crypto/subtle"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/tenant"
	"github.com/spacesandbox/space/internal/volume"
)

// E2B's volumes: the control plane (/volumes, with the API key) and the
// volume content API (/volumecontent/{volumeID}/..., with the volume's own
// bearer token, which create and get return), both onto package volume.
// The SDKs send content calls to E2B_VOLUME_API_URL (or https://api.<domain>),
// so a client sets E2B_VOLUME_API_URL to spaced's URL as well.

// Volumes is what the E2B layer needs of the volume service.
type Volumes interface {
	Create(ctx context.Context, req volume.CreateRequest) (*volume.Volume, error)
	Get(ctx context.Context, ref string) (*volume.Volume, error)
	List(ctx context.Context) ([]*volume.Volume, error)
	Delete(ctx context.Context, ref string) error
	Token(ctx context.Context, id string) (string, error)
	Stat(ctx context.Context, ref, p string) (*volume.Entry, error)
	ListDir(ctx context.Context, ref, p string, depth int) ([]*volume.Entry, error)
	Open(ctx context.Context, ref, p string) (io.ReadCloser, *volume.Entry, error)
	Write(ctx context.Context, ref, p string, r io.Reader, a volume.Attrs) (*volume.Entry, error)
	MakeDir(ctx context.Context, ref, p string, parents bool, a volume.Attrs) (*volume.Entry, error)
	Remove(ctx context.Context, ref, p string) error
	SetAttrs(ctx context.Context, ref, p string, a volume.Attrs) (*volume.Entry, error)
}

// VolumeTokenKey is what audit lines name a volume's own token by.
const VolumeTokenKey = "volume-token"

// volumeRoutes are the volume routes; content routes check the volume's
// token themselves (public here).
func (s *Server) volumeRoutes() []apiRoute {
	return []apiRoute{
		{"POST /volumes", false, s.createVolume},
		{"GET /volumes", false, s.listVolumes},
		{"GET /volumes/{id}", false, s.getVolume},
		{"DELETE /volumes/{id}", false, s.deleteVolume},
		{"GET /volumecontent/{id}/path", true, s.volumeContent(s.statVolumePath)},
		{"PATCH /volumecontent/{id}/path", true, s.volumeContent(s.patchVolumePath)},
		{"DELETE /volumecontent/{id}/path", true, s.volumeContent(s.removeVolumePath)},
		{"GET /volumecontent/{id}/dir", true, s.volumeContent(s.listVolumeDir)},
		{"POST /volumecontent/{id}/dir", true, s.volumeContent(s.makeVolumeDir)},
		{"GET /volumecontent/{id}/file", true, s.volumeContent(s.readVolumeFile)},
		{"PUT /volumecontent/{id}/file", true, s.volumeContent(s.writeVolumeFile)},
	}
}

// volumeJSON is VolumeAndToken (create, get) or Volume (list: no token).
type volumeJSON struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	Token    string `json:"token,omitempty"`
}

// volumeMountJSON is SandboxVolumeMount.
type volumeMountJSON struct {
	Name string `json:"name"`
	Path string `json:"path"`
	// ReadOnly is spaced's: the SDKs do not send it (their mounts are
	// read-write).
	ReadOnly bool `json:"readOnly,omitempty"`
}

// volumeEntryJSON is VolumeEntryStat.
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

func entryJSON(e *volume.Entry) volumeEntryJSON {
	return volumeEntryJSON{Name: e.Name, Type: e.Type, Path: e.Path, Size: e.Size, Mode: e.Mode, UID: e.UID, GID: e.GID,
		Atime: e.Atime, Mtime: e.Mtime, Ctime: e.Ctime, Target: e.Target}
}

func toMounts(in []volumeMountJSON) []sandbox.VolumeMount {
	var out []sandbox.VolumeMount
	for _, m := range in {
		out = append(out, sandbox.VolumeMount{Name: m.Name, Path: m.Path, ReadOnly: m.ReadOnly})
	}
	return out
}

func fromMounts(in []sandbox.VolumeMount) []volumeMountJSON {
	out := []volumeMountJSON{}
	for _, m := range in {
		out = append(out, volumeMountJSON{Name: m.Name, Path: m.Path, ReadOnly: m.ReadOnly})
	}
	return out
}

// volumes answers 501 when spaced runs without volumes.
func (s *Server) volumes(w http.ResponseWriter) (Volumes, bool) {
	if s.opts.Volumes == nil {
		writeStatus(w, http.StatusNotImplemented, "volumes are not available on this node")
		return nil, false
	}
	return s.opts.Volumes, true
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) {
	vs, ok := s.volumes(w)
	if !ok {
		return
	}
	var req struct {
		Name string `json:"name"`
	}
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	v, err := vs.Create(r.Context(), volume.CreateRequest{Name: req.Name})
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.writeVolume(w, r, http.StatusCreated, v)
}

func (s *Server) writeVolume(w http.ResponseWriter, r *http.Request, code int, v *volume.Volume) {
	tok, err := s.opts.Volumes.Token(r.Context(), v.ID)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, code, volumeJSON{VolumeID: v.ID, Name: v.Name, Token: tok})
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	vs, ok := s.volumes(w)
	if !ok {
		return
	}
	all, err := vs.List(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := []volumeJSON{}
	for _, v := range all {
		out = append(out, volumeJSON{VolumeID: v.ID, Name: v.Name})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) {
	vs, ok := s.volumes(w)
	if !ok {
		return
	}
	v, err := vs.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.writeVolume(w, r, http.StatusOK, v)
}

func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) {
	vs, ok := s.volumes(w)
	if !ok {
		return
	}
	if err := vs.Delete(r.Context(), r.PathValue("id")); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// volumeContent checks a content request's credentials: the volume's own
// token as a bearer token (what the SDKs send), or spaced's API key. An
// unknown volume without the API key is a 401, so tokens cannot be used to
// learn which volumes exist.
func (s *Server) volumeContent(next func(w http.ResponseWriter, r *http.Request, vs Volumes, id, path string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		vs, ok := s.volumes(w)
		if !ok {
			return
		}
		id := r.PathValue("id")
		bearer, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		bearer = strings.TrimSpace(bearer)
		key := r.Header.Get("X-API-Key")
		if key == "" {
			key = bearer
		}
		principal, keyErr := s.opts.Tenants.Principal(key)
		if key != "" && keyErr == nil {
			// An API key reaches its own tenant's volumes only.
			tenant.RunsAs(r.Context(), principal)
			ctx, release := s.opts.Tenants.Hold(r.Context(), principal)
			defer release()
			r = r.WithContext(ctx)
		} else {
			tok, err := vs.Token(r.Context(), id)
			if bearer == "" || err != nil || subtle.ConstantTimeCompare([]byte(bearer), []byte(tok)) != 1 {
				writeStatus(w, http.StatusUnauthorized, "missing or wrong volume token: send Authorization: Bearer <the token Volume.create or Volume.connect returned>")
				return
			}
			// The volume's own token: the call runs as the volume's tenant.
			if v, err := vs.Get(r.Context(), id); err == nil {
				tenant.RunsAs(r.Context(), tenant.Principal{Tenant: tenant.Of(v.Tenant), Key: VolumeTokenKey})
			}
		}
		p := r.URL.Query().Get("path")
		if p == "" {
			writeStatus(w, http.StatusBadRequest, "query parameter path is required")
			return
		}
		next(w, r, vs, id, p)
	}
}

func (s *Server) statVolumePath(w http.ResponseWriter, r *http.Request, vs Volumes, id, p string) {
	e, err := vs.Stat(r.Context(), id, p)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, entryJSON(e))
}

func (s *Server) patchVolumePath(w http.ResponseWriter, r *http.Request, vs Volumes, id, p string) {
	var req struct {
		UID  *uint32 `json:"uid"`
		GID  *uint32 `json:"gid"`
		Mode *uint32 `json:"mode"`
	}
	if err := decodeJSON(w, r, &req, true); err != nil {
		writeError(w, r, err)
		return
	}
	e, err := vs.SetAttrs(r.Context(), id, p, volume.Attrs{UID: req.UID, GID: req.GID, Mode: req.Mode})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, entryJSON(e))
}

func (s *Server) removeVolumePath(w http.ResponseWriter, r *http.Request, vs Volumes, id, p string) {
	if err := vs.Remove(r.Context(), id, p); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listVolumeDir(w http.ResponseWriter, r *http.Request, vs Volumes, id, p string) {
	depth := 1
	if v := r.URL.Query().Get("depth"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			writeStatus(w, http.StatusBadRequest, "depth must be an integer")
			return
		}
		depth = n
	}
	es, err := vs.ListDir(r.Context(), id, p, depth)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := []volumeEntryJSON{}
	for _, e := range es {
		out = append(out, entryJSON(e))
	}
	writeJSON(w, http.StatusOK, out)
}

// attrs reads uid, gid and mode from the query: numbers as the SDKs send
// them (mode 0o644 arrives as 420).
func attrs(r *http.Request) (volume.Attrs, bool) {
	var a volume.Attrs
	q := r.URL.Query()
	for _, f := range []struct {
		name string
		dst  **uint32
	}{{"uid", &a.UID}, {"gid", &a.GID}, {"mode", &a.Mode}} {
		if v := q.Get(f.name); v != "" {
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return a, false
			}
			u := uint32(n)
			*f.dst = &u
		}
	}
	return a, true
}

func (s *Server) makeVolumeDir(w http.ResponseWriter, r *http.Request, vs Volumes, id, p string) {
	a, ok := attrs(r)
	if !ok {
		writeStatus(w, http.StatusBadRequest, "uid, gid and mode must be numbers")
		return
	}
	force, _ := strconv.ParseBool(r.URL.Query().Get("force"))
	e, err := vs.MakeDir(r.Context(), id, p, force, a)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, entryJSON(e))
}

func (s *Server) readVolumeFile(w http.ResponseWriter, r *http.Request, vs Volumes, id, p string) {
	rc, e, err := vs.Open(r.Context(), id, p)
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

// writeVolumeFile creates or replaces a file (E2B's force is accepted; a
// write always replaces, as the SDKs document).
func (s *Server) writeVolumeFile(w http.ResponseWriter, r *http.Request, vs Volumes, id, p string) {
	a, ok := attrs(r)
	if !ok {
		writeStatus(w, http.StatusBadRequest, "uid, gid and mode must be numbers")
		return
	}
	e, err := vs.Write(r.Context(), id, p, r.Body, a)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, entryJSON(e))
}
