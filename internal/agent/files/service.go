package files

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/spacesandbox/space/api/envd/filesystem"
	"github.com/spacesandbox/space/api/envd/filesystem/filesystemconnect"
	"github.com/spacesandbox/space/internal/agent/keepalive"
	"github.com/spacesandbox/space/internal/agent/users"
)

// Service implements filesystem.Filesystem and the /files endpoints.
type Service struct {
	defaults users.DefaultsFunc
	log      *slog.Logger

	mu       sync.Mutex
	watchers map[string]*pollWatcher
}

var _ filesystemconnect.FilesystemHandler = (*Service)(nil)

// NewService returns the filesystem service.
func NewService(defaults users.DefaultsFunc, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{defaults: defaults, log: log, watchers: map[string]*pollWatcher{}}
}

// Close stops every watcher.
func (s *Service) Close() {
	s.mu.Lock()
	ws := s.watchers
	s.watchers = map[string]*pollWatcher{}
	s.mu.Unlock()
	for _, w := range ws {
		w.w.Close()
	}
}

// resolve returns the request's user and the absolute form of path.
func (s *Service) resolve(h http.Header, path string) (*users.User, string, error) {
	u, err := users.Resolve("", h, s.defaults())
	if err != nil {
		return nil, "", connect.NewError(connect.CodeUnauthenticated, err)
	}
	return u, users.ExpandPath(path, u), nil
}

// fsError maps a filesystem error to a Connect error.
func fsError(err error, path string) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("path not found: %s", path))
	case errors.Is(err, fs.ErrPermission):
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("permission denied: %s", path))
	case errors.Is(err, syscall.ENOTDIR):
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path is not a directory: %s", path))
	case errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.ELOOP):
		// A NUL byte, an over-long name, a symlink loop: the path is bad.
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("invalid path %q: %w", path, err))
	case errors.Is(err, syscall.ENOSPC):
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("not enough disk space: %s", path))
	case errors.Is(err, syscall.EXDEV):
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("cannot move across filesystems: %s", path))
	default:
		return connect.NewError(connect.CodeInternal, fmt.Errorf("%s: %w", path, err))
	}
}

func (s *Service) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	_, path, err := s.resolve(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	e, err := entryInfo(path, path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("file not found: %w", err))
	}
	if err != nil {
		return nil, fsError(err, path)
	}
	return connect.NewResponse(&filesystem.StatResponse{Entry: e}), nil
}

func (s *Service) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	u, path, err := s.resolve(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(path); err == nil {
		if st.IsDir() {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory already exists: %s", path))
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path already exists but it is not a directory: %s", path))
	}
	if err := mkdirAll(path, u); err != nil {
		return nil, fsError(err, path)
	}
	e, err := entryInfo(path, path)
	if err != nil {
		return nil, fsError(err, path)
	}
	return connect.NewResponse(&filesystem.MakeDirResponse{Entry: e}), nil
}

func (s *Service) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	u, src, err := s.resolve(req.Header(), req.Msg.GetSource())
	if err != nil {
		return nil, err
	}
	dst := users.ExpandPath(req.Msg.GetDestination(), u)
	if _, err := os.Lstat(src); err != nil {
		return nil, fsError(err, src)
	}
	if err := mkdirAll(filepath.Dir(dst), u); err != nil {
		return nil, fsError(err, filepath.Dir(dst))
	}
	if err := os.Rename(src, dst); err != nil {
		return nil, fsError(err, dst)
	}
	e, err := entryInfo(dst, dst)
	if err != nil {
		return nil, fsError(err, dst)
	}
	return connect.NewResponse(&filesystem.MoveResponse{Entry: e}), nil
}

func (s *Service) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	_, path, err := s.resolve(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("directory not found: %w", err))
	}
	if err != nil {
		return nil, fsError(err, path)
	}
	if !st.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path is not a directory: %s", path))
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, fsError(err, path)
	}
	depth := int(req.Msg.GetDepth())
	if depth < 1 {
		depth = 1
	}
	resp := &filesystem.ListDirResponse{}
	if err := listDir(ctx, real, path, 1, depth, &resp.Entries); err != nil {
		return nil, fsError(err, path)
	}
	return connect.NewResponse(resp), nil
}

