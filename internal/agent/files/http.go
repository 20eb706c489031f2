package files

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spacesandbox/space/internal/agent/users"
)

// UploadedEntry is one element of the POST /files reply.
type UploadedEntry struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// httpError is an error with the status and client message of /files.
type httpError struct {
	status int
	msg    string
	cause  error
}

func (e *httpError) Error() string { return e.msg }

func statusErr(status int, cause error, format string, args ...any) *httpError {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...), cause: cause}
}

func (s *Service) writeError(w http.ResponseWriter, r *http.Request, err error) {
	he := &httpError{}
	if !errors.As(err, &he) {
		he = statusErr(http.StatusInternalServerError, err, "internal error")
	}
	if he.status >= 500 {
		s.log.Error("files request failed", "method", r.Method, "path", r.URL.Query().Get("path"), "err", err, "cause", he.cause)
	}
	w.Header().Del("Content-Encoding")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(he.status)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": he.status, "message": he.msg})
}

// osError maps an OS error on path to a /files status.
func osError(err error, path string) *httpError {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return statusErr(http.StatusNotFound, err, "path '%s' does not exist", path)
	case errors.Is(err, fs.ErrPermission):
		return statusErr(http.StatusForbidden, err, "permission denied: %s", path)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return statusErr(http.StatusInsufficientStorage, err, "not enough disk space: %s", path)
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.EINVAL): // EINVAL: a NUL in the path
		return statusErr(http.StatusBadRequest, err, "invalid path: %s", path)
	default:
		return statusErr(http.StatusInternalServerError, err, "error accessing %s", path)
	}
}

// httpUser resolves the username query parameter (or the default user).
func (s *Service) httpUser(r *http.Request) (*users.User, error) {
	u, err := users.Resolve(r.URL.Query().Get("username"), r.Header, s.defaults())
	if err != nil {
		return nil, statusErr(http.StatusUnauthorized, err, "invalid user: %v", err)
	}
	return u, nil
}

// Download serves GET /files: the file streamed from disk, with Range support,
// or gzip-compressed when the client accepts it and asked for no range.
func (s *Service) Download(w http.ResponseWriter, r *http.Request) {
	if err := s.download(w, r); err != nil {
		s.writeError(w, r, err)
	}
}

func (s *Service) download(w http.ResponseWriter, r *http.Request) error {
	u, err := s.httpUser(r)
	if err != nil {
		return err
	}
	raw := r.URL.Query().Get("path")
	if raw == "" {
		return statusErr(http.StatusBadRequest, nil, "path is required")
	}
	path := users.ExpandPath(raw, u)
	f, err := os.Open(path)
	if err != nil {
		return osError(err, path)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return osError(err, path)
	}
	if st.IsDir() {
		return statusErr(http.StatusBadRequest, nil, "path '%s' is a directory", path)
	}
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": filepath.Base(path)}))
	if acceptsGzip(r) && r.Header.Get("Range") == "" {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Add("Vary", "Accept-Encoding")
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodHead {
			return nil
		}
		zw := gzip.NewWriter(w)
		if _, err := io.Copy(zw, f); err != nil {
			s.log.Warn("gzip download interrupted", "path", path, "err", err)
			return nil // headers are out; nothing better to do
		}
		_ = zw.Close()
		return nil
	}
	if st.Size() == 0 {
		// procfs and sysfs files say 0 and cannot seek to their end, which
		// ServeContent needs for its length: stream them as they read.
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			if _, err := io.Copy(w, f); err != nil {
				s.log.Warn("download interrupted", "path", path, "err", err)
			}
		}
		return nil
	}
	http.ServeContent(w, r, filepath.Base(path), st.ModTime(), f)
	return nil
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") && strings.ReplaceAll(params, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

