package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/spacesandbox/space/internal/bodylimit"
	"github.com/spacesandbox/space/internal/httpjson"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// Builds finds template builds in the catalog (store.Postgres).
type Builds interface {
	GetBuild(ctx context.Context, id string) (*store.Build, error)
}

// Forwarder sends each request that names a sandbox running on another
// node to that node, and serves the rest itself (Next): commands and their
// event streams (flushed as they come, Last-Event-ID passed on), files,
// PTY WebSockets (upgrades are proxied), the E2B API and its sandbox proxy
// (the Host header is kept, so <port>-<id>.<domain> still names the
// sandbox). The owner authenticates the user as always; the forwarder adds
// only its own signature.
type Forwarder struct {
	self       string
	router     *Router
	secret     []byte
	nonces     *nonceCache
	sandboxOf  func(*http.Request) string
	runs       func(string) bool
	nodeOf     func(*http.Request) string
	isCreate   func(*http.Request) bool
	templateOf func(*http.Request, []byte) string
	buildOf    func(*http.Request) string
	builds     Builds
	idem       Idempotency
	cache      memberCache
	// finishRetry is the first wait before an idempotent create's answer
	// that could not be stored is tried again.
	finishRetry time.Duration
	client      *http.Client
	next        http.Handler
	proxy       *httputil.ReverseProxy
	log         *slog.Logger
}

// ForwarderConfig configures a Forwarder.
type ForwarderConfig struct {
	// Self is this node's id.
	Self   string
	Router *Router
	// Secret is the cluster secret (store.Postgres.ClusterSecret).
	Secret []byte
	// SandboxOf answers the sandbox a request names ("" for none).
	SandboxOf func(*http.Request) string
	// IsCreate reports whether a request creates a sandbox, and
	// TemplateOf the template its body asks for: creates are placed.
	IsCreate   func(*http.Request) bool
	TemplateOf func(r *http.Request, body []byte) string
	// Idempotency keeps creates' Idempotency-Keys (nil: not kept).
	Idempotency Idempotency
	// NodeOf answers the node a request is about ("" for none): an
	// admin's node routes run on that node.
	NodeOf func(*http.Request) string
	// BuildOf answers the template build a request is about whose
	// answer lives on the build's node ("" for none): its log is on that
	// node's disk, and only that node can stop it. Builds says which
	// node that is.
	BuildOf func(*http.Request) string
	Builds  Builds
	// Runs reports whether this node runs sandbox id: with the catalog
	// away, the node still serves those, and answers 503 for the rest.
	Runs   func(id string) bool
	Next   http.Handler
	Logger *slog.Logger
}

// NewForwarder makes a forwarder.
func NewForwarder(cfg ForwarderConfig) *Forwarder {
	f := &Forwarder{self: cfg.Self, router: cfg.Router, secret: cfg.Secret, sandboxOf: cfg.SandboxOf, runs: cfg.Runs, nodeOf: cfg.NodeOf, next: cfg.Next,
		isCreate: cfg.IsCreate, templateOf: cfg.TemplateOf, idem: cfg.Idempotency, log: cfg.Logger, finishRetry: time.Second,
		buildOf: cfg.BuildOf, builds: cfg.Builds, nonces: newNonceCache(1 << 19)}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	transport := &http.Transport{
		Proxy:               nil, // nodes talk directly
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   false,
	}
	f.client = &http.Client{Transport: transport}
	f.proxy = &httputil.ReverseProxy{
		Rewrite:       f.rewrite,
		Transport:     transport,
		FlushInterval: -1, // event streams and output as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			node := r.Header.Get(headerNode)
			f.log.Warn("forward to the sandbox's node failed", "path", r.URL.Path, "err", err)
			writeError(w, http.StatusServiceUnavailable, "unavailable", fmt.Sprintf("the node that runs the sandbox does not answer (%s): retry", node))
		},
	}
	return f
}

type targetKey struct{}

