package harness

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A TestHost is a network namespace of a test's own, standing in for a
// host a sandbox must not reach (the internet, a metadata service, a
// private range): joined to the host by a veth pair, holding the addresses
// the test gives it. It is held by a process of its own (`unshare --net`)
// rather than made with `ip netns add`, which would mount /var/run/netns
// over itself and make the namespaces spaced made there impossible to
// remove. Tests send traffic only to addresses they gave a TestHost.
type TestHost struct {
	// NetnsPath is the namespace (the holder's /proc/<pid>/ns/net).
	NetnsPath string
	// HostLink is the host's end of the veth pair.
	HostLink string

	pid    string
	holder *exec.Cmd
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
	h := &TestHost{}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	h.holder = exec.Command("unshare", "--net", "sleep", "infinity")
	if err := h.holder.Start(); err != nil {
		return nil, fmt.Errorf("start the namespace's holder: %w", err)
	}
	h.pid = strconv.Itoa(h.holder.Process.Pid)
	h.NetnsPath = "/proc/" + h.pid + "/ns/net"
	if !WaitFor(5*time.Second, func() bool {
		self, _ := os.Readlink("/proc/self/ns/net")
		other, _ := os.Readlink(h.NetnsPath)
		return other != "" && other != self
	}) {
		return nil, errors.New("unshare --net made no namespace")
	}
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
		steps = append(steps, addrStep(h.in(), a, nsLink))
	}
	steps = append(steps, h.ip("link", "set", nsLink, "up"), h.ip("link", "set", "lo", "up"))
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

// in is the command prefix that runs a command in the namespace.
func (h *TestHost) in() []string { return []string{"nsenter", "-t", h.pid, "-n"} }

// ip is an ip(8) command run in the namespace.
func (h *TestHost) ip(args ...string) []string { return append(append(h.in(), "ip"), args...) }

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

// Do runs fn on a thread moved into the namespace; sockets made there keep
// it. The thread is thrown away afterwards (it stays locked, so it exits
// with its goroutine).
func (h *TestHost) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread's netns changes
		f, err := os.Open(h.NetnsPath)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Listen opens a listener inside the namespace.
func (h *TestHost) Listen(network, addr string) (ln net.Listener, err error) {
	err = h.Do(func() error { ln, err = net.Listen(network, addr); return err })
	return ln, err
}

// ListenPacket opens a packet listener inside the namespace.
func (h *TestHost) ListenPacket(network, addr string) (pc net.PacketConn, err error) {
	err = h.Do(func() error { pc, err = net.ListenPacket(network, addr); return err })
	return pc, err
}

// Close removes the link (and the routes through it) and the namespace.
func (h *TestHost) Close() {
	if h.HostLink != "" {
		exec.Command("ip", "link", "del", h.HostLink).Run()
	}
	if h.holder != nil && h.holder.Process != nil {
		h.holder.Process.Kill()
		h.holder.Wait()
	}
}
