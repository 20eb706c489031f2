package httpapi

import (
	"net/http"
	"slices"

	"github.com/spacesandbox/space/api/native"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// networkJSON is a sandbox's egress policy in the native API. Omitted, a
// sandbox has no egress at all; internet defaults to false.
type networkJSON struct {
	Internet bool     `json:"internet"`
	Allow    []string `json:"allow,omitempty"`
	Deny     []string `json:"deny,omitempty"`
	// PublicPorts opens the sandbox's ports through the <port>-<id> proxy
	// without a token (create only; a PUT keeps what create said).
	PublicPorts bool `json:"public_ports,omitempty"`
}

func (n *networkJSON) policy() *sandbox.NetworkPolicy {
	if n == nil {
		return nil
	}
	internet, public := n.Internet, n.PublicPorts
	return &sandbox.NetworkPolicy{AllowInternet: &internet, AllowOut: slices.Clone(n.Allow), DenyOut: slices.Clone(n.Deny), AllowPublicTraffic: &public}
}

func networkOf(p *sandbox.NetworkPolicy) *networkJSON {
	if p == nil {
		return nil
	}
	return &networkJSON{
		Internet: p.AllowInternet == nil || *p.AllowInternet, Allow: p.AllowOut, Deny: p.DenyOut,
		PublicPorts: p.AllowPublicTraffic != nil && *p.AllowPublicTraffic,
	}
}

// setNetwork replaces a running sandbox's egress policy; new connections
// follow it.
func (s *Server) SetSandboxNetwork(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	var req networkJSON
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	if req.PublicPorts {
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "public_ports is set at create only"))
		return
	}
	sb, err := s.lifecycle.Get(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	p := req.policy()
	p.AllowPublicTraffic = nil
	if sb.Network != nil {
		p.AllowPublicTraffic = sb.Network.AllowPublicTraffic
	}
	if err := s.lifecycle.SetNetwork(r.Context(), id, p); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
