package cluster

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// How nodes authenticate the requests they forward to each other. The
// forwarding node adds who it is, when, a nonce, and an HMAC-SHA256 under
// the cluster secret over those, the method, the host, the path and query,
// and the headers that say who the user is (their credentials) and which
// sandbox they address. The node it lands on checks the HMAC, the time
// (within maxSkew of its clock) and that it has not seen the nonce: a
// request caught on the wire cannot be sent again, nor sent with another
// path, query, method or credential. The body is streamed and is not
// covered (see docs/cluster.md: node-to-node traffic belongs on a private
// network or behind TLS).
const (
	headerNode  = "Space-Forwarded-By"
	headerTime  = "Space-Forwarded-At"
	headerNonce = "Space-Forwarded-Nonce"
	headerSig   = "Space-Forwarded-Signature"
)

// maxSkew is how far a forwarded request's time may be from this node's.
const maxSkew = time.Minute

// signedHeaders are the headers a signature covers, in this order: the
// user's credentials (native, E2B, the agent's and traffic tokens, the
// console's session) and the sandbox the E2B proxy routes to.
var signedHeaders = []string{"Authorization", "X-Api-Key", "X-Access-Token", "E2b-Traffic-Access-Token", "Cookie", "E2b-Sandbox-Id", "E2b-Sandbox-Port"}

// signature is the HMAC of a forwarded request under secret.
func signature(secret []byte, node, ts, nonce, method, host, uri string, h http.Header) string {
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "space-forward-v2\n%s\n%s\n%s\n%s\n%s\n%s\n", node, ts, nonce, method, host, uri)
	for _, name := range signedHeaders {
		// Length-prefixed: no value can pass for another header's.
		v := strings.Join(h.Values(name), "\x00")
		fmt.Fprintf(m, "%s %d %s\n", name, len(v), v)
	}
	return hex.EncodeToString(m.Sum(nil))
}

// signOut signs out, a request this node sends to another, in place.
func (f *Forwarder) signOut(out *http.Request) {
	var n [16]byte
	rand.Read(n[:]) // never fails (crypto/rand panics first)
	nonce := hex.EncodeToString(n[:])
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	out.Header.Set(headerNode, f.self)
	out.Header.Set(headerTime, ts)
	out.Header.Set(headerNonce, nonce)
	out.Header.Set(headerSig, signature(f.secret, f.self, ts, nonce, out.Method, out.Host, out.URL.RequestURI(), out.Header))
}

// errReplayCacheFull: the node holds as many nonces as it keeps; the
// forward is refused (503, retry), never let through unchecked.
var errReplayCacheFull = errors.New("too many forwarded requests to remember their nonces")

// verify checks a forwarded request's signature, time and nonce.
func (f *Forwarder) verify(r *http.Request) error {
	node, ts, nonce, sig := r.Header.Get(headerNode), r.Header.Get(headerTime), r.Header.Get(headerNonce), r.Header.Get(headerSig)
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || node == "" || sig == "" || len(nonce) != 32 {
		return fmt.Errorf("incomplete")
	}
	if _, err := hex.DecodeString(nonce); err != nil {
		return fmt.Errorf("incomplete")
	}
	signed := time.Unix(sec, 0)
	if d := time.Since(signed); d > maxSkew || d < -maxSkew {
		return fmt.Errorf("signed %s away from this node's clock", d.Round(time.Second))
	}
	want := signature(f.secret, node, ts, nonce, r.Method, r.Host, r.URL.RequestURI(), r.Header)
	if !hmac.Equal([]byte(want), []byte(strings.ToLower(sig))) {
		return fmt.Errorf("bad signature")
	}
	// Only a request signed with the secret gets this far: nobody without
	// it can fill the cache.
	return f.nonces.add(node+"/"+nonce, time.Now())
}

// nonceCache remembers the nonces of the forwarded requests a node
// accepted, long enough that a signature they came with has expired: a
// request signed at t verifies until t+maxSkew, and t may be up to maxSkew
// ahead of this node's clock, so 2*maxSkew from its arrival. Two
// generations, each spanning 2*maxSkew, keep every nonce at least that
// long (and at most twice). At most max nonces are kept; past that,
// forwards are refused until a generation ages out.
type nonceCache struct {
	mu      sync.Mutex
	max     int
	span    time.Duration
	started time.Time // of cur
	cur     map[string]struct{}
	prev    map[string]struct{}
}

// newNonceCache keeps up to max nonces: about 100 bytes each (2^20 of
// them took 101 MiB of heap), and a node that accepts 1,000 forwards a
// second holds 120,000 to 240,000.
func newNonceCache(max int) *nonceCache {
	return &nonceCache{max: max, span: 2 * maxSkew, cur: map[string]struct{}{}, prev: map[string]struct{}{}}
}

// add records nonce, seen at now, or says why it may not be: seen
// before, or no room.
func (c *nonceCache) add(nonce string, now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started.IsZero() {
		c.started = now
	}
	switch age := now.Sub(c.started); {
	case age >= 2*c.span: // both generations aged out
		c.prev, c.cur, c.started = map[string]struct{}{}, map[string]struct{}{}, now
	case age >= c.span:
		c.prev, c.cur, c.started = c.cur, map[string]struct{}{}, c.started.Add(c.span)
	}
	if _, ok := c.cur[nonce]; ok {
		return fmt.Errorf("replayed: its nonce was seen before")
	}
	if _, ok := c.prev[nonce]; ok {
		return fmt.Errorf("replayed: its nonce was seen before")
	}
	if len(c.cur)+len(c.prev) >= c.max {
		return errReplayCacheFull
	}
	c.cur[nonce] = struct{}{}
	return nil
}
