package httpapi

import (
	"net/http"
	"strings"

	"github.com/spacesandbox/space/api/native"

	"github.com/spacesandbox/space/internal/errdefs"
)

// The admin's node routes (cluster mode). A drain runs on the node it
// names: any node forwards the request there (cluster.Forwarder), so here
// {node} is this node or one the cluster does not have.

func (s *Server) clusterOrNotFound(w http.ResponseWriter, r *http.Request) bool {
	if s.cluster == nil {
		writeError(w, r, errdefs.New(errdefs.ErrNotFound, "this spaced is not in cluster mode (SPACE_DATABASE_URL is not set)"))
		return false
	}
	return true
}

func (s *Server) ListNodes(w http.ResponseWriter, r *http.Request) {
	if !s.clusterOrNotFound(w, r) {
		return
	}
	ms, err := s.cluster.Members(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	nodes := make([]native.Node, 0, len(ms))
	for _, m := range ms {
		nodes = append(nodes, native.Node{Id: ptr(m.ID), Address: ptr(m.Address), Epoch: ptr(m.Epoch), StartedAt: ptr(m.StartedAt),
			LeaseUntil: ptr(m.LeaseUntil), Alive: ptr(m.Alive), Draining: ptr(m.Draining),
			Info: &native.NodeInfo{Sandboxes: ptr(m.Info.Sandboxes), Capacity: opt(m.Info.Capacity), Version: opt(m.Info.Version), Pools: optMap(m.Info.Pools)}})
	}
	if ms == nil {
		nodes = nil
	}
	// self: which of them answered (the console marks this node).
	writeJSON(w, http.StatusOK, map[string]any{"nodes": nodes, "self": s.cluster.Self()})
}

func (s *Server) thisNode(w http.ResponseWriter, r *http.Request, node string) bool {
	if !s.clusterOrNotFound(w, r) {
		return false
	}
	if node != s.cluster.Self() {
		writeError(w, r, errdefs.New(errdefs.ErrNotFound, "no node %q in the cluster", node))
		return false
	}
	return true
}

func (s *Server) DrainNode(w http.ResponseWriter, r *http.Request, node string) {
	if !s.thisNode(w, r, node) {
		return
	}
	report, err := s.cluster.Drain(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	var moves []native.DrainMove // null, [] or the moves, as the report has them
	if report.Moves != nil {
		moves = make([]native.DrainMove, 0, len(report.Moves))
	}
	for _, m := range report.Moves {
		moves = append(moves, native.DrainMove{Sandbox: ptr(m.Sandbox), To: ptr(m.To), PauseMs: ptr(m.PauseMS), ResumeMs: ptr(m.ResumeMS),
			TotalMs: ptr(m.TotalMS), Error: opt(m.Error)})
	}
	writeJSON(w, http.StatusOK, native.DrainReport{Node: ptr(report.Node), Moves: &moves})
}

func (s *Server) UndrainNode(w http.ResponseWriter, r *http.Request, node string) {
	if !s.thisNode(w, r, node) {
		return
	}
	if err := s.cluster.Undrain(r.Context()); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// NodeOf answers the node an admin's node route names ("" for none): a
// cluster node forwards the request to it.
func NodeOf(r *http.Request) string {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/admin/nodes/")
	if !ok {
		return ""
	}
	node, _, _ := strings.Cut(rest, "/")
	return node
}
