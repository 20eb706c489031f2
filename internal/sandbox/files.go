package sandbox

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/spacesandbox/space/api/envd/filesystem"
	"github.com/spacesandbox/space/internal/errdefs"
)

// Files reads and writes sandboxes' files through each one's agent, which
// resolves every path inside the sandbox's own view: spaced never opens a
// sandbox's files by host path, so symlinks inside a sandbox cannot point
// spaced anywhere. Every error is classified (errdefs) here.
type Files struct {
	agents Agents
}

// NewFiles moves files through the agents of agents.
func NewFiles(agents Agents) *Files { return &Files{agents: agents} }

// FileType is what kind of file an entry is.
type FileType string

const (
	FileTypeFile    FileType = "file"
	FileTypeDir     FileType = "dir"
	FileTypeSymlink FileType = "symlink"
	FileTypeOther   FileType = "other"
)

// FileEntry is a file in a sandbox, as stat sees it.
type FileEntry struct {
	Name, Path    string
	Type          FileType
	Size          int64
	Mode          uint32
	Permissions   string
	Owner, Group  string
	ModifiedAt    time.Time
	SymlinkTarget string
}

// StatFile describes the file at path.
func (f *Files) StatFile(ctx context.Context, id, path string) (FileEntry, error) {
	agent, err := f.agents.Agent(id)
	if err != nil {
		return FileEntry{}, err
	}
	return agent.stat(ctx, path)
}

// RemoveFile removes the file or directory tree at path.
func (f *Files) RemoveFile(ctx context.Context, id, path string) error {
	agent, err := f.agents.Agent(id)
	if err != nil {
		return err
	}
	_, err = agent.Filesystem.Remove(ctx, connect.NewRequest(&filesystem.RemoveRequest{Path: path}))
	return fromAgent(err)
}

// ListDir lists the directory at path, depth levels down (1: its entries).
func (f *Files) ListDir(ctx context.Context, id, path string, depth int) ([]FileEntry, error) {
	agent, err := f.agents.Agent(id)
	if err != nil {
		return nil, err
	}
	resp, err := agent.Filesystem.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: path, Depth: uint32(depth)}))
	if err != nil {
		return nil, fromAgent(err)
	}
	var out []FileEntry
	for _, e := range resp.Msg.GetEntries() {
		out = append(out, fileEntry(e))
	}
	return out, nil
}

// MakeDir makes the directory at path, and its parents.
func (f *Files) MakeDir(ctx context.Context, id, path string) (FileEntry, error) {
	agent, err := f.agents.Agent(id)
	if err != nil {
		return FileEntry{}, err
	}
	resp, err := agent.Filesystem.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: path}))
	if err != nil {
		return FileEntry{}, fromAgent(err)
	}
	return fileEntry(resp.Msg.GetEntry()), nil
}

// MoveFile renames source to destination.
func (f *Files) MoveFile(ctx context.Context, id, source, destination string) (FileEntry, error) {
	agent, err := f.agents.Agent(id)
	if err != nil {
		return FileEntry{}, err
	}
	resp, err := agent.Filesystem.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: source, Destination: destination}))
	if err != nil {
		return FileEntry{}, fromAgent(err)
	}
	return fileEntry(resp.Msg.GetEntry()), nil
}

func (a *AgentConn) stat(ctx context.Context, path string) (FileEntry, error) {
	resp, err := a.Filesystem.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: path}))
	if err != nil {
		return FileEntry{}, fromAgent(err)
	}
	return fileEntry(resp.Msg.GetEntry()), nil
}

func fileEntry(e *filesystem.EntryInfo) FileEntry {
	t := FileTypeOther
	switch e.GetType() {
	case filesystem.FileType_FILE_TYPE_FILE:
		t = FileTypeFile
	case filesystem.FileType_FILE_TYPE_DIRECTORY:
		t = FileTypeDir
	case filesystem.FileType_FILE_TYPE_SYMLINK:
		t = FileTypeSymlink
	}
	out := FileEntry{
		Name: e.GetName(), Path: e.GetPath(), Type: t, Size: e.GetSize(), Mode: e.GetMode(),
		Permissions: e.GetPermissions(), Owner: e.GetOwner(), Group: e.GetGroup(),
		SymlinkTarget: e.GetSymlinkTarget(),
	}
	if e.GetModifiedTime() != nil {
		out.ModifiedAt = e.GetModifiedTime().AsTime()
	}
	return out
}

