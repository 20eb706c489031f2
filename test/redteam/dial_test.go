package redteam

// Attempts on the connections spaced itself makes for a tenant: a
// template's source image is pulled by spaced on the host, so a registry
// reference is an address and port the tenant picks. Aimed at the host's
// own addresses, a pull would be a port scanner run by the host on the
// host (issue 27: an open port answered with its dial error, a closed one
// with "connection refused").

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/ociimage/ocitest"
	"github.com/spacesandbox/space/test/harness"
)

// allowedRegistry is the address the red-team daemon trusts for pulls
// (SPACE_REGISTRY_ALLOW, set in start): the far end of a namespace of the
// test's own, not an address of the host, so every address the attempts
// aim at stays refused. It is private (RFC 1918): registries there are
// spoken to in plain HTTP.
const allowedRegistry = "172.31.245.2"

const dialStops = "spaced connects for a tenant only through one dialer (internal/egress/dialer), which refuses, on the address it is about to connect to (net.Dialer.Control, after resolution), the platform floor and every address of the node's interfaces and of its cluster's nodes; every registry that cannot be reached gets one answer, and a refused connect is not retried"

const dialControl = "the host reaches each listener itself (so \"no connection\" means refused); a registry at the address the operator allowed (SPACE_REGISTRY_ALLOW) is pulled through the same route"

func dialAttempts() []attempt {
	mk := func(id, route string, pull pullRoute) attempt {
		return attempt{id: id, category: "build", family: "build-pull-host",
			desc:  route + " names a registry at each address of the host's interfaces (v4 and v6, loopback and link-local included, IPv4-mapped spellings, localhost), one open and one closed port each",
			stops: dialStops, control: dialControl,
			run: func(t *testing.T) error { return dialCheck(t, pull) }}
	}
	return []attempt{
		mk("build-pull-host-dockerfile", "POST /v1/builds with a Dockerfile whose FROM", pullDockerfile),
		mk("build-pull-host-from-image", "POST /v1/builds whose from.image", pullFromImage),
		mk("build-pull-host-e2b", "E2B's POST /v2/templates/{id}/builds/{build} whose fromImage", pullE2B),
	}
}

// TestDialHost runs the pull attempts.
func TestDialHost(t *testing.T) {
	need(t)
	// The listeners live as long as the test (not its first subtest).
	dialFix.once.Do(func() { dialFix.err = dialSetup(t) })
	for _, a := range dialAttempts() {
		t.Run(a.id, func(t *testing.T) {
			if err := a.run(t); err != nil {
				t.Errorf("%s: %v", a.desc, err)
			}
		})
	}
}

// pullRoute asks spaced to build on image ref by one route, and returns
// the answer's status and message, and the id of a build it accepted.
type pullRoute func(t *testing.T, ref string) (status int, msg, build string, err error)

func pullDockerfile(t *testing.T, ref string) (int, string, string, error) {
	return nativeBuild(t, map[string]any{"name": "rt-pull-host", "dockerfile": "FROM " + ref + "\nRUN true\n"})
}

func pullFromImage(t *testing.T, ref string) (int, string, string, error) {
	return nativeBuild(t, map[string]any{"name": "rt-pull-host", "from": map[string]any{"image": ref}})
}

