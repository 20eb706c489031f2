package sandbox

import (
	"net/netip"

	"github.com/spacesandbox/space/internal/egress/policy"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// checkNetwork refuses a policy the egress gateway could not read, with
// the parser's message (it names the entry).
func checkNetwork(p *NetworkPolicy) error {
	if _, err := policy.FromStore(p); err != nil {
		return errdefs.New(errdefs.ErrInvalidArgument, "network: %v", err)
	}
	return nil
}

// ByAddr returns the id and egress policy of the running sandbox whose
// veth address is ip: how the egress gateway knows whose a connection is.
// A pooled or booting sandbox is not found, so it has no egress at all.
func (s *Service) ByAddr(ip netip.Addr) (id string, p *NetworkPolicy, ok bool) {
	s.mu.Lock()
	entries := make([]*entry, 0, len(s.live))
	for _, e := range s.live {
		entries = append(entries, e)
	}
	s.mu.Unlock()
	for _, e := range entries {
		if e.ep.SandboxIP != ip {
			continue
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.rec.State != store.StateRunning {
			return "", nil, false
		}
		return e.rec.ID, cloneNetwork(e.rec.Network), true
	}
	return "", nil, false
}
