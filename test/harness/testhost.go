package harness

import (
	"bufio"
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

// holderCmd holds a namespace of its own: it prints "ready" once the
// namespace exists (a variable for the test that slows it down).
var holderCmd = []string{"unshare", "--net", "sh", "-c", "echo ready && exec sleep infinity"}

// NewTestHost makes the namespace, its link and its addresses; Close
// removes them. On an error it leaves nothing.
func NewTestHost(o TestHostOptions) (_ *TestHost, err error) {
	h := &TestHost{}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	// The holder says so once unshare(2) is done. Comparing its
	// namespace with /proc/self's is no proof: that is the main thread's,
	// which the runtime may have lent to a Do (and so to another
	// namespace), and a link moved to the holder before its unshare stays
	// here ("Cannot find device" in the namespace, under load).
	h.holder = exec.Command(holderCmd[0], holderCmd[1:]...)
	ready, err := h.holder.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := h.holder.Start(); err != nil {
		return nil, fmt.Errorf("start the namespace's holder: %w", err)
	}
	h.pid = strconv.Itoa(h.holder.Process.Pid)
	h.NetnsPath = "/proc/" + h.pid + "/ns/net"
	said := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(ready).ReadString('\n')
		said <- line
	}()
	select {
	case line := <-said:
		if line != "ready\n" {
			return nil, fmt.Errorf("the namespace's holder (%s) said %q, not ready", strings.Join(holderCmd, " "), line)
		}
	case <-time.After(30 * time.Second):
		return nil, errors.New("the namespace's holder did not say ready within 30s")
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
// it. The thread goes back to its own namespace afterwards: left in this
// one, it would end with its goroutine, except the main thread, which the
// runtime parks instead, and whose namespace /proc/self (and /proc/net)
// shows to the rest of the binary. If it cannot go back, it stays locked
// and ends.
func (h *TestHost) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer home.Close()
		f, err := os.Open(h.NetnsPath)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		err = fn()
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
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
