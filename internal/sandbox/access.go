package sandbox

import (
	"context"
	"net/netip"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// Target is what a proxy in front of a running sandbox needs: where it is
// and what opens it. It holds the access token, so it never leaves spaced
// except as the E2B envdAccessToken given to the sandbox's owner.
type Target struct {
	ID string
	// IP is the sandbox's address on its veth; the agent is on AgentPort.
	IP          netip.Addr
	AccessToken string
	// OpenAccess: the proxy lets requests in without a token (E2B secure=false).
	OpenAccess bool
	Network    *NetworkPolicy
	// Tenant owns the sandbox (set by AutoResumeTarget, whose resume runs
	// as that tenant).
	Tenant string
	// conns is the running instance's connection set (nil in a test's
	// Target): connections to the sandbox are tracked in it.
	conns *connSet
}

// instance numbers the sandbox's running instance (0: unknown).
func (t Target) instance() uint64 {
	if t.conns == nil {
		return 0
	}
	return t.conns.n
}

// Targets finds running sandboxes for what reaches into them: the proxies
// in front of them (E2B's, the code interpreters' client, the port
// transport), the cluster's forwarder (Runs), and Commands and Files,
// which stand on its agent lookup (Agent). It only reads the sandboxes the
// service keeps.
type Targets struct {
	svc *Service
}

// NewTargets finds the running sandboxes of svc.
func NewTargets(svc *Service) *Targets { return &Targets{svc: svc} }

// Runs reports whether this node runs sandbox id.
func (t *Targets) Runs(id string) bool {
	_, ok := t.svc.live.entry(id)
	return ok
}

// Target returns how to reach a running sandbox. A sandbox that is not
// running is NotFound.
func (t *Targets) Target(id string) (Target, error) {
	e, ok := t.svc.live.entry(id)
	if !ok {
		return Target{}, t.svc.notRunning(id)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.rec.State != store.StateRunning {
		return Target{}, errdefs.New(errdefs.ErrNotFound, "sandbox %q is %s", id, e.rec.State)
	}
	return Target{
		ID: id, IP: e.ep.SandboxIP, AccessToken: e.rec.AccessToken,
		OpenAccess: e.rec.OpenAccess, Network: NetworkOf(e.rec.Network),
		conns: e.agent.conns,
	}, nil
}

// AutoResumeTarget is Target for a paused sandbox created with auto-resume:
// what a proxy needs to check a request's right to wake it (no address: it
// has none until it is resumed). Any other sandbox is NotFound.
func (t *Targets) AutoResumeTarget(ctx context.Context, id string) (Target, error) {
	rec, err := t.svc.store.GetSandbox(ctx, id)
	if err != nil {
		return Target{}, err
	}
	if rec.State != store.StatePaused || !rec.AutoResume {
		return Target{}, errdefs.New(errdefs.ErrNotFound, "sandbox %q is %s", id, rec.State)
	}
	if rec.Checkpoint != nil && rec.Checkpoint.DiskOnly {
		// Traffic cannot find its process again in a sandbox that boots
		// afresh: such a sandbox is resumed only by an explicit call.
		return Target{}, errdefs.New(errdefs.ErrNotFound, "sandbox %q is paused without its memory: resume it with connect", id)
	}
	return Target{ID: id, AccessToken: rec.AccessToken, OpenAccess: rec.OpenAccess, Network: NetworkOf(rec.Network), Tenant: rec.Tenant}, nil
}

// FindRunning returns the first running sandbox whose access token makes
// match true. It lets a signed URL that names no sandbox (E2B download and
// upload URLs) find the one whose token signed it. It reads the records
// as last set, waiting for no sandbox's lock: a download must not wait
// for another sandbox's pause or kill.
func (t *Targets) FindRunning(match func(token string) bool) (string, bool) {
	for _, e := range t.svc.live.all() {
		if rec := e.record(); rec.State == store.StateRunning && match(rec.AccessToken) {
			return rec.ID, true
		}
	}
	return "", false
}

// Agent returns the connection to a running sandbox's agent.
func (t *Targets) Agent(id string) (*AgentConn, error) {
	e, ok := t.svc.live.entry(id)
	if !ok {
		return nil, t.svc.notRunning(id)
	}
	return e.agent, nil
}

// SetNetwork replaces a running sandbox's egress policy; the gateway
// applies it to the next connection and DNS question.
func (s *Service) SetNetwork(ctx context.Context, id string, p *NetworkPolicy) error {
	if err := checkNetwork(p); err != nil {
		return err
	}
	_, err := s.updateRunning(ctx, id, "network policy", func(rec *store.Sandbox) bool {
		rec.Network = NetworkRow(p)
		return true
	})
	s.egressChanged()
	return err
}

// ExtendTimeout makes the sandbox expire d from now unless it already
// expires later; it never shortens the lifetime.
func (s *Service) ExtendTimeout(ctx context.Context, id string, d time.Duration) (*Sandbox, error) {
	if err := s.checkTimeout(d); err != nil {
		return nil, err
	}
	return s.updateRunning(ctx, id, "timeout", func(rec *store.Sandbox) bool {
		until := time.Now().UTC().Add(d)
		if !until.After(rec.ExpiresAt) {
			return false
		}
		rec.ExpiresAt = until
		return true
	})
}
