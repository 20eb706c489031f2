package network

import (
	"net/netip"
	"strings"
	"testing"
)

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		cidr      string
		slots     int
		slot      int
		host, sbx string
		wantErr   bool
	}{
		{"10.240.0.0/16", 16384, 0, "10.240.0.1", "10.240.0.2", false},
		{"10.240.0.0/16", 16384, 1, "10.240.0.5", "10.240.0.6", false},
		{"10.240.0.0/16", 16384, 16383, "10.240.255.253", "10.240.255.254", false},
		{"10.240.0.0/16", 16384, 16384, "", "", true},
		{"10.240.0.0/16", 16384, -1, "", "", true},
		// A range given with host bits set is its network.
		{"10.241.7.9/24", 64, 2, "10.241.7.9", "10.241.7.10", false},
		{"192.168.3.0/30", 1, 0, "192.168.3.1", "192.168.3.2", false},
	} {
		p := Plan{CIDR: netip.MustParsePrefix(tc.cidr)}
		if got := p.Slots(); got != tc.slots {
			t.Errorf("%s: %d slots, want %d", tc.cidr, got, tc.slots)
		}
		ep, err := p.Endpoint("abcdefghijklmnopqrst", tc.slot)
		if tc.wantErr {
			if err == nil {
				t.Errorf("%s slot %d: got %+v, want an error", tc.cidr, tc.slot, ep)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s slot %d: %v", tc.cidr, tc.slot, err)
		}
		if ep.HostIP.String() != tc.host || ep.SandboxIP.String() != tc.sbx || ep.PrefixLen != 30 {
			t.Errorf("%s slot %d: host %s sandbox %s /%d, want %s %s /30", tc.cidr, tc.slot, ep.HostIP, ep.SandboxIP, ep.PrefixLen, tc.host, tc.sbx)
		}
		// Both ends are in one /30 that holds nothing of the next slot.
		if netip.PrefixFrom(ep.HostIP, 30).Masked() != netip.PrefixFrom(ep.SandboxIP, 30).Masked() {
			t.Errorf("%s slot %d: ends in different /30s", tc.cidr, tc.slot)
		}
	}
}

// Names fit the kernel's limits (IFNAMSIZ: 15 characters) and start with
// the prefix the egress firewall matches on, whatever the id's length.
func TestNames(t *testing.T) {
	for _, id := range []string{"a", "abcdefghijkl", "abcdefghijklmnopqrst"} {
		ep := Names(id)
		for _, name := range []string{ep.HostIf, peerName(ep)} {
			if len(name) > 15 {
				t.Errorf("%s: interface name %q is longer than 15", id, name)
			}
		}
		if !strings.HasPrefix(ep.HostIf, HostIfPrefix) {
			t.Errorf("%s: host link %q lacks the prefix %q", id, ep.HostIf, HostIfPrefix)
		}
		if peerName(ep) == ep.HostIf {
			t.Errorf("%s: both ends are named %q", id, ep.HostIf)
		}
		if ep.NetnsPath != "/var/run/netns/space-"+id {
			t.Errorf("%s: netns at %q", id, ep.NetnsPath)
		}
	}
}
