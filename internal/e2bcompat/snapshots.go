package e2bcompat

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// E2B's snapshots: a running sandbox saved so that any number of sandboxes
// can start from it, which the SDKs create by passing the snapshot's ID as
// the template (E2B keeps a snapshot as a template build). Here a snapshot
// is the sandbox service's: by default a full one (memory, processes and
// disk, as E2B's), with memory:false the disk only. The source sandbox
// runs on. A named snapshot's ID is name:tag and its names [name]; an
// unnamed one's ID is spaced's snapshot ID.

// snapshotRequest is SandboxSnapshotRequest.
type snapshotRequest struct {
	Name   *string `json:"name"`
	Memory *bool   `json:"memory"`
}

// snapshotInfoJSON is SnapshotInfo.
type snapshotInfoJSON struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func snapshotInfo(sn *sandbox.Snapshot) snapshotInfoJSON {
	out := snapshotInfoJSON{SnapshotID: sn.Ref(), Names: []string{}}
	if sn.Name != "" {
		out.Names = append(out.Names, sn.Name)
	}
	return out
}

// createSnapshot is POST /sandboxes/{id}/snapshots: 201 with the snapshot
// once it is complete in object storage.
func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req snapshotRequest
	if err := decodeJSON(w, r, &req, true); err != nil {
		writeError(w, r, err)
		return
	}
	var name string
	if req.Name != nil && *req.Name != "" {
		n, _, err := sandbox.ParseSnapshotName(*req.Name)
		if err != nil {
			writeError(w, r, err)
			return
		}
		// Snapshots and templates share E2B's names (a create takes
		// either): a template's name is not a snapshot's to take.
		if s.isTemplate(r, n) {
			writeStatus(w, http.StatusConflict, "the name "+strconv.Quote(n)+" is a template's; name the snapshot differently")
			return
		}
		name = *req.Name
	}
	if _, err := s.running(r, id); err != nil {
		writeError(w, r, err)
		return
	}
	sn, err := s.opts.Snapshots.TakeSnapshot(r.Context(), id, sandbox.SnapshotOptions{
		Memory: req.Memory == nil || *req.Memory, Name: name,
	})
	if err != nil {
		if errdefs.Class(err) == errdefs.ErrNotFound {
			err = notRunning(id)
		}
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotInfo(sn))
}

// isTemplate says whether name is a template's.
func (s *Server) isTemplate(r *http.Request, name string) bool {
	if s.opts.Templates == nil {
		return false
	}
	_, err := s.opts.Templates.Template(r.Context(), name)
	return err == nil
}

// listSnapshots is GET /snapshots?sandboxID=&name=&limit=&nextToken=:
// newest first, one entry per name:tag, paged with X-Next-Token.
func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := defaultListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			writeStatus(w, http.StatusBadRequest, "limit must be between 1 and 100")
			return
		}
		limit = n
	}
	var cur *cursor
	if v := q.Get("nextToken"); v != "" {
		c, err := decodeCursor(v)
		if err != nil {
			writeStatus(w, http.StatusBadRequest, "invalid nextToken")
			return
		}
		cur = c
	}
	all, err := s.opts.Snapshots.Snapshots(r.Context(), sandbox.SnapshotFilter{SandboxID: q.Get("sandboxID"), Ref: q.Get("name")})
	if err != nil {
		writeError(w, r, err)
		return
	}
	seen := map[string]bool{}
	var sns []*sandbox.Snapshot
	for _, sn := range all { // newest first: the first of a name:tag is the one it means
		if ref := sn.Ref(); !seen[ref] {
			seen[ref] = true
			sns = append(sns, sn)
		}
	}
	if cur != nil {
		i := 0
		for i < len(sns) && compareKey(sns[i].CreatedAt.UnixNano(), sns[i].ID, cur.T, cur.ID) >= 0 {
			i++
		}
		sns = sns[i:]
	}
	if len(sns) > limit {
		last := sns[limit-1]
		w.Header().Set("X-Next-Token", encodeCursor(cursor{T: last.CreatedAt.UnixNano(), ID: last.ID}))
		sns = sns[:limit]
	}
	out := make([]snapshotInfoJSON, 0, len(sns))
	for _, sn := range sns {
		out = append(out, snapshotInfo(sn))
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteTemplateOrSnapshot is DELETE /templates/{id}, which the SDKs'
// delete_snapshot calls too: a template's name deletes the template;
// otherwise a snapshot ID, name (every tag) or name:tag deletes those
// snapshots. 404 when it names neither.
func (s *Server) deleteTemplateOrSnapshot(w http.ResponseWriter, r *http.Request) {
	ref := r.PathValue("id")
	if s.isTemplate(r, strings.ToLower(ref)) {
		s.deleteTemplate(w, r)
		return
	}
	if _, err := s.opts.Snapshots.DeleteSnapshot(r.Context(), ref); err != nil {
		if errdefs.Class(err) == errdefs.ErrNotFound {
			err = errdefs.New(errdefs.ErrNotFound, "no template or snapshot %q", ref)
		}
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
