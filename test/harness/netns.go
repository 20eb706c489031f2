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

// A Netns is a network namespace of a test's own, its loopback up and
// nothing else in it until the test adds it. It is held by a process of
// its own (`unshare --net`) rather than made with `ip netns add`, which
// would mount /var/run/netns over itself and make the namespaces spaced
// made there impossible to remove. Close ends it.
type Netns struct {
	// Path is the namespace (the holder's /proc/<pid>/ns/net).
	Path string

	pid    string
	holder *exec.Cmd
}

// holderCmd holds a namespace of its own: it prints "ready" once the
// namespace exists (a variable for the test that slows it down).
var holderCmd = []string{"unshare", "--net", "sh", "-c", "echo ready && exec sleep infinity"}

// NewNetns makes the namespace and brings its loopback up; Close removes
// it. On an error it leaves nothing.
func NewNetns() (_ *Netns, err error) {
	n := &Netns{}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	// The holder says so once unshare(2) is done. Comparing its
	// namespace with /proc/self's is no proof: that is the main thread's,
	// which the runtime may have lent to a Do (and so to another
	// namespace), and a link moved to the holder before its unshare stays
	// here ("Cannot find device" in the namespace, under load).
	n.holder = exec.Command(holderCmd[0], holderCmd[1:]...)
	ready, err := n.holder.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := n.holder.Start(); err != nil {
		return nil, fmt.Errorf("start the namespace's holder: %w", err)
	}
	n.pid = strconv.Itoa(n.holder.Process.Pid)
	n.Path = "/proc/" + n.pid + "/ns/net"
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
	if err := runCmd(n.ip("link", "set", "lo", "up")); err != nil {
		return nil, err
	}
	return n, nil
}

// In is the command prefix that runs a command in the namespace.
func (n *Netns) In() []string { return []string{"nsenter", "-t", n.pid, "-n"} }

// ip is an ip(8) command run in the namespace.
func (n *Netns) ip(args ...string) []string { return append(append(n.In(), "ip"), args...) }

// Do runs fn on a thread moved into the namespace; sockets made there keep
// it. The thread goes back to its own namespace afterwards: left in this
// one, it would end with its goroutine, except the main thread, which the
// runtime parks instead, and whose namespace /proc/self (and /proc/net)
// shows to the rest of the binary. If it cannot go back, it stays locked
// and ends.
func (n *Netns) Do(fn func() error) error {
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
		f, err := os.Open(n.Path)
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
func (n *Netns) Listen(network, addr string) (ln net.Listener, err error) {
	err = n.Do(func() error { ln, err = net.Listen(network, addr); return err })
	return ln, err
}

// ListenPacket opens a packet listener inside the namespace.
func (n *Netns) ListenPacket(network, addr string) (pc net.PacketConn, err error) {
	err = n.Do(func() error { pc, err = net.ListenPacket(network, addr); return err })
	return pc, err
}

// Close ends the holder; the namespace goes once nothing else (a process
// in it, a socket made there) holds it.
func (n *Netns) Close() {
	if n.holder != nil && n.holder.Process != nil {
		n.holder.Process.Kill()
		n.holder.Wait()
	}
}
