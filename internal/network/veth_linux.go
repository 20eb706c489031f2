package network

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Attach creates the namespace and veth pair of ep. On failure it removes
// whatever it made.
func Attach(ep Endpoint) (err error) {
	if err := checkUnused(ep); err != nil {
		return err
	}
	ns, err := newNamedNetns(ep.NetnsPath)
	if err != nil {
		return err
	}
	defer ns.Close()
	defer func() {
		if err != nil {
			Detach(ep)
		}
	}()

	peerTmp := peerName(ep)
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: ep.HostIf, MTU: 1500},
		PeerName:      peerTmp,
		PeerNamespace: netlink.NsFd(int(ns)),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth %s: %w", ep.HostIf, err)
	}
	host, err := netlink.LinkByName(ep.HostIf)
	if err != nil {
		return fmt.Errorf("find veth %s: %w", ep.HostIf, err)
	}
	// No IPv6 on the host side: the sandbox must not get a link-local route
	// to the host through it.
	_ = os.WriteFile(fmt.Sprintf("/proc/sys/net/ipv6/conf/%s/disable_ipv6", ep.HostIf), []byte("1"), 0o644)
	// Strict reverse-path filtering: a packet from this veth must come from
	// this sandbox's /30, so a sandbox cannot speak with another's address
	// (the egress gateway tells sandboxes apart by source address).
	if err := os.WriteFile(fmt.Sprintf("/proc/sys/net/ipv4/conf/%s/rp_filter", ep.HostIf), []byte("1"), 0o644); err != nil {
		return fmt.Errorf("rp_filter on %s: %w", ep.HostIf, err)
	}
	if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: ipNet(ep.HostIP.AsSlice(), ep.PrefixLen)}); err != nil {
		return fmt.Errorf("address host veth: %w", err)
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fmt.Errorf("up host veth: %w", err)
	}
	return ConfigureInside(ep)
}

// checkUnused refuses a /30 that some host interface already has an
// address in: another daemon (or a leftover) using the same range would
// otherwise make spaced talk to somebody else's sandbox.
func checkUnused(ep Endpoint) error {
	// The dump is interrupted when links change under it, which concurrent
	// creates do all the time: retry, and accept a partial answer last.
	var addrs []netlink.Addr
	var err error
	for range 5 {
		if addrs, err = netlink.AddrList(nil, netlink.FAMILY_V4); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return fmt.Errorf("list host addresses: %w", err)
	}
	prefix := netip.PrefixFrom(ep.HostIP, ep.PrefixLen).Masked()
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok && prefix.Contains(ip) {
			return fmt.Errorf("%w: %s is already used on the host (%s): is another spaced using the same sandbox range?", ErrRangeInUse, prefix, a.Label)
		}
	}
	return nil
}

// ConfigureInside (re)applies the sandbox side's name, address, loopback and
// default route. runsc moves them into its own network stack and removes them
// from the namespace, so this runs again before every restore.
func ConfigureInside(ep Endpoint) error {
	ns, err := netns.GetFromPath(ep.NetnsPath)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", ep.NetnsPath, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", ep.NetnsPath, err)
	}
	defer h.Close()

	peer, err := h.LinkByName(peerName(ep))
	if err == nil {
		if err := h.LinkSetName(peer, "eth0"); err != nil {
			return fmt.Errorf("rename sandbox veth: %w", err)
		}
	}
	eth, err := h.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("find sandbox veth: %w", err)
	}
	if err := h.AddrReplace(eth, &netlink.Addr{IPNet: ipNet(ep.SandboxIP.AsSlice(), ep.PrefixLen)}); err != nil {
		return fmt.Errorf("address sandbox veth: %w", err)
	}
	if err := h.LinkSetUp(eth); err != nil {
		return fmt.Errorf("up sandbox veth: %w", err)
	}
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find loopback: %w", err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("up loopback: %w", err)
	}
	route := &netlink.Route{LinkIndex: eth.Attrs().Index, Gw: ep.HostIP.AsSlice()}
	if err := h.RouteReplace(route); err != nil {
		return fmt.Errorf("default route: %w", err)
	}
	return nil
}