// FileContent is a file read from a sandbox, whole or a byte range of it.
// The caller closes it.
type FileContent struct {
	io.ReadCloser
	// Partial: the byte range asked for, not the whole file.
	Partial bool
	// Size is how many bytes follow; -1 when unknown (read to EOF).
	Size int64
	// ContentRange is the range given, as HTTP's Content-Range says it
	// ("bytes 0-99/1000"); "" for the whole file.
	ContentRange string
	// Ranges: the file can be read by byte ranges.
	Ranges bool
	// ModifiedAt is zero when not known.
	ModifiedAt time.Time
}

// ReadFile opens the file at path. byteRange, if not "", is an HTTP Range
// header's value (RFC 9110, "bytes=0-99") asking for part of it.
func (f *Files) ReadFile(ctx context.Context, id, path, byteRange string) (*FileContent, error) {
	agent, err := f.agents.Agent(id)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, agent.BaseURL+"/files?path="+url.QueryEscape(path), nil)
	if err != nil {
		return nil, errdefs.Wrap(errdefs.ErrInvalidArgument, err, "path %q cannot be read", path)
	}
	if byteRange != "" {
		req.Header.Set("Range", byteRange)
	}
	resp, err := agent.HTTP.Do(req)
	if err != nil {
		return nil, fromAgent(err)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPartialContent {
		defer resp.Body.Close()
		return nil, fromAgentHTTP(resp)
	}
	out := &FileContent{
		ReadCloser: resp.Body, Partial: resp.StatusCode == http.StatusPartialContent, Size: resp.ContentLength,
		ContentRange: resp.Header.Get("Content-Range"), Ranges: resp.Header.Get("Accept-Ranges") == "bytes",
	}
	if lm := resp.Header.Get("Last-Modified"); lm != "" {
		out.ModifiedAt, _ = http.ParseTime(lm)
	}
	return out, nil
}

// WriteFile writes the file at path (making its directories) from body,
// size bytes long (-1: unknown), and describes what it wrote.
func (f *Files) WriteFile(ctx context.Context, id, path string, body io.Reader, size int64) (FileEntry, error) {
	agent, err := f.agents.Agent(id)
	if err != nil {
		return FileEntry{}, err
	}
	// The body streams straight through to the agent.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, agent.BaseURL+"/files?path="+url.QueryEscape(path), body)
	if err != nil {
		return FileEntry{}, errdefs.Wrap(errdefs.ErrInvalidArgument, err, "path %q cannot be written", path)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.ContentLength = size
	resp, err := agent.HTTP.Do(req)
	if err != nil {
		return FileEntry{}, fromAgent(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return FileEntry{}, fromAgentHTTP(resp)
	}
	var written []struct {
		Path string `json:"path"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&written); err != nil || len(written) == 0 {
		return FileEntry{}, errdefs.Wrap(errdefs.ErrUnavailable, err, "sandbox agent gave no upload result")
	}
	return agent.stat(ctx, written[0].Path)
}

// FileEvent is a change under a watched directory.
type FileEvent struct {
	// Name is the changed file's path relative to the watched directory.
	Name string
	// Type is create, write, remove, rename or chmod.
	Type string
}

// DirWatch is the changes under a directory, read with Next and Event as
// they come.
type DirWatch struct {
	stream *connect.ServerStreamForClient[filesystem.WatchDirResponse]
	ev     FileEvent
}

// WatchDir watches the directory at path (and below it, if recursive). It
// returns once the watch is in place.
func (f *Files) WatchDir(ctx context.Context, id, path string, recursive bool) (*DirWatch, error) {
	agent, err := f.agents.Agent(id)
	if err != nil {
		return nil, err
	}
	stream, err := agent.Filesystem.WatchDir(ctx, connect.NewRequest(&filesystem.WatchDirRequest{Path: path, Recursive: recursive}))
	if err != nil {
		return nil, fromAgent(err)
	}
	if !stream.Receive() { // the start event, or the error
		err := fromAgent(stream.Err())
		stream.Close()
		if err == nil {
			err = errdefs.New(errdefs.ErrUnavailable, "sandbox agent ended the watch before it started")
		}
		return nil, err
	}
	return &DirWatch{stream: stream}, nil
}

// Next waits for the next change; false when the watch has ended.
func (w *DirWatch) Next() bool {
	for w.stream.Receive() {
		if ev := w.stream.Msg().GetFilesystem(); ev != nil {
			w.ev = FileEvent{Name: ev.GetName(), Type: strings.ToLower(strings.TrimPrefix(ev.GetType().String(), "EVENT_TYPE_"))}
			return true
		}
	}
	return false
}

// Event is the change Next got.
func (w *DirWatch) Event() FileEvent { return w.ev }

// Close ends the watch.
func (w *DirWatch) Close() error { return w.stream.Close() }