func nativeBuild(t *testing.T, req map[string]any) (int, string, string, error) {
	st, _, body, err := raw(harness.Ctx(t, 2*time.Minute), env.d, "POST", "/v1/builds", jsonBody(req), map[string]string{"Content-Type": "application/json"})
	if err != nil {
		return 0, "", "", err
	}
	var out struct {
		ID    string `json:"id"`
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	json.Unmarshal(body, &out)
	if st >= 300 && out.Error.Message == "" {
		return st, "", "", fmt.Errorf("status %d without an error message: %s", st, body)
	}
	return st, out.Error.Message, out.ID, nil
}

// pullE2B asks for a build as E2B's SDK does: a build of the template,
// then its steps.
func pullE2B(t *testing.T, ref string) (int, string, string, error) {
	ctx := harness.Ctx(t, 2*time.Minute)
	hdr := map[string]string{"Authorization": "", "X-API-Key": env.d.APIKey, "Content-Type": "application/json"}
	st, _, body, err := raw(ctx, env.d, "POST", "/v3/templates", jsonBody(map[string]any{"name": "rt-pull-host-e2b"}), hdr)
	if err != nil {
		return 0, "", "", err
	}
	var req struct{ TemplateID, BuildID string }
	if st != http.StatusAccepted || json.Unmarshal(body, &req) != nil || req.BuildID == "" {
		return 0, "", "", fmt.Errorf("POST /v3/templates: %d %s", st, body)
	}
	st, _, body, err = raw(ctx, env.d, "POST", "/v2/templates/"+req.TemplateID+"/builds/"+req.BuildID, jsonBody(map[string]any{"fromImage": ref, "steps": []any{}}), hdr)
	if err != nil {
		return 0, "", "", err
	}
	var out struct {
		Message string `json:"message"`
	}
	json.Unmarshal(body, &out)
	if st >= 300 && out.Message == "" {
		return st, "", "", fmt.Errorf("status %d without an error message: %s", st, body)
	}
	return st, out.Message, req.BuildID, nil
}

// dialTarget is one address of the host: a listener on it, and a port
// on it that nothing listens on.
type dialTarget struct {
	what   string // the address and its interface
	ip     netip.Addr
	ifName string // the interface, and its index when listed
	ifIdx  int
	open   string // host:port of the listener, as a reference spells it
	closed string // host:port with no listener
	seen   *connWatch
}

// gone: the interface the target was listed on is gone, or no longer has
// its address. A sandbox's veth (of this suite, or of another spaced on
// the machine) can go and a new one take the same address and name: the
// listener bound to the old one is then refused (CI run 28 met it), so
// the interface is checked by its index, not the address alone.
func (tg dialTarget) gone() bool {
	ifc, err := net.InterfaceByIndex(tg.ifIdx)
	if err != nil || ifc.Name != tg.ifName {
		return true
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return true
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr() == tg.ip {
			return false
		}
	}
	return true
}

// dialFix is shared by the three routes.
var dialFix struct {
	once    sync.Once
	err     error
	targets []dialTarget
	reg     *ocitest.Registry // at the allowed address
	allowed string            // a reference in it
}

// dialSetup lists the host's addresses, opens a listener on each, checks
// the host reaches each one (the positive control) and starts the allowed
// registry.
func dialSetup(t *testing.T) error {
	// The allowed registry, first: the host's end of its link is one of
	// the host's addresses, which the attempts aim at too.
	ns, err := harness.NewTestHost(harness.TestHostOptions{
		Prefix: "rtd", HostAddrs: []string{"172.31.245.1/30"}, Addrs: []string{allowedRegistry + "/30"},
	})
	if err != nil {
		return err
	}
	t.Cleanup(ns.Close)
	ln, err := ns.Listen("tcp", allowedRegistry+":0")
	if err != nil {
		return err
	}
	dialFix.reg = ocitest.NewRegistryOn(t, ln, "", "")
	img := ocitest.Image(t, nil, "/", "", ocitest.Layer(t, ocitest.File{Name: "etc/", Dir: true}, ocitest.File{Name: "etc/rt-allowed", Body: "allowed\n"}))
	dialFix.allowed = dialFix.reg.Push(t, "rt/allowed", "v1", img)

	ifs, err := net.Interfaces()
	if err != nil {
		return err
	}
	var v4 []dialTarget
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			return fmt.Errorf("addresses of %s: %w", ifc.Name, err)
		}
		for _, a := range addrs {
			p, err := netip.ParsePrefix(a.String())
			if err != nil {
				return err
			}
			ip := p.Addr()
			bind := ip
			if ip.Is6() && ip.IsLinkLocalUnicast() {
				bind = ip.WithZone(ifc.Name) // the reference cannot carry the zone; the listener needs it
			}
			tg, err := dialListen(t, bind, ip, ifc.Name, ifc.Index)
			if errors.Is(err, errAddrGone) {
				// A sandbox's veth that went away since it was listed.
				t.Logf("%s on %s: %v", ip, ifc.Name, err)
				continue
			}
			if err != nil {
				return err
			}
			dialFix.targets = append(dialFix.targets, tg)
			if ip.Is4() {
				v4 = append(v4, tg)
			}
		}
	}
	if len(dialFix.targets) == 0 {
		return errors.New("no interface address to try")
	}
	// The same listeners by other spellings: IPv4-mapped, and a name.
	for _, tg := range v4 {
		m := tg
		m.what += ", IPv4-mapped"
		m.open = mapped(tg.open)
		m.closed = mapped(tg.closed)
		dialFix.targets = append(dialFix.targets, m)
		if strings.HasPrefix(tg.open, "127.0.0.1:") {
			n := tg
			n.what = "localhost"
			n.open = strings.Replace(tg.open, "127.0.0.1", "localhost", 1)
			n.closed = strings.Replace(tg.closed, "127.0.0.1", "localhost", 1)
			dialFix.targets = append(dialFix.targets, n)
		}
	}
	return nil
}

