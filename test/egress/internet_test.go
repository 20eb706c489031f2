package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/spacesandbox/space/test/harness"
)

// The stand-in internet's addresses. allowedIP and evilIP are public
// (the upper half of TEST-NET-2: other packages' stand-ins use
// 198.51.100.0/24 and 203.0.113.0/24 with the host at .1, and may run at
// the same time); the others sit in floor ranges and are reachable from
// the host, so only the gateway's floor keeps sandboxes from them.
const (
	hostSideIP = "198.51.100.129" // the host's own address on the test link
	allowedIP  = "198.51.100.140"
	evilIP     = "198.51.100.166"
	metaIP     = "169.254.169.254"
	cgnatIP    = "100.64.0.10"
	privIP     = "172.16.99.10"
	priv2IP    = "192.168.213.10"
)

// internet is the test's stand-in for the world.
type internet struct {
	host     *harness.TestHost
	dnsAddr  string
	dns      *dnsServer
	caPEM    []byte
	hostPort int // an HTTP listener on every host address
	closers  []func()

	authMu sync.Mutex
	// seen holds every credential-bearing part of every request the test
	// servers got (Authorization, X-Api-Key, query).
	seen []string
}

func (n *internet) recordAuth(s string) {
	n.authMu.Lock()
	n.seen = append(n.seen, s)
	n.authMu.Unlock()
}

// serversSaw reports whether any test server got s in a credential spot.
func (n *internet) serversSaw(s string) bool {
	n.authMu.Lock()
	defer n.authMu.Unlock()
	for _, v := range n.seen {
		if strings.Contains(v, s) {
			return true
		}
	}
	return false
}

// digest is how servers show a credential they got without echoing it.
func digest(v string) string {
	if v == "" {
		return "-"
	}
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:8])
}

func newInternet() (_ *internet, err error) {
	n := &internet{}
	defer func() {
		if err != nil {
			n.close()
		}
	}()
	addrs := []string{allowedIP + "/25"}
	for _, ip := range []string{evilIP, metaIP, cgnatIP, privIP, priv2IP} {
		addrs = append(addrs, ip+"/32")
	}
	if n.host, err = harness.NewTestHost(harness.TestHostOptions{
		Prefix: "eg", HostAddrs: []string{hostSideIP + "/25"}, Addrs: addrs, Gateway: hostSideIP,
	}); err != nil {
		return nil, err
	}
	// Host routes to the floor addresses, so that the host (and a gateway
	// that forgot its floor) could reach them. A metric of our own lets
	// another test add its own route to the same address (169.254.169.254
	// is everybody's metadata stand-in) without a clash.
	for _, ip := range []string{metaIP, cgnatIP, privIP, priv2IP} {
		n.host.Route(ip+"/32", 0, "metric", "4243")
	}

	ca, caKey, caPEM, err := newCA()
	if err != nil {
		return nil, err
	}
	n.caPEM = caPEM
	for _, ip := range []string{allowedIP, evilIP, metaIP, cgnatIP, privIP, priv2IP} {
		ln, err := n.host.Listen("tcp", ip+":80")
		if err != nil {
			return nil, err
		}
		n.serveHTTP(ln, nil)
	}
	for ip, names := range map[string][]string{allowedIP: {"allowed.test", "*.sfx.test", "rebind.test"}, evilIP: {"evil.test"}} {
		cert, err := leaf(ca, caKey, names)
		if err != nil {
			return nil, err
		}
		ln, err := n.host.Listen("tcp", ip+":443")
		if err != nil {
			return nil, err
		}
		n.serveHTTP(ln, &tls.Config{Certificates: []tls.Certificate{cert}})
	}
	for _, addr := range []string{allowedIP + ":8080", allowedIP + ":2222", evilIP + ":8080"} {
		ln, err := n.host.Listen("tcp", addr)
		if err != nil {
			return nil, err
		}
		n.serveBanner(ln)
	}
	for _, addr := range []string{allowedIP + ":5353", allowedIP + ":8080", evilIP + ":53"} {
		pc, err := n.host.ListenPacket("udp4", addr)
		if err != nil {
			return nil, err
		}
		n.serveUDPEcho(pc)
	}
	hostLn, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		return nil, err
	}
	n.hostPort = hostLn.Addr().(*net.TCPAddr).Port
	n.serveHTTP(markerListener{hostLn, "HOST"}, nil)

	if n.dns, err = startDNS(); err != nil {
		return nil, err
	}
	n.dnsAddr = n.dns.addr
	n.closers = append(n.closers, n.dns.close)
	return n, nil
}

func (n *internet) close() {
	for _, c := range n.closers {
		c()
	}
	if n.host != nil {
		n.host.Close() // the link takes its routes along
	}
}

