package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/egress/policy"
)

const (
	// sniffTimeout is how long the gateway waits for a client's first
	// bytes (TLS ClientHello or HTTP request) before deciding on the
	// address alone; server-speaks-first protocols pay it once.
	sniffTimeout = 2 * time.Second
	dialTimeout  = 10 * time.Second
	// maxConnsPerSandbox bounds one sandbox's open connections through
	// the gateway, so that one sandbox cannot exhaust spaced.
	maxConnsPerSandbox = 512
)

// conn is one sandbox TCP connection through the gateway.
type conn struct {
	sb     Sandbox
	client *net.TCPConn
	br     *bufio.Reader
	// orig is where the sandbox sent it.
	orig netip.AddrPort
}

func (g *Gateway) handle(client *net.TCPConn) {
	defer client.Close()
	sb, ok := g.sandboxFor(client.RemoteAddr())
	if !ok {
		return // not a sandbox of this daemon
	}
	if !g.conns.acquire(sb.ID) {
		g.audit(sb, "tcp", policy.Dest{}, "", fmt.Sprintf("more than %d open connections", maxConnsPerSandbox))
		return
	}
	defer g.conns.release(sb.ID)
	orig, err := originalDst(client)
	if err != nil {
		g.audit(sb, "tcp", policy.Dest{}, "", "no original destination: "+err.Error())
		return
	}
	c := &conn{sb: sb, client: client, br: bufio.NewReaderSize(client, 32<<10), orig: orig}
	dest := policy.Dest{IP: orig.Addr().Unmap(), Port: orig.Port()}
	if g.inFloor(dest.IP) {
		g.audit(sb, "tcp", dest, "floor", "destination in the platform floor")
		return
	}
	hello, err := c.sniff()
	if err != nil {
		g.audit(sb, "tcp", dest, "", err.Error())
		return
	}
	if hello.name != "" {
		g.byName(c, hello)
		return
	}
	if v := sb.Policy.Decide(dest); !v.Allowed {
		g.audit(sb, "tcp", dest, v.Rule, "not allowed")
		return
	}
	up, err := g.dial(dest.IP, dest.Port)
	if err != nil {
		g.audit(sb, "tcp", dest, "", "dial: "+err.Error())
		return
	}
	defer up.Close()
	if hello.http != nil {
		g.proxyHTTP(c, c.side(), up, hello.http, "")
		return
	}
	splice(c.side(), up)
}

// byName handles a connection whose client named its host (TLS SNI or
// HTTP Host): the name decides, and the gateway resolves and dials it
// itself, so the address the sandbox chose (from its own resolver,
// /etc/hosts or a literal) does not matter.
func (g *Gateway) byName(c *conn, hello hello) {
	d := policy.Dest{Name: hello.name, Port: c.orig.Port()}
	if v := c.sb.Policy.Decide(d); !v.Allowed {
		g.audit(c.sb, "tcp", d, v.Rule, "not allowed")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	ips, err := g.resolver.lookupAll(ctx, hello.name)
	if err != nil || len(ips) == 0 {
		g.audit(c.sb, "tcp", d, "", fmt.Sprintf("name does not resolve (%v)", err))
		return
	}
	var up net.Conn
	for _, ip := range ips {
		d.IP = ip.Unmap()
		if g.inFloor(d.IP) {
			g.audit(c.sb, "tcp", d, "floor", "name resolves into the platform floor")
			continue
		}
		if v := c.sb.Policy.Decide(d); !v.Allowed {
			g.audit(c.sb, "tcp", d, v.Rule, "address not allowed")
			continue
		}
		if up, err = g.dial(d.IP, d.Port); err == nil {
			break
		}
	}
	if up == nil {
		return
	}
	defer up.Close()
	switch {
	case hello.http != nil:
		g.proxyHTTP(c, c.side(), up, hello.http, hello.name)
	case hello.tls && (len(c.sb.Secrets) > 0 || len(c.sb.Policy.Headers[hello.name]) > 0):
		g.intercept(c, up, hello.name)
	default:
		splice(c.side(), up)
	}
}

// intercept terminates the sandbox's TLS with a certificate of the
// deployment CA, re-originates TLS to the real server (verified against
// the configured roots) and proxies HTTP request by request, so that
// credentials can be put in and placeholders bound elsewhere stopped.
// Only sandboxes holding placeholders, and hosts with header rules, are
// intercepted.
func (g *Gateway) intercept(c *conn, up net.Conn, name string) {
	cert, err := g.ca.certFor(name)
	if err != nil {
		g.log.Error("egress: certificate", "sandbox", c.sb.ID, "host", name, "err", err)
		return
	}
	cs := tls.Server(&bufferedConn{Conn: c.client, r: c.br}, &tls.Config{
		Certificates: []tls.Certificate{*cert}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12,
	})
	ctx, cancel := context.WithTimeout(g.ctx, dialTimeout)
	defer cancel()
	if err := cs.HandshakeContext(ctx); err != nil {
		return
	}
	us := tls.Client(up, &tls.Config{ServerName: name, RootCAs: g.cfg.RootCAs, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	if err := us.HandshakeContext(ctx); err != nil {
		g.audit(c.sb, "https", policy.Dest{Name: name, Port: c.orig.Port()}, "", "upstream TLS: "+err.Error())
		return
	}
	cl := side{Conn: cs, br: bufio.NewReader(cs)}
	req, err := http.ReadRequest(cl.br)
	if err != nil {
		return
	}
	g.proxyHTTP(c, cl, us, req, name)
}

// connCount counts open connections per sandbox.
type connCount struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *connCount) acquire(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[id] >= maxConnsPerSandbox {
		return false
	}
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[id]++
	return true
}

func (c *connCount) release(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[id]--; c.n[id] <= 0 {
		delete(c.n, id)
	}
}

// side is the sandbox's end of a proxied stream: where its bytes are read
// (through a buffer that may hold some already) and answers written.
type side struct {
	net.Conn
	br *bufio.Reader
}

func (c *conn) side() side { return side{Conn: c.client, br: c.br} }

func (g *Gateway) dial(ip netip.Addr, port uint16) (net.Conn, error) {
	return g.dialer.DialContext(g.ctx, "tcp", netip.AddrPortFrom(ip, port).String())
}

// splice copies both ways: what the client sent so far (still in the
// buffered reader) first.
func splice(cl side, up net.Conn) {
	done := make(chan struct{}, 2)
	go func() {
		io.Copy(up, cl.br)
		closeWrite(up)
		done <- struct{}{}
	}()
	go func() {
		io.Copy(cl.Conn, up)
		closeWrite(cl.Conn)
		done <- struct{}{}
	}()
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// originalDst reads where a redirected connection was going
// (SO_ORIGINAL_DST, from conntrack).
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var out netip.AddrPort
	var serr error
	err = raw.Control(func(fd uintptr) {
		// The kernel fills a sockaddr_in; IPv6Mreq is a 20-byte buffer
		// with the right shape to receive it.
		mreq, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
		if err != nil {
			serr = err
			return
		}
		b := mreq.Multiaddr
		port := uint16(b[2])<<8 | uint16(b[3])
		out = netip.AddrPortFrom(netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}), port)
	})
	if err == nil {
		err = serr
	}
	if errors.Is(err, syscall.ENOENT) {
		return netip.AddrPort{}, errors.New("connection was not redirected")
	}
	return out, err
}
