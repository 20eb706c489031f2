package egress

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/egress/policy"
)

// hello is what the client's first bytes say about where it is going.
type hello struct {
	// name is the normalised TLS SNI or HTTP Host; "" when the client
	// named no host, or named an address.
	name string
	// tls: the client speaks TLS (its ClientHello is still unread in
	// the buffer).
	tls bool
	// http is the client's first request (its header read, its body
	// not), when it speaks plain HTTP.
	http *http.Request
}

var httpMethods = []string{"GET ", "POST ", "PUT ", "HEAD ", "DELETE ", "OPTIONS ", "PATCH ", "CONNECT ", "TRACE "}

// sniff reads the client's first bytes without consuming a TLS
// ClientHello. A client that sends nothing within sniffTimeout gets a
// zero hello (the decision falls to its address).
func (c *conn) sniff() (hello, error) {
	c.client.SetReadDeadline(time.Now().Add(sniffTimeout))
	defer c.client.SetReadDeadline(time.Time{})
	first, err := c.br.Peek(1)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return hello{}, nil
		}
		return hello{}, fmt.Errorf("read: %w", err)
	}
	if first[0] == 0x16 {
		return c.sniffTLS()
	}
	// A method may arrive a byte at a time; read on while what came so
	// far could still start one, so splitting "GET" cannot hide a Host.
	for {
		buffered, _ := c.br.Peek(c.br.Buffered())
		partial := false
		for _, m := range httpMethods {
			if bytes.HasPrefix(buffered, []byte(m)) {
				return c.sniffHTTP()
			}
			partial = partial || bytes.HasPrefix([]byte(m), buffered)
		}
		if !partial {
			return hello{}, nil
		}
		if _, err := c.br.Peek(len(buffered) + 1); err != nil {
			return hello{}, fmt.Errorf("read: %w", err)
		}
	}
}

// sniffTLS reads the SNI of a ClientHello that fits in the first TLS
// record (as every mainstream client's does). A hello that does not
// parse is refused rather than passed on unread.
func (c *conn) sniffTLS() (hello, error) {
	hdr, err := c.br.Peek(5)
	if err != nil {
		return hello{}, fmt.Errorf("read TLS record header: %w", err)
	}
	n := int(hdr[3])<<8 | int(hdr[4])
	record, err := c.br.Peek(5 + n)
	if err != nil {
		return hello{}, fmt.Errorf("read TLS ClientHello: %w", err)
	}
	info, err := readClientHello(record)
	if err != nil {
		return hello{}, fmt.Errorf("unreadable TLS ClientHello: %w", err)
	}
	h := hello{tls: true}
	if info.ServerName != "" {
		name, ip, err := policy.ParseHost(info.ServerName)
		if err != nil {
			return hello{}, fmt.Errorf("TLS SNI: %w", err)
		}
		if !ip.IsValid() {
			h.name = name
		}
	}
	return h, nil
}

var errHelloRead = errors.New("hello read")

// readClientHello parses a ClientHello with crypto/tls itself: a server
// handshake on a read-only copy that stops once the hello is parsed.
func readClientHello(record []byte) (*tls.ClientHelloInfo, error) {
	var info *tls.ClientHelloInfo
	cfg := &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		info = h
		return nil, errHelloRead
	}}
	err := tls.Server(readOnlyConn{r: bytes.NewReader(record)}, cfg).Handshake()
	if info == nil {
		return nil, err
	}
	return info, nil
}

// sniffHTTP reads the first request's header. The Host header names the
// destination; an address there, or no Host at all, names none.
func (c *conn) sniffHTTP() (hello, error) {
	req, err := http.ReadRequest(c.br)
	if err != nil {
		return hello{}, fmt.Errorf("bad HTTP request: %w", err)
	}
	name, err := requestHost(req)
	if err != nil {
		req.Body.Close()
		return hello{}, err
	}
	return hello{name: name, http: req}, nil
}

// requestHost is the normalised name a request is for: its Host header,
// which an absolute-form target must agree with.
func requestHost(req *http.Request) (string, error) {
	host := hostOnly(req.Host)
	if host == "" {
		return "", nil
	}
	name, ip, err := policy.ParseHost(host)
	if err != nil {
		return "", fmt.Errorf("HTTP Host: %w", err)
	}
	if req.URL.Host != "" && !strings.EqualFold(hostOnly(req.URL.Host), host) {
		return "", fmt.Errorf("request target %q does not match Host %q", req.URL.Host, req.Host)
	}
	if ip.IsValid() {
		return "", nil
	}
	return name, nil
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

// readOnlyConn feeds a handshake from a byte slice and swallows what the
// handshake writes (its alert).
type readOnlyConn struct {
	net.Conn
	r io.Reader
}

func (c readOnlyConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c readOnlyConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c readOnlyConn) Close() error                     { return nil }
func (c readOnlyConn) SetDeadline(time.Time) error      { return nil }
func (c readOnlyConn) SetReadDeadline(time.Time) error  { return nil }
func (c readOnlyConn) SetWriteDeadline(time.Time) error { return nil }
func (c readOnlyConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c readOnlyConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