var errAddrGone = errors.New("the address is gone")

// dialListen opens the listener of one address, checks the host reaches
// it, and finds a closed port on the same address.
func dialListen(t *testing.T, bind, ip netip.Addr, ifName string, ifIdx int) (dialTarget, error) {
	ln, err := net.Listen("tcp", netip.AddrPortFrom(bind, 0).String())
	if err != nil {
		if strings.Contains(err.Error(), "cannot assign requested address") {
			return dialTarget{}, fmt.Errorf("%w: %v", errAddrGone, err)
		}
		return dialTarget{}, fmt.Errorf("listen on %s: %w", bind, err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	// The listener's address loses a link-local address's zone: dial
	// the one bound.
	seen := watchConns(t, ln, netip.AddrPortFrom(bind, uint16(port)).String())
	// Positive control: the host itself reaches the listener, and it is
	// the first connection the listener sees.
	got, err := seen.fence()
	if err != nil {
		return dialTarget{}, fmt.Errorf("control: %w", err)
	}
	if len(got) != 0 {
		return dialTarget{}, fmt.Errorf("control: %s got connections before the host's: %v", ln.Addr(), got)
	}
	// A closed port: one that was just open on the address.
	cl, err := net.Listen("tcp", netip.AddrPortFrom(bind, 0).String())
	if err != nil {
		return dialTarget{}, err
	}
	closed := cl.Addr().(*net.TCPAddr).Port
	cl.Close()
	host := ip.String()
	if ip.Is6() {
		host = "[" + host + "]"
	}
	return dialTarget{
		what: ip.String() + " on " + ifName, ip: ip, ifName: ifName, ifIdx: ifIdx, seen: seen,
		open: fmt.Sprintf("%s:%d", host, port), closed: fmt.Sprintf("%s:%d", host, closed),
	}, nil
}

// allBracketed: every host:port is an IPv6 literal.
func allBracketed(hostPorts []string) bool {
	for _, hp := range hostPorts {
		if !strings.HasPrefix(hp, "[") {
			return false
		}
	}
	return true
}

func mapped(hostPort string) string {
	h, p, _ := net.SplitHostPort(hostPort)
	return "[::ffff:" + h + "]:" + p
}

// dialCheck: each route, aimed at every target's open and closed port,
// is refused with one text, and no listener saw a connection; the route
// pulls from the allowed registry.
func dialCheck(t *testing.T, pull pullRoute) error {
	dialFix.once.Do(func() { dialFix.err = dialSetup(t) })
	if dialFix.err != nil {
		return dialFix.err
	}
	var problems []string
	answers := map[string][]string{} // normalised answer -> targets
	for _, tg := range dialFix.targets {
		var got [2]string
		for i, hp := range []string{tg.open, tg.closed} {
			ref := hp + "/rt/probe:latest"
			st, msg, build, err := pull(t, ref)
			if err != nil {
				return fmt.Errorf("%s: %v", tg.what, err)
			}
			if build != "" {
				cancelBuild(t, build)
			}
			got[i] = strings.ReplaceAll(msg, ref, "REF")
			if st != http.StatusBadRequest {
				problems = append(problems, fmt.Sprintf("%s (%s): %d %q", tg.what, hp, st, msg))
			}
		}
		t.Logf("%s: open %q, closed %q", tg.what, got[0], got[1])
		if got[0] != got[1] {
			problems = append(problems, fmt.Sprintf("%s: the open port answers %q, the closed one %q", tg.what, got[0], got[1]))
		}
		answers[got[0]] = append(answers[got[0]], tg.open)
	}
	for a, who := range answers {
		switch {
		case strings.Contains(a, "cannot reach the registry of REF"):
		case a == `from: image "REF" is not a valid image reference` && allBracketed(who):
			// The Dockerfile route's reference parser has no IPv6
			// registries: refused before any pull.
			t.Logf("refused as a reference, before any pull: %v", who)
		default:
			problems = append(problems, fmt.Sprintf("%v answered %q, not the one text of an unreachable registry", who, a))
		}
	}
	// No listener saw a connection (the fence is the host's own, after
	// every attempt).
	for _, tg := range dialFix.targets {
		got, err := tg.seen.fence()
		if err != nil && tg.gone() {
			// A sandbox's veth (of this suite, or of another spaced on
			// the machine) that went away meanwhile.
			t.Logf("%s went away during the attempt: %v", tg.what, err)
			continue
		}
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if len(got) != 0 {
			problems = append(problems, fmt.Sprintf("spaced connected to %s (%s) %d times", tg.what, tg.open, len(got)))
		}
	}
	// Positive control: the allowed registry is pulled from by the route.
	before := dialFix.reg.Served()
	st, msg, build, err := pull(t, dialFix.allowed)
	if err != nil {
		return err
	}
	if build != "" {
		cancelBuild(t, build)
	}
	if st != http.StatusAccepted && st != http.StatusCreated {
		problems = append(problems, fmt.Sprintf("positive control: the allowed registry's image %s: %d %q", dialFix.allowed, st, msg))
	} else if dialFix.reg.Served() == before {
		problems = append(problems, "positive control: the build was accepted, but the allowed registry served nothing")
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

// cancelBuild stops a build an attempt started and waits for its end.
func cancelBuild(t *testing.T, id string) {
	ctx := harness.Ctx(t, 2*time.Minute)
	if _, err := env.d.Client.CancelBuild(ctx, id); err != nil {
		t.Logf("cancel build %s: %v", id, err)
	}
	for {
		b, err := env.d.Client.GetBuild(ctx, id)
		if err != nil {
			t.Logf("build %s: %v", id, err)
			return
		}
		if b.Done() {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// connWatch records the connections a listener accepts, in order.
type connWatch struct {
	addr  string // where the host dials it
	conns chan net.Addr
}

func watchConns(t *testing.T, ln net.Listener, addr string) *connWatch {
	w := &connWatch{addr: addr, conns: make(chan net.Addr, 1024)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(w.conns)
				return
			}
			w.conns <- c.RemoteAddr()
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return w
}

// fence connects from the host and returns the peers of the connections
// the listener accepted before that one: the kernel hands connections to
// accept in order, so nothing that came earlier is missed.
func (w *connWatch) fence() ([]string, error) {
	c, err := net.Dial("tcp", w.addr)
	if err != nil {
		return nil, fmt.Errorf("fence: connect to %s: %w", w.addr, err)
	}
	defer c.Close()
	var before []string
	for a := range w.conns {
		if a.String() == c.LocalAddr().String() {
			return before, nil
		}
		before = append(before, a.String())
	}
	return before, fmt.Errorf("fence: the listener %s closed", w.addr)
}