// Detach removes the veth pair and the namespace. Missing pieces are not an
// error, so it can run on half-made or already-removed endpoints.
func Detach(ep Endpoint) error {
	var errs []error
	if l, err := netlink.LinkByName(ep.HostIf); err == nil {
		if err := netlink.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("delete veth %s: %w", ep.HostIf, err))
		}
	}
	if err := removeNetns(ep.NetnsPath); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func removeNetns(path string) error {
	// The namespace may be mounted more than once (a later `ip netns add`
	// that found the directory unshared copied the mounts); unmount all.
	for i := 0; ; i++ {
		err := syscall.Unmount(path, syscall.MNT_DETACH)
		if err == nil && i < 16 {
			continue
		}
		if err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("unmount netns %s: %w", path, err)
		}
		break
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove netns %s: %w", path, err)
	}
	return nil
}

// PrepareNetnsDir makes the namespace directory a shared mount point of its
// own, as iproute2 does. Without it, the first `ip netns add` on the host
// would mount the directory over itself and hide (and duplicate) the
// namespaces spaced made, which then could not be removed.
func PrepareNetnsDir() error {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return fmt.Errorf("netns dir: %w", err)
	}
	if err := syscall.Mount("", netnsDir, "none", syscall.MS_SHARED|syscall.MS_REC, ""); err == nil {
		return nil // already a mount point
	}
	if err := syscall.Mount(netnsDir, netnsDir, "none", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", netnsDir, err)
	}
	if err := syscall.Mount("", netnsDir, "none", syscall.MS_SHARED|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("share %s: %w", netnsDir, err)
	}
	return nil
}

// newNamedNetns creates a network namespace bind-mounted at path. The work
// happens on a goroutine of its own whose thread is wired to it: if the
// thread cannot be moved back to the host namespace it is thrown away
// (a goroutine that exits while locked takes its thread with it).
func newNamedNetns(path string) (netns.NsHandle, error) {
	type result struct {
		ns  netns.NsHandle
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		ns, err, restored := createNetns(path)
		done <- result{ns, err}
		if restored {
			runtime.UnlockOSThread()
		}
	}()
	r := <-done
	return r.ns, r.err
}

func createNetns(path string) (ns netns.NsHandle, err error, restored bool) {
	orig, err := netns.Get()
	if err != nil {
		return netns.None(), fmt.Errorf("current netns: %w", err), true
	}
	defer orig.Close()
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return netns.None(), fmt.Errorf("netns dir: %w", err), true
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return netns.None(), fmt.Errorf("create netns file: %w", err), true
	}
	f.Close()
	ns, err = netns.New() // unshares this thread into a new namespace
	if err != nil {
		os.Remove(path)
		return netns.None(), fmt.Errorf("new netns: %w", err), netns.Set(orig) == nil
	}
	mountErr := syscall.Mount(fmt.Sprintf("/proc/self/task/%d/ns/net", syscall.Gettid()), path, "none", syscall.MS_BIND, "")
	restored = netns.Set(orig) == nil
	if mountErr != nil {
		ns.Close()
		os.Remove(path)
		return netns.None(), fmt.Errorf("bind netns %s: %w", path, mountErr), restored
	}
	return ns, nil, restored
}

// peerName is the sandbox side's name until it is renamed eth0 inside the
// namespace (names are global until the link moves).
func peerName(ep Endpoint) string { return "vsq" + ep.HostIf[len(hostIfPrefix):] }

func ipNet(ip net.IP, prefixLen int) *net.IPNet {
	return &net.IPNet{IP: ip, Mask: net.CIDRMask(prefixLen, 32)}
}

// Host is the host's real networking: Attach and Detach below, on named
// network namespaces and veth pairs (root needed). internal/sandbox takes it
// behind an interface, so its tests can run without root.
type Host struct{}

// Attach creates the namespace and veth pair of ep (see the function).
func (Host) Attach(ep Endpoint) error { return Attach(ep) }

// Detach removes the veth pair and the namespace of ep (see the function).
func (Host) Detach(ep Endpoint) error { return Detach(ep) }
