package files

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/spacesandbox/space/internal/agent/users"
)

type composeRequest struct {
	SourcePaths []string `json:"source_paths"`
	Destination string   `json:"destination"`
	Username    string   `json:"username"`
}

// maxComposeSources bounds one compose request.
const maxComposeSources = 10000

// Compose serves POST /files/compose (envd): the destination becomes the
// concatenation of the sources, in order. The sources are left as they are.
// The destination appears whole or not at all (written to a temporary file
// beside it, then renamed). The answer is the destination's EntryInfo.
func (s *Service) Compose(w http.ResponseWriter, r *http.Request) {
	var req composeRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 8<<20))
	if err := dec.Decode(&req); err != nil {
		s.writeError(w, r, statusErr(http.StatusBadRequest, err, "invalid JSON body: %v", err))
		return
	}
	if len(req.SourcePaths) == 0 || len(req.SourcePaths) > maxComposeSources || req.Destination == "" {
		s.writeError(w, r, statusErr(http.StatusBadRequest, nil, "source_paths (1 to %d) and destination are required", maxComposeSources))
		return
	}
	u, err := users.Resolve(req.Username, r.Header, s.defaults())
	if err != nil {
		s.writeError(w, r, statusErr(http.StatusUnauthorized, err, "invalid user: %v", err))
		return
	}
	dst := users.ExpandPath(req.Destination, u)
	if err := s.compose(dst, req.SourcePaths, u); err != nil {
		s.writeError(w, r, err)
		return
	}
	info, err := entryInfo(dst, dst)
	if err != nil {
		s.writeError(w, r, osError(err, dst))
		return
	}
	out, _ := protojson.Marshal(info)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

func (s *Service) compose(dst string, sources []string, u *users.User) error {
	if st, err := os.Stat(dst); err == nil && st.IsDir() {
		return statusErr(http.StatusBadRequest, nil, "destination is a directory: %s", dst)
	}
	if err := mkdirAll(filepath.Dir(dst), u); err != nil {
		return osError(err, filepath.Dir(dst))
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".compose-*")
	if err != nil {
		return osError(err, dst)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	for _, src := range sources {
		if err := appendFile(tmp, users.ExpandPath(src, u)); err != nil {
			tmp.Close()
			return err
		}
	}
	if err := tmp.Close(); err != nil {
		return osError(err, dst)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return osError(err, dst)
	}
	chown(tmp.Name(), u)
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return osError(err, dst)
	}
	return nil
}

func appendFile(dst *os.File, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return osError(err, src)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return statusErr(http.StatusBadRequest, nil, "source is a directory: %s", src)
	}
	if _, err := io.Copy(dst, f); err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return osError(err, src)
		}
		return osError(err, dst.Name())
	}
	return nil
}
