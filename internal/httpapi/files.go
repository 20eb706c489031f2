package httpapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/spacesandbox/space/api/envd/filesystem"
	"github.com/spacesandbox/space/internal/errdefs"
)

// Every file operation goes through the sandbox's agent, which resolves the
// path inside the sandbox's own view: spaced never opens a sandbox's files
// by host path, so symlinks inside a sandbox cannot point spaced anywhere.

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

func toEntry(e *filesystem.EntryInfo) entryJSON {
	t := "other"
	switch e.GetType() {
	case filesystem.FileType_FILE_TYPE_FILE:
		t = "file"
	case filesystem.FileType_FILE_TYPE_DIRECTORY:
		t = "dir"
	case filesystem.FileType_FILE_TYPE_SYMLINK:
		t = "symlink"
	}
	out := entryJSON{
		Name: e.GetName(), Path: e.GetPath(), Type: t, Size: e.GetSize(), Mode: e.GetMode(),
		Permissions: e.GetPermissions(), Owner: e.GetOwner(), Group: e.GetGroup(),
		SymlinkTarget: e.GetSymlinkTarget(),
	}
	if e.GetModifiedTime() != nil {
		out.ModifiedAt = e.GetModifiedTime().AsTime()
	}
	return out
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

// agentHTTPError turns a non-2xx answer of the agent's /files into an
// error class; the agent's JSON message is about the caller's own path.
func agentHTTPError(resp *http.Response) error {
	var body struct {
		Message string `json:"message"`
	}
	json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&body)
	msg := truncate(body.Message, 512)
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	switch resp.StatusCode {
	case http.StatusNotFound:
		return errdefs.New(errdefs.ErrNotFound, "%s", msg)
	case http.StatusBadRequest:
		return errdefs.New(errdefs.ErrInvalidArgument, "%s", msg)
	case http.StatusInsufficientStorage:
		return errdefs.New(errdefs.ErrNoSpace, "%s", msg)
	case http.StatusRequestedRangeNotSatisfiable:
		return errdefs.New(errdefs.ErrInvalidArgument, "range not satisfiable")
	}
	return errdefs.Wrap(errdefs.ErrUnavailable, fmt.Errorf("agent answered %d: %s", resp.StatusCode, msg), "sandbox agent failed")
}

func (s *Server) downloadFile(w http.ResponseWriter, r *http.Request) {
	path, err := pathParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	agent, ok := s.agent(w, r)
	if !ok {
		return
	}
	req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, agent.BaseURL+"/files?path="+url.QueryEscape(path), nil)
	if rg := r.Header.Get("Range"); rg != "" {
		req.Header.Set("Range", rg)
	}
	resp, err := agent.HTTP.Do(req)
	if err != nil {
		writeError(w, r, fromAgent(err))
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPartialContent {
		writeError(w, r, agentHTTPError(resp))
		return
	}
	for _, h := range []string{"Content-Length", "Content-Range", "Accept-Ranges", "Last-Modified"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

func (s *Server) uploadFile(w http.ResponseWriter, r *http.Request) {
	path, err := pathParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	agent, ok := s.agent(w, r)
	if !ok {
		return
	}
	// The body streams straight through to the agent.
	req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, agent.BaseURL+"/files?path="+url.QueryEscape(path), r.Body)
	req.Header.Set("Content-Type", "application/octet-stream")
	req.ContentLength = r.ContentLength
	resp, err := agent.HTTP.Do(req)
	if err != nil {
		writeError(w, r, fromAgent(err))
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		writeError(w, r, agentHTTPError(resp))
		return
	}
	var written []struct {
		Path string `json:"path"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&written); err != nil || len(written) == 0 {
		writeError(w, r, errdefs.Wrap(errdefs.ErrUnavailable, err, "sandbox agent gave no upload result"))
		return
	}
	st, err := agent.Filesystem.Stat(r.Context(), connect.NewRequest(&filesystem.StatRequest{Path: written[0].Path}))
	if err != nil {
		writeError(w, r, fromAgent(err))
		return
	}
	writeJSON(w, http.StatusOK, toEntry(st.Msg.GetEntry()))
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request) {
	path, err := pathParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	agent, ok := s.agent(w, r)
	if !ok {
		return
	}
	if _, err := agent.Filesystem.Remove(r.Context(), connect.NewRequest(&filesystem.RemoveRequest{Path: path})); err != nil {
		writeError(w, r, fromAgent(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) {
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
	agent, ok := s.agent(w, r)
	if !ok {
		return
	}
	resp, err := agent.Filesystem.ListDir(r.Context(), connect.NewRequest(&filesystem.ListDirRequest{Path: path, Depth: uint32(depth)}))
	if err != nil {
		writeError(w, r, fromAgent(err))
		return
	}
	out := struct {
		Entries []entryJSON `json:"entries"`
	}{Entries: []entryJSON{}}
	for _, e := range resp.Msg.GetEntries() {
		out.Entries = append(out.Entries, toEntry(e))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) statFile(w http.ResponseWriter, r *http.Request) {
	path, err := pathParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	agent, ok := s.agent(w, r)
	if !ok {
		return
	}
	resp, err := agent.Filesystem.Stat(r.Context(), connect.NewRequest(&filesystem.StatRequest{Path: path}))
	if err != nil {
		writeError(w, r, fromAgent(err))
		return
	}
	writeJSON(w, http.StatusOK, toEntry(resp.Msg.GetEntry()))
}

func (s *Server) makeDir(w http.ResponseWriter, r *http.Request) {
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
	agent, ok := s.agent(w, r)
	if !ok {
		return
	}
	resp, err := agent.Filesystem.MakeDir(r.Context(), connect.NewRequest(&filesystem.MakeDirRequest{Path: req.Path}))
	if err != nil {
		writeError(w, r, fromAgent(err))
		return
	}
	writeJSON(w, http.StatusCreated, toEntry(resp.Msg.GetEntry()))
}

func (s *Server) moveFile(w http.ResponseWriter, r *http.Request) {
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
	agent, ok := s.agent(w, r)
	if !ok {
		return
	}
	resp, err := agent.Filesystem.Move(r.Context(), connect.NewRequest(&filesystem.MoveRequest{Source: req.Source, Destination: req.Destination}))
	if err != nil {
		writeError(w, r, fromAgent(err))
		return
	}
	writeJSON(w, http.StatusOK, toEntry(resp.Msg.GetEntry()))
}

func (s *Server) watchFiles(w http.ResponseWriter, r *http.Request) {
	path, err := pathParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	recursive, _ := strconv.ParseBool(r.URL.Query().Get("recursive"))
	agent, ok := s.agent(w, r)
	if !ok {
		return
	}
	stream, err := agent.Filesystem.WatchDir(r.Context(), connect.NewRequest(&filesystem.WatchDirRequest{Path: path, Recursive: recursive}))
	if err != nil {
		writeError(w, r, fromAgent(err))
		return
	}
	defer stream.Close()
	if !stream.Receive() { // the start event, or the error
		writeError(w, r, fromAgent(stream.Err()))
		return
	}
	sse := newSSE(w)
	defer sse.Close()
	var id uint64
	for stream.Receive() {
		ev := stream.Msg().GetFilesystem()
		if ev == nil {
			continue
		}
		id++
		typ := strings.ToLower(strings.TrimPrefix(ev.GetType().String(), "EVENT_TYPE_"))
		data, _ := json.Marshal(map[string]string{"name": ev.GetName(), "type": typ})
		if err := sse.Event(id, "fs", data); err != nil {
			return
		}
	}
}