// listDir appends the entries of dir (shown as shown) down to maxDepth. It
// does not follow symlinked sub-directories.
func listDir(ctx context.Context, dir, shown string, level, maxDepth int, out *[]*filesystem.EntryInfo) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		if level > 1 {
			return nil // a sub-directory that vanished or is unreadable
		}
		return err
	}
	for _, de := range des {
		p, sp := filepath.Join(dir, de.Name()), filepath.Join(shown, de.Name())
		e, err := entryInfo(p, sp)
		if err != nil {
			continue
		}
		*out = append(*out, e)
		if de.IsDir() && level < maxDepth {
			if err := listDir(ctx, p, sp, level+1, maxDepth, out); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Service) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	_, path, err := s.resolve(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(path); err != nil {
		return nil, fsError(err, path)
	}
	return connect.NewResponse(&filesystem.RemoveResponse{}), nil
}

// watchRoot validates a watch request's path.
func (s *Service) watchRoot(h http.Header, p string) (root, shown string, err error) {
	_, shown, err = s.resolve(h, p)
	if err != nil {
		return "", "", err
	}
	st, err := os.Stat(shown)
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", connect.NewError(connect.CodeNotFound, fmt.Errorf("path %s not found: %w", shown, err))
	}
	if err != nil {
		return "", "", fsError(err, shown)
	}
	if !st.IsDir() {
		return "", "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %s not a directory", shown))
	}
	if root, err = filepath.EvalSymlinks(shown); err != nil {
		return "", "", fsError(err, shown)
	}
	return root, shown, nil
}

func (s *Service) WatchDir(ctx context.Context, req *connect.Request[filesystem.WatchDirRequest], stream *connect.ServerStream[filesystem.WatchDirResponse]) error {
	root, shown, err := s.watchRoot(req.Header(), req.Msg.GetPath())
	if err != nil {
		return err
	}
	events := make(chan *filesystem.FilesystemEvent, 1024)
	stop := make(chan struct{})
	defer close(stop)
	w, err := newWatcher(root, shown, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry(), func(ev *filesystem.FilesystemEvent) {
		select {
		case events <- ev:
		case <-stop:
		}
	})
	if err != nil {
		return fsError(err, shown)
	}
	defer w.Close()

	if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Start{Start: &filesystem.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	interval := keepalive.Interval(req.Header())
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-events:
			if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
				return err
			}
		case <-timer.C:
			if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Keepalive{Keepalive: &filesystem.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
		}
		timer.Reset(interval)
	}
}

func (s *Service) CreateWatcher(ctx context.Context, req *connect.Request[filesystem.CreateWatcherRequest]) (*connect.Response[filesystem.CreateWatcherResponse], error) {
	root, shown, err := s.watchRoot(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	pw := &pollWatcher{}
	w, err := newWatcher(root, shown, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry(), pw.push)
	if err != nil {
		return nil, fsError(err, shown)
	}
	pw.w = w
	var b [12]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	s.mu.Lock()
	s.watchers[id] = pw
	s.mu.Unlock()
	return connect.NewResponse(&filesystem.CreateWatcherResponse{WatcherId: id}), nil
}

func (s *Service) watcher(id string) (*pollWatcher, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pw, ok := s.watchers[id]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher with id %s not found", id))
	}
	return pw, nil
}

func (s *Service) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystem.GetWatcherEventsRequest]) (*connect.Response[filesystem.GetWatcherEventsResponse], error) {
	pw, err := s.watcher(req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.GetWatcherEventsResponse{Events: pw.take()}), nil
}

func (s *Service) RemoveWatcher(ctx context.Context, req *connect.Request[filesystem.RemoveWatcherRequest]) (*connect.Response[filesystem.RemoveWatcherResponse], error) {
	pw, err := s.watcher(req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	delete(s.watchers, req.Msg.GetWatcherId())
	s.mu.Unlock()
	pw.w.Close()
	return connect.NewResponse(&filesystem.RemoveWatcherResponse{}), nil
}