// Upload serves POST /files: multipart/form-data with "file" parts, or a raw
// body (application/octet-stream, optionally gzip-encoded) written to path.
func (s *Service) Upload(w http.ResponseWriter, r *http.Request) {
	out, err := s.upload(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(out)
}

func (s *Service) upload(r *http.Request) ([]UploadedEntry, error) {
	u, err := s.httpUser(r)
	if err != nil {
		return nil, err
	}
	md := metadataHeaders(r.Header)
	if err := ValidateMetadata(md); err != nil {
		return nil, statusErr(http.StatusBadRequest, err, "invalid metadata: %v", err)
	}
	pathParam := r.URL.Query().Get("path")
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct == "multipart/form-data" {
		return s.uploadMultipart(r, u, pathParam, md)
	}
	if pathParam == "" {
		return nil, statusErr(http.StatusBadRequest, nil, "path is required for a raw upload")
	}
	body := io.Reader(r.Body)
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, statusErr(http.StatusBadRequest, err, "invalid gzip body: %v", err)
		}
		defer zr.Close()
		body = zr
	default:
		return nil, statusErr(http.StatusBadRequest, nil, "unsupported content encoding %q", enc)
	}
	e, err := s.writeFile(users.ExpandPath(pathParam, u), body, u, md)
	if err != nil {
		return nil, err
	}
	return []UploadedEntry{e}, nil
}

func (s *Service) uploadMultipart(r *http.Request, u *users.User, pathParam string, md map[string]string) ([]UploadedEntry, error) {
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, statusErr(http.StatusBadRequest, err, "invalid multipart body: %v", err)
	}
	var out []UploadedEntry
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, statusErr(http.StatusBadRequest, err, "invalid multipart body: %v", err)
		}
		if part.FormName() != "file" {
			part.Close()
			continue
		}
		dest := pathParam
		if dest == "" {
			dest = rawFilename(part)
		}
		if dest == "" {
			part.Close()
			return nil, statusErr(http.StatusBadRequest, nil, "path or part filename is required")
		}
		e, err := s.writeFile(users.ExpandPath(dest, u), part, u, md)
		part.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, statusErr(http.StatusBadRequest, nil, "no file part in the request")
	}
	return out, nil
}

// rawFilename reads the filename parameter of a part's Content-Disposition
// unchanged: Part.FileName strips directories, but E2B puts the full
// destination path there.
func rawFilename(p *multipart.Part) string {
	_, params, err := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

// metadataHeaders collects X-Metadata-<k> headers, keys lower-cased (an
// empty key is skipped, as envd skips it).
func metadataHeaders(h http.Header) map[string]string {
	var md map[string]string
	for k, vs := range h {
		const prefix = "X-Metadata-"
		if len(k) <= len(prefix) || !strings.EqualFold(k[:len(prefix)], prefix) || len(vs) == 0 {
			continue
		}
		if md == nil {
			md = map[string]string{}
		}
		md[strings.ToLower(k[len(prefix):])] = vs[0]
	}
	return md
}

// writeFile streams body to path, creating parents and replacing any file,
// then makes md the file's whole metadata (none clears what an earlier
// upload set, as envd does). The entry reports the metadata read back.
func (s *Service) writeFile(path string, body io.Reader, u *users.User, md map[string]string) (UploadedEntry, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return UploadedEntry{}, statusErr(http.StatusBadRequest, nil, "path is a directory: %s", path)
	}
	if err := mkdirAll(filepath.Dir(path), u); err != nil {
		return UploadedEntry{}, osError(err, filepath.Dir(path))
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return UploadedEntry{}, osError(err, path)
	}
	_, err = io.Copy(f, body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			return UploadedEntry{}, statusErr(http.StatusInsufficientStorage, err, "not enough disk space available")
		}
		var pe *os.PathError
		if errors.As(err, &pe) {
			return UploadedEntry{}, osError(err, path)
		}
		return UploadedEntry{}, statusErr(http.StatusBadRequest, err, "reading upload body: %v", err)
	}
	chown(path, u)
	if err := writeMetadata(path, md); err != nil {
		switch {
		case xattrUnsupported(err):
			// procfs, sysfs: the body is written; the answer, read back,
			// says no metadata was kept.
			s.log.Warn("file metadata not stored: the filesystem has no xattrs", "path", path)
		case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
			return UploadedEntry{}, statusErr(http.StatusInsufficientStorage, err, "not enough space for file metadata: %v", err)
		default:
			return UploadedEntry{}, statusErr(http.StatusInternalServerError, err, "error writing file metadata: %v", err)
		}
	}
	return UploadedEntry{Path: path, Name: filepath.Base(path), Type: "file", Metadata: readMetadata(path)}, nil
}
