// Package e2bcompat lets the unmodified E2B SDKs use spaced. It has two
// halves on spaced's one listener:
//
//   - the control plane (POST /v2/sandboxes, GET /sandboxes/{id}, ...), a thin
//     translation of E2B's REST API onto the same sandbox.Service as /v1;
//   - the sandbox side: requests that name a sandbox, by the E2b-Sandbox-Id
//     header or by a <port>-<id>.<domain> host name, are checked for the
//     sandbox's access token and reverse-proxied, streaming, to its agent
//     (port 49983, which speaks envd) or to a user's port inside it.
//
// Everything else goes to the native API handler.
package e2bcompat

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/httpjson"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/tenant"
)

// EnvdVersion is the envd version the agent's surface matches. The SDKs
// switch features on by it (0.6.4 and later turn on everything they use).
const EnvdVersion = "0.6.13"

// ClientID is E2B's deprecated clientID, which the SDKs still require.
const ClientID = "space"

// EnvdPort is the agent's port, the one E2B clients send in E2b-Sandbox-Port.
const EnvdPort = sandbox.AgentPort

// Sandboxes is what the E2B layer needs of the sandbox service.
type Sandboxes interface {
	// Owner says whose a sandbox is (another tenant's answers as unknown).
	Owner(ctx context.Context, id string) (string, bool)
	Create(ctx context.Context, req sandbox.CreateRequest) (*sandbox.Sandbox, error)
	Get(ctx context.Context, id string) (*sandbox.Sandbox, error)
	List(ctx context.Context, f sandbox.ListFilter) ([]*sandbox.Sandbox, error)
	Kill(ctx context.Context, id string) error
	SetTimeout(ctx context.Context, id string, d time.Duration) (*sandbox.Sandbox, error)
	ExtendTimeout(ctx context.Context, id string, d time.Duration) (*sandbox.Sandbox, error)
	SetNetwork(ctx context.Context, id string, p *sandbox.NetworkPolicy) error
}

// Targets finds running sandboxes for the proxy and for connect
// (sandbox.Targets).
type Targets interface {
	Target(id string) (sandbox.Target, error)
	FindRunning(match func(token string) bool) (string, bool)
	AutoResumeTarget(ctx context.Context, id string) (sandbox.Target, error)
}

// Checkpoints pauses, resumes and forks sandboxes (sandbox.Checkpoints).
type Checkpoints interface {
	Pause(ctx context.Context, id string, opts sandbox.PauseOptions) (*sandbox.Sandbox, error)
	Resume(ctx context.Context, id string, timeout time.Duration) (*sandbox.Sandbox, error)
	Fork(ctx context.Context, id string, req sandbox.ForkRequest) ([]*sandbox.Sandbox, error)
}

// Snapshots takes and keeps sandboxes' snapshots (sandbox.Snapshots).
type Snapshots interface {
	TakeSnapshot(ctx context.Context, id string, opts sandbox.SnapshotOptions) (*sandbox.Snapshot, error)
	Snapshots(ctx context.Context, f sandbox.SnapshotFilter) ([]*sandbox.Snapshot, error)
	GetSnapshot(ctx context.Context, ref string) (*sandbox.Snapshot, error)
	DeleteSnapshot(ctx context.Context, ref string) (int, error)
}

// Options configure the E2B layer.
type Options struct {
	// Logger receives the layer's log lines (nil: discarded).
	Logger *slog.Logger
	// Sandboxes, Checkpoints, Snapshots and Targets are the sandbox
	// service, its pauses, resumes and forks, its snapshots, and the
	// lookup of its running sandboxes (sandbox.Service,
	// sandbox.Checkpoints, sandbox.Snapshots, sandbox.Targets).
	Sandboxes   Sandboxes
	Checkpoints Checkpoints
	Snapshots   Snapshots
	Targets     Targets
	// Templates serves E2B's template builds (nil: they answer 501).
	Templates Templates
	// Telemetry serves sandboxes' metrics and logs (nil: they answer 501).
	Telemetry Telemetry
	// Volumes serves E2B's volumes (nil: they answer 501).
	Volumes Volumes
	// Webhooks serves E2B's lifecycle webhooks (nil: they answer 501).
	Webhooks Webhooks
	// MaxUpload bounds one uploaded file set.
	MaxUpload int64
	// Tenants checks the API keys E2B clients send in X-API-KEY; Audit
	// records every state-changing call (nil: none).
	Tenants *tenant.Service
	Audit   *tenant.Audit
	// Domain is reported as the sandboxes' domain, so the SDKs' get_host(port)
	// gives <port>-<id>.<Domain>. Empty: the host name the client used to reach
	// spaced, with "localhost" standing in for a loopback address.
	Domain string
	// IdempotencyKeys: a forwarder in front keeps creates' Idempotency-Keys
	// (cluster mode). Without it a create that sends one is refused (501),
	// as a key ignored would let a retry make a second sandbox.
	IdempotencyKeys bool
	// Next serves every request that is not E2B's (the native API).
	Next http.Handler
	// Dial connects to a sandbox address (ip:port); nil means a plain TCP
	// dial bounded to a few seconds. Tests point it elsewhere.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Server routes E2B requests and passes the rest to Options.Next.
type Server struct {
	opts  Options
	api   http.Handler
	proxy *proxy
	// uploadKey signs template upload links (made at start: a link lives
	// an hour, and a restart only makes clients ask again).
	uploadKey []byte
}

// New returns the E2B layer, ready to be spaced's top-level handler.
func New(opts Options) *Server {
	if opts.Next == nil {
		opts.Next = http.NotFoundHandler()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, uploadKey: newUploadKey()}
	s.api = s.routes()
	s.proxy = newProxy(opts.Targets, opts.Checkpoints, sandbox.NewPortTransport(opts.Targets.Target, opts.Dial, InterpreterPort), opts.Logger)
	return s
}

// ServeHTTP picks the plane: sandbox side, E2B control plane, or native.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r = r.WithContext(httpjson.WithLogger(r.Context(), s.opts.Logger))
	if t, ok := sandboxRoute(r); ok {
		s.proxy.serve(w, r, t)
		return
	}
	if isSignedFileRequest(r) {
		s.proxy.serveSignedFile(w, r)
		return
	}
	if IsControlPlanePath(r.URL.Path) {
		s.api.ServeHTTP(w, r)
		return
	}
	s.opts.Next.ServeHTTP(w, r)
}

// IsControlPlanePath reports whether path belongs to E2B's control plane.
// The native API lives under /v1, /healthz and /metrics, so nothing overlaps.
func IsControlPlanePath(path string) bool {
	if path == "/health" {
		return true
	}
	for _, prefix := range []string{"/sandboxes", "/v2/sandboxes", "/snapshots", "/templates", "/v2/templates", "/v3/templates", "/volumes", "/volumecontent", "/events"} {
		if path == prefix || strings.HasPrefix(path, prefix+"/") {
			return true
		}
	}
	return false
}