func (f *Forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A signed request is served where it lands (never forwarded twice);
	// one whose signature does not verify is refused (sign.go).
	if r.Header.Get(headerNode) != "" || r.Header.Get(headerSig) != "" {
		if err := f.verify(r); errors.Is(err, errReplayCacheFull) {
			f.log.Warn("refused a forwarded request", "from", r.Header.Get(headerNode), "err", err)
			writeError(w, http.StatusServiceUnavailable, "unavailable", "this node is taking too many forwarded requests: retry")
			return
		} else if err != nil {
			f.log.Warn("refused a forwarded request", "from", r.Header.Get(headerNode), "remote", r.RemoteAddr, "err", err)
			writeError(w, http.StatusUnauthorized, "unauthenticated", "the forwarding node's signature does not verify: "+err.Error())
			return
		}
		f.next.ServeHTTP(w, r)
		return
	}
	if f.isCreate != nil && f.isCreate(r) {
		f.serveCreate(w, r)
		return
	}
	if node := f.buildNode(r); node != "" && node != f.self {
		f.forwardToNode(w, r, node)
		return
	}
	if f.nodeOf != nil {
		if node := f.nodeOf(r); node != "" && node != f.self {
			f.forwardToNode(w, r, node)
			return
		}
	}
	id := f.sandboxOf(r)
	if id == "" {
		f.next.ServeHTTP(w, r)
		return
	}
	rt, err := f.router.Lookup(r.Context(), id)
	if err != nil {
		// The catalog is away: this node still serves what it runs.
		if f.runs != nil && f.runs(id) {
			f.next.ServeHTTP(w, r)
			return
		}
		f.log.Warn("route lookup failed", "sandbox", id, "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the cluster catalog is unavailable, so the sandbox's node is not known: retry")
		return
	}
	if rt.Node == "" || rt.Node == f.self {
		f.next.ServeHTTP(w, r)
		return
	}
	f.forward(w, r, rt.Node, rt.Address)
}

// buildNode answers the node of the build r is about, when the answer
// lives there ("" when r is about none, or the catalog does not know the
// build: this node answers, 404 or 503, as it would alone).
func (f *Forwarder) buildNode(r *http.Request) string {
	if f.buildOf == nil || f.builds == nil {
		return ""
	}
	id := f.buildOf(r)
	if id == "" {
		return ""
	}
	b, err := f.builds.GetBuild(r.Context(), id)
	if err != nil {
		return ""
	}
	return b.Node
}

// forwardToNode sends r to node (found in the catalog).
func (f *Forwarder) forwardToNode(w http.ResponseWriter, r *http.Request, node string) {
	addr, err := f.router.NodeAddress(r.Context(), node)
	if err != nil {
		if errdefs.Class(err) == errdefs.ErrNotFound {
			writeError(w, http.StatusNotFound, "not_found", errdefs.PublicMessage(err))
		} else {
			writeError(w, http.StatusServiceUnavailable, "unavailable", "the cluster catalog is unavailable: retry")
		}
		return
	}
	f.forward(w, r, node, addr)
}

func (f *Forwarder) forward(w http.ResponseWriter, r *http.Request, node, address string) {
	target, err := url.Parse(address)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", fmt.Sprintf("node %s has no usable address", node))
		return
	}
	r.Header.Set(headerNode, node) // for the error handler; replaced when signed
	// The owner's answer may start (an event stream) before the transport
	// has read the end of the client's body: without full duplex, the
	// HTTP/1 server reads and closes that body itself when the answer's
	// header goes out, the transport's last read of it fails, and it
	// closes the connection to the owner under the stream. HTTP/2 is full
	// duplex already (the error is then harmless). FullDuplex also ends the
	// transport's reads of the body before the handler returns.
	r, done := bodylimit.FullDuplex(w, r)
	defer done()
	f.proxy.ServeHTTP(w, r.WithContext(withTarget(r.Context(), target)))
}

func (f *Forwarder) rewrite(pr *httputil.ProxyRequest) {
	target := targetOf(pr.In.Context())
	pr.SetURL(target)
	pr.Out.Host = pr.In.Host // the E2B proxy routes by host name
	pr.SetXForwarded()
	f.signOut(pr.Out)
}

// writeError answers in a shape both APIs' clients read: the native
// API's error object and E2B's code and message.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	httpjson.WriteStatus(w, bothShapes, status, code, msg, nil)
}

func bothShapes(status int, code, msg string, _ any) any {
	return map[string]any{
		"code": status, "message": msg,
		"error": map[string]string{"code": code, "message": msg},
	}
}

func withTarget(ctx context.Context, u *url.URL) context.Context {
	return context.WithValue(ctx, targetKey{}, u)
}

func targetOf(ctx context.Context) *url.URL {
	u, _ := ctx.Value(targetKey{}).(*url.URL)
	return u
}