// marker is what every test server answers with: who it is, and what
// host it was asked for. A probe that reads one of another server's
// markers reached it.
func marker(laddr net.Addr, host string) string {
	return fmt.Sprintf("M-%s host=%s", laddr, host)
}

// markerListener renames a listener's marker (the host listener answers
// "M-HOST" whatever address it was reached on).
type markerListener struct {
	net.Listener
	name string
}

func (n *internet) serveHTTP(ln net.Listener, tlsCfg *tls.Config) {
	name := ln.Addr().String()
	if ml, ok := ln.(markerListener); ok {
		name, ln = ml.name, ml.Listener
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if to := r.URL.Query().Get("redirect"); to != "" {
			http.Redirect(w, r, to, http.StatusFound)
			return
		}
		n.recordAuth(r.Header.Get("Authorization") + " " + r.Header.Get("X-Api-Key") + " " + r.URL.RawQuery)
		fmt.Fprintf(w, "M-%s host=%s auth=%s xkey=%s\n", name, r.Host, digest(r.Header.Get("Authorization")), digest(r.Header.Get("X-Api-Key")))
	})
	srv := &http.Server{Handler: mux, TLSConfig: tlsCfg, ReadHeaderTimeout: 5 * time.Second}
	if tlsCfg != nil {
		go srv.ServeTLS(ln, "", "")
	} else {
		go srv.Serve(ln)
	}
	n.closers = append(n.closers, func() { srv.Close() })
}

// serveBanner answers every connection with its marker and closes (a
// server-speaks-first protocol).
func (n *internet) serveBanner(ln net.Listener) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "M-%s banner\n", ln.Addr())
			c.Close()
		}
	}()
	n.closers = append(n.closers, func() { ln.Close() })
}

func (n *internet) serveUDPEcho(pc net.PacketConn) {
	go func() {
		buf := make([]byte, 2048)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte("M-UDP-"+pc.LocalAddr().String()), from)
		}
	}()
	n.closers = append(n.closers, func() { pc.Close() })
}

func newCA() (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "space egress test root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

func leaf(ca *x509.Certificate, caKey *ecdsa.PrivateKey, names []string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		DNSNames: names, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// dnsServer is the gateway's upstream: a fixed zone, one name that
// rebinds, and a log of every name asked.
type dnsServer struct {
	addr string
	udp  *dns.Server
	mu   sync.Mutex
	// asked holds every question's name, lower case, without the dot.
	asked   []string
	rebinds int
}

var zone = map[string][]string{
	"allowed.test":      {allowedIP},
	"api.sfx.test":      {allowedIP},
	"deep.api.sfx.test": {allowedIP},
	"sfx.test":          {evilIP},
	"evilsfx.test":      {evilIP},
	"evil.test":         {evilIP},
	"private.test":      {privIP},
	"meta.test":         {metaIP},
	"mapped.test":       {"::ffff:" + metaIP},
	"loop.test":         {"127.0.0.1"},
	"mixed.test":        {privIP, allowedIP},
	"hostaddr.test":     {hostSideIP},
}

func startDNS() (*dnsServer, error) {
	s := &dnsServer{}
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.addr = pc.LocalAddr().String()
	s.udp = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(s.serve)}
	go s.udp.ActivateAndServe()
	return s, nil
}

func (s *dnsServer) close() { s.udp.Shutdown() }

func (s *dnsServer) serve(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	defer w.WriteMsg(m)
	if len(req.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		return
	}
	q := req.Question[0]
	name := strings.TrimSuffix(strings.ToLower(q.Name), ".")
	s.mu.Lock()
	s.asked = append(s.asked, name)
	addrs, ok := zone[name]
	if name == "rebind.test" {
		// Public for the first A question, this host's address after.
		ok, addrs = true, []string{allowedIP}
		if q.Qtype == dns.TypeA {
			if s.rebinds > 0 {
				addrs = []string{hostSideIP}
			}
			s.rebinds++
		}
	}
	s.mu.Unlock()
	if !ok {
		m.Rcode = dns.RcodeNameError
		return
	}
	for _, a := range addrs {
		ip := net.ParseIP(a)
		hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 60}
		switch {
		case q.Qtype == dns.TypeA && ip.To4() != nil && !strings.Contains(a, ":"):
			hdr.Rrtype = dns.TypeA
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: ip.To4()})
		case q.Qtype == dns.TypeAAAA && strings.Contains(a, ":"):
			hdr.Rrtype = dns.TypeAAAA
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: ip})
		}
	}
}

// askedFor reports whether any question so far contained s.
func (s *dnsServer) askedFor(sub string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.asked {
		if strings.Contains(n, sub) {
			return true
		}
	}
	return false
}
