package httpapi

import (
	"net/http"
	"slices"

	"github.com/spacesandbox/space/api/native"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// policyOf is a request's egress policy (nil: none given, no egress at
// all); internet and public_ports default to false.
func policyOf(n *native.Network) *sandbox.NetworkPolicy {
	if n == nil {
		return nil
	}
	internet, public := deref(n.Internet), deref(n.PublicPorts)
	return &sandbox.NetworkPolicy{AllowInternet: &internet, AllowOut: slices.Clone(deref(n.Allow)), DenyOut: slices.Clone(deref(n.Deny)), AllowPublicTraffic: &public}
}

// networkOf is a sandbox's egress policy as the API answers it.
func networkOf(p *sandbox.NetworkPolicy) *native.Network {
	if p == nil {
		return nil
	}
	return &native.Network{
		Internet: ptr(p.AllowInternet == nil || *p.AllowInternet), Allow: optSlice(p.AllowOut), Deny: optSlice(p.DenyOut),
		PublicPorts: opt(p.AllowPublicTraffic != nil && *p.AllowPublicTraffic),
	}
}

// setNetwork replaces a running sandbox's egress policy; new connections
// follow it.
func (s *Server) SetSandboxNetwork(w http.ResponseWriter, r *http.Request, id native.SandboxID) {
	var req native.Network
	if err := decodeJSON(w, r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	if deref(req.PublicPorts) {
		writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "public_ports is set at create only"))
		return
	}
	sb, err := s.lifecycle.Get(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	p := policyOf(&req)
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
