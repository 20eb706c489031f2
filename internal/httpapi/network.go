package httpapi

import (
	"net/http"
	"slices"

	"github.com/spacesandbox/space/internal/sandbox"
)

// networkJSON is a sandbox's egress policy in the native API. Omitted, a
// sandbox has no egress at all; internet defaults to false.
type networkJSON struct {
	Internet bool     `json:"internet"`
	Allow    []string `json:"allow,omitempty"`
	Deny     []string `json:"deny,omitempty"`
}

func (n *networkJSON) policy() *sandbox.NetworkPolicy {
	if n == nil {
		return nil
	}
	internet := n.Internet
	return &sandbox.NetworkPolicy{AllowInternet: &internet, AllowOut: slices.Clone(n.Allow), DenyOut: slices.Clone(n.Deny)}
}

func networkOf(p *sandbox.NetworkPolicy) *networkJSON {
	if p == nil {
		return nil
	}
	return &networkJSON{Internet: p.AllowInternet == nil || *p.AllowInternet, Allow: p.AllowOut, Deny: p.DenyOut}
}

// setNetwork replaces a running sandbox's egress policy; new connections
// follow it.
func (s *Server) setNetwork(w http.ResponseWriter, r *http.Request) {
	var req networkJSON
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.sandboxes.SetNetwork(r.Context(), r.PathValue("id"), req.policy()); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
