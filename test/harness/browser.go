package harness

import (
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/spacesandbox/space/internal/testenv"
)

// BrowserOptions says what Browser starts.
type BrowserOptions struct {
	// Width and Height are the window's and the viewport's size.
	Width, Height int
	// Limit ends the browser's context; 0 means 3 minutes.
	Limit time.Duration
	// Reach are the host's loopback addresses ("127.0.0.1:port") the
	// pages open: each is forwarded into the browser's namespace, at the
	// same address. Names under .localhost resolve to loopback in
	// Chromium, so spaced's port routing (<port>-<id>.localhost:<port>)
	// needs only spaced's address.
	Reach []string
}

// Browser starts a headless Chromium (Debian's, driven by chromedp over a
// pipe) for t and returns its context; everything ends at t's cleanup.
//
// Chromium runs in a network namespace of its own that has only loopback:
// Chromium on Linux aborts its in-flight loads with
// net::ERR_NETWORK_CHANGED whenever an address of its namespace changes,
// and in the host's namespace every sandbox started or ended on the
// machine (by any suite running beside) adds or removes a veth's address.
// In its own namespace nothing changes, and o.Reach is how its pages still
// reach the host's servers.
func Browser(t testing.TB, o BrowserOptions) context.Context {
	t.Helper()
	if why := testenv.First(testenv.CheckRoot("the browser's network namespace"), testenv.CheckCommand("chromium"),
		testenv.CheckCommand("nsenter"), testenv.CheckCommand("unshare")); why != "" {
		testenv.Skip(t, why)
	}
	ns, err := NewNetns()
	if err != nil {
		t.Fatalf("the browser's network namespace: %v", err)
	}
	t.Cleanup(ns.Close)
	for _, addr := range o.Reach {
		f, err := newForward(ns, addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.close)
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Fatal(err)
	}
	in := func(cmd *exec.Cmd) {
		// nsenter joins the namespace and execs Chromium (the same
		// process, so chromedp's pipe and kill still reach it).
		cmd.Args = append(append(ns.In(), "--", cmd.Path), cmd.Args[1:]...)
		cmd.Path = nsenter
		// What chromedp sets when no ModifyCmdFunc replaces it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	return startBrowser(t, o, chromedp.ModifyCmdFunc(in))
}

// HostBrowser is Browser with Chromium in the host's namespace, where it
// sees the host's address changes: only for the test that shows Browser's
// namespace is needed.
func HostBrowser(t testing.TB, o BrowserOptions) context.Context {
	t.Helper()
	if why := testenv.CheckCommand("chromium"); why != "" {
		testenv.Skip(t, why)
	}
	return startBrowser(t, o)
}

func startBrowser(t testing.TB, o BrowserOptions, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	if o.Limit == 0 {
		o.Limit = 3 * time.Minute
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath("/usr/bin/chromium"),
		chromedp.NoSandbox, // root: Chromium's own sandbox needs a user namespace it may not get
		chromedp.Flag("disable-gpu", true),
		chromedp.WindowSize(o.Width, o.Height),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(opts, extra...)...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, o.Limit)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(int64(o.Width), int64(o.Height))); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// FailedLoads collects the requests of ctx's page that fail without an
// answer ("<error> <url>"), for a failure's message.
func FailedLoads(ctx context.Context) func() []string {
	var mu sync.Mutex
	urls := map[network.RequestID]string{}
	var failed []string
	go func() {
		for ev, err := range chromedp.Events(ctx, network.RequestWillBeSent) {
			if err != nil {
				return
			}
			mu.Lock()
			urls[ev.RequestID] = ev.Request.URL
			mu.Unlock()
		}
	}()
	go func() {
		for ev, err := range chromedp.Events(ctx, network.LoadingFailed) {
			if err != nil {
				return
			}
			mu.Lock()
			failed = append(failed, ev.ErrorText+" "+urls[ev.RequestID])
			mu.Unlock()
		}
	}()
	return func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), failed...) }
}

// A forward makes a host loopback address reachable at the same address
// inside a Netns: a listener there, each connection joined to a new one to
// the address, dialled from the host's namespace.
type forward struct {
	addr string
	ln   net.Listener
	wg   sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]bool
	done  bool
}

func newForward(ns *Netns, addr string) (*forward, error) {
	ln, err := ns.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("forward %s into the browser's namespace: %w", addr, err)
	}
	f := &forward{addr: addr, ln: ln, conns: map[net.Conn]bool{}}
	f.wg.Go(f.serve)
	return f, nil
}

func (f *forward) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		if !f.track(c) {
			c.Close()
			return
		}
		f.wg.Go(func() { f.join(c) })
	}
}

// join copies between c and a new connection to the host's address, each
// way until its end, and passes a half close on.
func (f *forward) join(c net.Conn) {
	defer f.untrack(c)
	up, err := net.Dial("tcp", f.addr)
	if err != nil {
		// A reset, as the browser would get from the closed port itself.
		c.(*net.TCPConn).SetLinger(0)
		return
	}
	if !f.track(up) {
		up.Close()
		return
	}
	defer f.untrack(up)
	done := make(chan struct{})
	go func() {
		io.Copy(up, c)
		up.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	io.Copy(c, up)
	c.(*net.TCPConn).CloseWrite()
	<-done
}

// track notes c open, unless the forward is closing.
func (f *forward) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return false
	}
	f.conns[c] = true
	return true
}

func (f *forward) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	c.Close()
}

// close stops the listener and the connections it joined, and waits for
// them.
func (f *forward) close() {
	f.mu.Lock()
	f.done = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.ln.Close()
	f.wg.Wait()
}
