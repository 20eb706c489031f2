package harness

import (
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// A TestHost is a network namespace of a test's own (a Netns), standing
// in for a host a sandbox must not reach (the internet, a metadata
// service, a private range): joined to the host by a veth pair, holding
// the addresses the test gives it. Tests send traffic only to addresses
// they gave a TestHost.
type TestHost struct {
	*Netns
	// HostLink is the host's end of the veth pair.
	HostLink string
}

// TestHostOptions says what a TestHost holds.
type TestHostOptions struct {
	// Prefix starts the names of both links (3 characters: the rest is a
	// random suffix, within IFNAMSIZ).
	Prefix string
	// HostAddrs are the host end's addresses and Addrs the namespace's
	// (CIDR notation; IPv6 ones get nodad). Gateway, if set, is the
	// namespace's default route (one of HostAddrs' addresses).
	HostAddrs, Addrs []string
	Gateway          string
}

// NewTestHost makes the namespace, its link and its addresses; Close
// removes them. On an error it leaves nothing.
func NewTestHost(o TestHostOptions) (_ *TestHost, err error) {
	ns, err := NewNetns()
	if err != nil {
		return nil, err
	}
	h := &TestHost{Netns: ns}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	suffix := RandHex(3)
	h.HostLink = o.Prefix + "h" + suffix
	nsLink := o.Prefix + "n" + suffix
	steps := [][]string{
		{"ip", "link", "add", h.HostLink, "type", "veth", "peer", "name", nsLink},
		{"ip", "link", "set", nsLink, "netns", h.pid},
	}
	for _, a := range o.HostAddrs {
		steps = append(steps, addrStep(nil, a, h.HostLink))
	}
	steps = append(steps, []string{"ip", "link", "set", h.HostLink, "up"})
	for _, a := range o.Addrs {
		steps = append(steps, addrStep(h.In(), a, nsLink))
	}
	steps = append(steps, h.ip("link", "set", nsLink, "up"))
	if o.Gateway != "" {
		steps = append(steps, h.ip("route", "add", "default", "via", o.Gateway))
	}
	for _, s := range steps {
		if err := runCmd(s); err != nil {
			return nil, err
		}
	}
	return h, nil
}

func addrStep(prefix []string, cidr, dev string) []string {
	s := append(append([]string{}, prefix...), "ip")
	if strings.Contains(cidr, ":") {
		return append(s, "-6", "addr", "add", cidr, "dev", dev, "nodad")
	}
	return append(s, "addr", "add", cidr, "dev", dev)
}

func runCmd(args []string) error {
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// Route adds a host route to dst through the host's link (extra: more
// ip-route arguments, such as a metric). Another test may hold a route to
// the same address for a while (169.254.169.254 is every suite's metadata
// stand-in), so it retries for up to wait.
func (h *TestHost) Route(dst string, wait time.Duration, extra ...string) error {
	args := append([]string{"ip", "route", "add", dst, "dev", h.HostLink}, extra...)
	var err error
	WaitFor(wait, func() bool { err = runCmd(args); return err == nil })
	return err
}

// Close removes the link (and the routes through it) and the namespace.
func (h *TestHost) Close() {
	if h.HostLink != "" {
		exec.Command("ip", "link", "del", h.HostLink).Run()
	}
	h.Netns.Close()
}
