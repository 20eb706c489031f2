// Package cutproxy is a TCP proxy for loopback tests that cuts connections
// at random: it forwards every connection it accepts to one target and
// resets both sides (RST, no FIN) after a random number of bytes sent back
// to the client, or after a random lifetime, each drawn from an
// exponential distribution with a configurable mean and a seeded source.
// It counts the connections and the cuts. space bench --reconnects puts it
// between its clients and spaced.
package cutproxy

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Proxy. With both means zero it never cuts.
type Options struct {
	// Target is the host:port every connection is forwarded to.
	Target string
	// MeanBytes is the mean of the bytes relayed from the target to the
	// client before a connection is cut (0: no cut by bytes). The cut
	// falls where the budget ends, in the middle of a write if need be.
	MeanBytes int
	// MeanLife is the mean time a connection lives before it is cut (0:
	// no cut by time).
	MeanLife time.Duration
	// Seed seeds the draws: the same seed draws the same limits for the
	// connections in the order they are accepted.
	Seed uint64
}

// Stats are what a Proxy has done so far.
type Stats struct {
	Conns int64 // connections accepted and forwarded
	Cuts  int64 // of them, cut by the proxy (not closed by either side)
	// Bytes relayed from the target to the clients.
	Bytes int64
}

// Proxy forwards connections to Options.Target until Close.
type Proxy struct {
	opts Options
	ln   net.Listener

	mu     sync.Mutex
	rng    *rand.Rand
	live   map[*pair]struct{}
	closed bool

	conns, cuts, bytes atomic.Int64
	wg                 sync.WaitGroup
}

// Listen starts a proxy on a free loopback port.
func Listen(o Options) (*Proxy, error) {
	if o.Target == "" {
		return nil, errors.New("cutproxy: no target")
	}
	if o.MeanBytes < 0 || o.MeanLife < 0 {
		return nil, fmt.Errorf("cutproxy: negative mean (bytes %d, life %s)", o.MeanBytes, o.MeanLife)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("cutproxy: listen: %w", err)
	}
	p := &Proxy{opts: o, ln: ln, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15)), live: map[*pair]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	return Stats{Conns: p.conns.Load(), Cuts: p.cuts.Load(), Bytes: p.bytes.Load()}
}

// Close stops accepting, closes every open connection (not counted as
// cuts) and waits for the relays to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	live := p.live
	p.live = map[*pair]struct{}{}
	p.mu.Unlock()
	err := p.ln.Close()
	for pr := range live {
		pr.end(false)
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// limits draws one connection's byte budget and lifetime (-1 and 0: none).
func (p *Proxy) limits() (budget int64, life time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	budget = -1
	if p.opts.MeanBytes > 0 {
		budget = int64(p.rng.ExpFloat64()*float64(p.opts.MeanBytes)) + 1
	}
	if p.opts.MeanLife > 0 {
		life = time.Duration(p.rng.ExpFloat64()*float64(p.opts.MeanLife)) + time.Millisecond
	}
	return budget, life
}

// pair is one client connection and its connection to the target.
type pair struct {
	p              *Proxy
	client, target net.Conn
	once           sync.Once
}

// end closes both sides once; a cut resets them and is counted.
func (pr *pair) end(cut bool) {
	pr.once.Do(func() {
		if cut {
			pr.p.cuts.Add(1)
			for _, c := range []net.Conn{pr.client, pr.target} {
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetLinger(0) // RST: the peer sees a reset, as from a dropped link
				}
			}
		}
		pr.client.Close()
		pr.target.Close()
		pr.p.mu.Lock()
		delete(pr.p.live, pr)
		pr.p.mu.Unlock()
	})
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	target, err := net.DialTimeout("tcp", p.opts.Target, 5*time.Second)
	if err != nil {
		client.Close()
		return
	}
	pr := &pair{p: p, client: client, target: target}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		client.Close()
		target.Close()
		return
	}
	p.live[pr] = struct{}{}
	p.mu.Unlock()
	p.conns.Add(1)
	budget, life := p.limits()
	if life > 0 {
		t := time.AfterFunc(life, func() { pr.end(true) })
		defer t.Stop()
	}
	done := make(chan struct{})
	go func() { // client to target: never cut, only closed with the other side
		defer close(done)
		_, _ = io.Copy(target, client)
		pr.end(false)
	}()
	buf := make([]byte, 32<<10)
	for {
		n, rerr := target.Read(buf)
		if n > 0 {
			out, cut := buf[:n], false
			if budget >= 0 && int64(n) >= budget {
				out, cut = buf[:budget], true
			}
			w, werr := client.Write(out)
			p.bytes.Add(int64(w))
			if cut {
				pr.end(true)
				break
			}
			if budget >= 0 {
				budget -= int64(w)
			}
			if werr != nil {
				break
			}
		}
		if rerr != nil {
			break
		}
	}
	pr.end(false)
	<-done
}
