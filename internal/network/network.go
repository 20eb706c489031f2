// Package network gives each sandbox its own network namespace joined to the
// host by a veth pair on a private /30. spaced reaches a sandbox's agent by
// dialling out to the sandbox's address. What a sandbox may reach is the
// egress gateway's business (internal/egress), whose firewall matches the
// host-side veth names made here.
package network

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
)

// ErrRangeInUse: a sandbox's /30 already has an address on some host
// interface (a leftover, or another daemon on the same range).
var ErrRangeInUse = errors.New("address range in use")

// Endpoint is one sandbox's end of the network.
type Endpoint struct {
	// NetnsPath is the bind-mounted namespace handed to the runtime.
	NetnsPath string
	// HostIf is the host side of the veth pair.
	HostIf string
	// HostIP is the host side's address; SandboxIP is the sandbox's.
	HostIP    netip.Addr
	SandboxIP netip.Addr
	// PrefixLen is the length of the point-to-point prefix (30).
	PrefixLen int
}

const (
	netnsDir    = "/var/run/netns"
	netnsPrefix = "space-"
	// Host interface names are global on the host, so they come from the
	// (random, unique) sandbox id rather than the slot: two daemons, or a
	// daemon and a test, never collide. 3 + 12 characters fits IFNAMSIZ.
	hostIfPrefix = HostIfPrefix
	slotBits     = 2 // a /30 per sandbox: network, host, sandbox, broadcast
)

// HostIfPrefix starts the name of every sandbox's host-side veth; the
// egress gateway's firewall matches on it.
const HostIfPrefix = "vse"

// Plan maps slots to addresses within the sandbox range.
type Plan struct {
	CIDR netip.Prefix
}

// Slots is how many sandboxes the range holds.
func (p Plan) Slots() int {
	return 1 << (32 - p.CIDR.Bits() - slotBits)
}

// Endpoint returns the addresses and names of slot for sandbox id.
func (p Plan) Endpoint(id string, slot int) (Endpoint, error) {
	if slot < 0 || slot >= p.Slots() {
		return Endpoint{}, fmt.Errorf("slot %d outside range %s", slot, p.CIDR)
	}
	base := p.CIDR.Masked().Addr().As4()
	n := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	n += uint32(slot) << slotBits
	addr := func(off uint32) netip.Addr {
		v := n + off
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	return Endpoint{
		NetnsPath: NetnsPath(id),
		HostIf:    HostIf(id),
		HostIP:    addr(1),
		SandboxIP: addr(2),
		PrefixLen: 32 - slotBits,
	}, nil
}

// NetnsPath is where the namespace of sandbox id is bind-mounted.
func NetnsPath(id string) string { return filepath.Join(netnsDir, netnsPrefix+id) }

// HostIf is the name of the host side of sandbox id's veth pair.
func HostIf(id string) string { return hostIfPrefix + id[:min(12, len(id))] }

// Names returns an Endpoint with only the names of sandbox id's network
// filled in: enough for Detach when the slot is not known.
func Names(id string) Endpoint {
	return Endpoint{NetnsPath: NetnsPath(id), HostIf: HostIf(id)}
}
