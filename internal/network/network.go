// Package network gives each sandbox its own network namespace joined to the
// host by a veth pair on a private /30, and installs the host firewall that
// keeps sandboxes from reaching anything: the host's own addresses and ports,
// other sandboxes, and every other network. spaced reaches a sandbox's agent
// by dialling out to the sandbox's address; replies are let back in by
// connection tracking only.
package network

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

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
	netnsDir     = "/var/run/netns"
	netnsPrefix  = "space-"
	hostIfPrefix = "spc"
	slotBits     = 2 // a /30 per sandbox: network, host, sandbox, broadcast
)

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
		HostIf:    fmt.Sprintf("%s%d", hostIfPrefix, slot),
		HostIP:    addr(1),
		SandboxIP: addr(2),
		PrefixLen: 32 - slotBits,
	}, nil
}

// NetnsPath is where the namespace of sandbox id is bind-mounted.
func NetnsPath(id string) string { return filepath.Join(netnsDir, netnsPrefix+id) }

// ListNamespaces returns the sandbox ids whose namespaces exist on the host,
// so the daemon can remove those no record owns.
func ListNamespaces() ([]string, error) {
	entries, err := os.ReadDir(netnsDir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	var ids []string
	for _, e := range entries {
		if id, ok := strings.CutPrefix(e.Name(), netnsPrefix); ok {
			ids = append(ids, id)
		}
	}
	return ids, nil
}
