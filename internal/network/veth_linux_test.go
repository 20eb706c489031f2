package network

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/netip"
	"os"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/spacesandbox/space/internal/testenv"
)

// testPlan is a range no daemon of the test suites uses.
var testPlan = Plan{CIDR: netip.MustParsePrefix("10.254.248.0/29")}

func testID(t *testing.T) string {
	b := make([]byte, 8)
	rand.Read(b)
	return "nt" + hex.EncodeToString(b)
}

// TestAttachDetach makes a real namespace and veth pair (root), checks
// both ends as the kernel reports them, and that Detach leaves nothing.
func TestAttachDetach(t *testing.T) {
	testenv.NeedRoot(t, "network namespaces and veth pairs")
	if err := PrepareNetnsDir(); err != nil {
		t.Fatal(err)
	}
	id := testID(t)
	ep, err := testPlan.Endpoint(id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := Attach(ep); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Detach(ep) })

	host, err := netlink.LinkByName(ep.HostIf)
	if err != nil {
		t.Fatalf("host link: %v", err)
	}
	if host.Attrs().OperState == netlink.OperDown {
		t.Errorf("host link %s is down", ep.HostIf)
	}
	if got := addrsOf(t, host, nil); len(got) != 1 || got[0] != netip.PrefixFrom(ep.HostIP, 30) {
		t.Errorf("host link addresses %v, want %s/30", got, ep.HostIP)
	}
	if rp, _ := os.ReadFile("/proc/sys/net/ipv4/conf/" + ep.HostIf + "/rp_filter"); string(rp) != "1\n" {
		t.Errorf("rp_filter on %s = %q, want strict (1)", ep.HostIf, rp)
	}
	// Inside: the sandbox's address, loopback up, and a default route
	// through the host's end.
	ns, err := netns.GetFromPath(ep.NetnsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var inside []netip.Prefix
	for _, l := range links {
		inside = append(inside, addrsOf(t, l, h)...)
	}
	if !containsPrefix(inside, netip.PrefixFrom(ep.SandboxIP, 30)) {
		t.Errorf("addresses inside %v lack %s/30", inside, ep.SandboxIP)
	}
	routes, err := h.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var gw bool
	for _, r := range routes {
		if r.Dst == nil || r.Dst.String() == "0.0.0.0/0" {
			gw = gw || r.Gw.String() == ep.HostIP.String()
		}
	}
	if !gw {
		t.Errorf("no default route via %s inside: %v", ep.HostIP, routes)
	}

	// The same /30 for another sandbox is refused, and that refusal makes
	// nothing.
	other := testID(t)
	clash, _ := testPlan.Endpoint(other, 0)
	if err := Attach(clash); !errors.Is(err, ErrRangeInUse) {
		t.Errorf("attach of a /30 in use: %v, want ErrRangeInUse", err)
	}
	assertGone(t, clash)

	if err := Detach(ep); err != nil {
		t.Fatal(err)
	}
	assertGone(t, ep)
	// Detach of what is gone is not an error (a teardown may run twice).
	if err := Detach(ep); err != nil {
		t.Errorf("second detach: %v", err)
	}
}

func addrsOf(t *testing.T, l netlink.Link, h *netlink.Handle) []netip.Prefix {
	t.Helper()
	var list []netlink.Addr
	var err error
	if h != nil {
		list, err = h.AddrList(l, netlink.FAMILY_V4)
	} else {
		list, err = netlink.AddrList(l, netlink.FAMILY_V4)
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Prefix
	for _, a := range list {
		ip, _ := netip.AddrFromSlice(a.IP.To4())
		bits, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip, bits))
	}
	return out
}

func containsPrefix(list []netip.Prefix, p netip.Prefix) bool {
	for _, q := range list {
		if q == p {
			return true
		}
	}
	return false
}

func assertGone(t *testing.T, ep Endpoint) {
	t.Helper()
	if _, err := netlink.LinkByName(ep.HostIf); err == nil {
		t.Errorf("host link %s is still there", ep.HostIf)
	}
	if _, err := netlink.LinkByName(peerName(ep)); err == nil {
		t.Errorf("peer link %s is still on the host", peerName(ep))
	}
	if _, err := os.Lstat(ep.NetnsPath); err == nil {
		t.Errorf("netns %s is still there", ep.NetnsPath)
	}
}
