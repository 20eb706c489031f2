package httpapi

import (
	"net/http"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// Pools are this node's warm pools (sandbox.Pools).
type Pools interface {
	PoolStats() []sandbox.PoolStat
	SetPool(template string, min, max int) (sandbox.PoolStat, error)
}

type poolJSON struct {
	Template string `json:"template"`
	Ready    int    `json:"ready"`
	Booting  int    `json:"booting"`
	Target   int    `json:"target"`
	Min      int    `json:"min"`
	Max      int    `json:"max"`
}

func toPoolJSON(p sandbox.PoolStat) poolJSON {
	return poolJSON{Template: p.Template, Ready: p.Ready, Booting: p.Booting, Target: p.Target, Min: p.Min, Max: p.Max}
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
	out := []poolJSON{}
	for _, p := range s.pools.PoolStats() {
		out = append(out, toPoolJSON(p))
	}
	writeJSON(w, http.StatusOK, map[string]any{"pools": out})
}

func (s *Server) SetPool(w http.ResponseWriter, r *http.Request, templateName string) {
	if !s.poolsOrNotFound(w, r) {
		return
	}
	var req struct {
		Min *int `json:"min"`
		Max *int `json:"max"`
	}
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	if req.Min == nil || req.Max == nil {
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "min and max are required"))
		return
	}
	p, err := s.pools.SetPool(templateName, *req.Min, *req.Max)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toPoolJSON(p))
}
