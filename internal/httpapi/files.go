package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/api/native"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

type entryJSON struct {
	Name          string    `json:"name"`
	Path          string    `json:"path"`
	Type          string    `json:"type"`
	Size          int64     `json:"size"`
	Mode          uint32    `json:"mode"`
	Permissions   string    `json:"permissions"`
	Owner         string    `json:"owner"`
	Group         string    `json:"group"`
	ModifiedAt    time.Time `json:"modified_at"`
	SymlinkTarget string    `json:"symlink_target,omitempty"`
}

func toEntry(e sandbox.FileEntry) entryJSON {
	return entryJSON{
		Name: e.Name, Path: e.Path, Type: string(e.Type), Size: e.Size, Mode: e.Mode,
		Permissions: e.Permissions, Owner: e.Owner, Group: e.Group, ModifiedAt: e.ModifiedAt,
		SymlinkTarget: e.SymlinkTarget,
	}
}

func pathParam(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	if p == "" {
		return "", errdefs.New(errdefs.ErrInvalidArgument, "query parameter path is required")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", errdefs.New(errdefs.ErrInvalidArgument, "path must not contain NUL bytes")
	}
	return p, nil
}

func (s *Server) DownloadFile(w http.ResponseWriter, r *http.Request, id native.SandboxID, params native.DownloadFileParams) {
	path, err := pathParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	file, err := s.files.ReadFile(r.Context(), id, path, r.Header.Get("Range"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer file.Close()
	h := w.Header()
	if file.Size >= 0 {
		h.Set("Content-Length", strconv.FormatInt(file.Size, 10))
	}
	if file.ContentRange != "" {
		h.Set("Content-Range", file.ContentRange)
	}
	if file.Ranges {
		h.Set("Accept-Ranges", "bytes")
	}
	if !file.ModifiedAt.IsZero() {
		h.Set("Last-Modified", file.ModifiedAt.UTC().Format(http.TimeFormat))
	}
	h.Set("Content-Type", "application/octet-stream")
	status := http.StatusOK
	if file.Partial {
		status = http.StatusPartialContent
	}
	w.WriteHeader(status)
	io.Copy(w, file)
}

func (s *Server) UploadFile(w http.ResponseWriter, r *http.Request, id native.SandboxID, params native.UploadFileParams) {
	path, err := pathParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	entry, err := s.files.WriteFile(r.Context(), id, path, r.Body, r.ContentLength)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toEntry(entry))
}

func (s *Server) RemoveFile(w http.ResponseWriter, r *http.Request, id native.SandboxID, params native.RemoveFileParams) {
	path, err := pathParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.files.RemoveFile(r.Context(), id, path); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) ListFiles(w http.ResponseWriter, r *http.Request, id native.SandboxID, params native.ListFilesParams) {
	path, err := pathParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	depth := 1
	if v := r.URL.Query().Get("depth"); v != "" {
		if depth, err = strconv.Atoi(v); err != nil || depth < 1 || depth > 64 {
			writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "depth must be an integer from 1 to 64"))
			return
		}
	}
	entries, err := s.files.ListDir(r.Context(), id, path, depth)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := struct {
		Entries []entryJSON `json:"entries"`
	}{Entries: []entryJSON{}}
	for _, e := range entries {
		out.Entries = append(out.Entries, toEntry(e))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) StatFile(w http.ResponseWriter, r *http.Request, id native.SandboxID, params native.StatFileParams) {
	path, err := pathParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	entry, err := s.files.StatFile(r.Context(), id, path)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toEntry(entry))
}

func (s *Server) MakeDir(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	var req struct {
		Path string `json:"path"`
	}
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	if req.Path == "" || strings.IndexByte(req.Path, 0) >= 0 {
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "path is required and must not contain NUL bytes"))
		return
	}
	entry, err := s.files.MakeDir(r.Context(), id, req.Path)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, toEntry(entry))
}

func (s *Server) MoveFile(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	var req struct {
		Source      string `json:"source"`
		Destination string `json:"destination"`
	}
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	if req.Source == "" || req.Destination == "" {
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "source and destination are required"))
		return
	}
	entry, err := s.files.MoveFile(r.Context(), id, req.Source, req.Destination)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toEntry(entry))
}

func (s *Server) WatchFiles(w http.ResponseWriter, r *http.Request, id native.SandboxID, params native.WatchFilesParams) {
	path, err := pathParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	recursive, _ := strconv.ParseBool(r.URL.Query().Get("recursive"))
	watch, err := s.files.WatchDir(r.Context(), id, path, recursive)
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer watch.Close()
	sse := newSSE(w)
	defer sse.Close()
	var seq uint64
	for watch.Next() {
		ev := watch.Event()
		seq++
		data, _ := json.Marshal(map[string]string{"name": ev.Name, "type": ev.Type})
		if err := sse.Event(seq, "fs", data); err != nil {
			return
		}
	}
}
