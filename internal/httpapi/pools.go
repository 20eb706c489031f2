package httpapi

import (
	"net/http"

	"github.com/spacesandbox/space/api/native"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// Pools are this node's warm pools (sandbox.Pools).
type Pools interface {
	PoolStats() []sandbox.PoolStat
	SetPool(template string, min, max int) (sandbox.PoolStat, error)
}

func toPoolJSON(p sandbox.PoolStat) native.Pool {
	return native.Pool{Template: ptr(p.Template), Ready: ptr(p.Ready), Booting: ptr(p.Booting), Target: ptr(p.Target), Min: ptr(p.Min), Max: ptr(p.Max), Held: opt(p.Held)}
}

func (s *Server) poolsOrNotFound(w http.ResponseWriter, r *http.Request) bool {
	if s.pools == nil {
		writeError(w, r, errdefs.New(errdefs.ErrNotFound, "this spaced has no warm pools"))
		return false
	}
	return true
}

func (s *Server) ListPools(w http.ResponseWriter, r *http.Request) {
	if !s.poolsOrNotFound(w, r) {
		return
	}
	out := []native.Pool{}
	for _, p := range s.pools.PoolStats() {
		out = append(out, toPoolJSON(p))
	}
	writeJSON(w, http.StatusOK, map[string]any{"pools": out})
}

func (s *Server) SetPool(w http.ResponseWriter, r *http.Request, templateName string) {
	if !s.poolsOrNotFound(w, r) {
		return
	}
	// min and max are required (the spec says so: the validator refuses a
	// body without them).
	var req native.SetPoolJSONRequestBody
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	p, err := s.pools.SetPool(templateName, req.Min, req.Max)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toPoolJSON(p))
}
