package sandbox

import (
	"maps"
	"net/netip"
	"sync"

	"github.com/spacesandbox/space/internal/egress/policy"
	"github.com/spacesandbox/space/internal/egress/secrets"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// checkNetwork refuses a policy the egress gateway could not read, with
// the parser's message (it names the entry).
func checkNetwork(p *NetworkPolicy) error {
	if _, err := policy.FromStore(NetworkRow(p)); err != nil {
		return errdefs.New(errdefs.ErrInvalidArgument, "network: %v", err)
	}
	return nil
}

// EgressView is what the egress gateway needs of a sandbox.
type EgressView struct {
	ID     string
	Tenant string
	// Policy is its egress policy, parsed (the zero Policy denies all).
	Policy policy.Policy
	// Secrets maps placeholders to secret names.
	Secrets map[string]string
}

// Egress answers the egress gateway's questions about the service's
// sandboxes: whose a connection from an address is, and which sandboxes
// may send anything at all.
type Egress struct {
	svc *Service
}

// NewEgress answers for the sandboxes of svc.
func NewEgress(svc *Service) *Egress { return &Egress{svc: svc} }

// OnChange has fn called whenever a sandbox's egress may have changed
// (created, policy replaced, ended), so that the gateway, which starts
// after the service, can refresh which sandboxes it takes traffic from.
// fn runs on the changing call's path, not under any sandbox's lock.
func (g *Egress) OnChange(fn func()) { g.svc.egressWatchers.add(fn) }

// ByAddr returns the running sandbox whose veth address is ip: how the
// egress gateway knows whose a connection is. A pooled or booting sandbox
// is not found, so it has no egress at all.
func (g *Egress) ByAddr(ip netip.Addr) (EgressView, bool) {
	for _, e := range g.svc.live.all() {
		if e.ep.SandboxIP != ip {
			continue
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.rec.State != store.StateRunning {
			return EgressView{}, false
		}
		// A connection or DNS question out is the sandbox at work: it
		// counts as activity, as a request in does (rest.go).
		if r := e.rest(); r != nil {
			r.touch()
		}
		p, err := policy.FromStore(e.rec.Network)
		if err != nil {
			// Policies are checked when set; deny all if one is not.
			g.svc.log.Error("egress: unreadable sandbox policy; denying all", "sandbox", e.rec.ID, "err", err)
		}
		return EgressView{ID: e.rec.ID, Tenant: tenant.Of(e.rec.Tenant), Policy: p, Secrets: maps.Clone(e.rec.Secrets)}, true
	}
	return EgressView{}, false
}

// EgressConfig is what sandboxes need of the egress gateway.
type EgressConfig struct {
	// CAPEM is the gateway's CA, installed in every sandbox's trust store.
	CAPEM []byte
	// SecretExists reports whether a secret may be attached (nil: none).
	SecretExists func(name string) bool
}

// egressChanged tells the watchers of the sandboxes' egress (OnChange).
func (s *Service) egressChanged() { s.egressWatchers.notify() }

// watchers are the functions told of a change; they may be added while
// changes are told.
type watchers struct {
	mu  sync.Mutex
	fns []func()
}

func (w *watchers) add(fn func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fns = append(w.fns, fn)
}

func (w *watchers) notify() {
	w.mu.Lock()
	fns := w.fns
	w.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// EgressAddrs returns the addresses of the running sandboxes whose policy
// allows any egress at all. Packets of the others never reach the
// gateway: the firewall drops them.
func (g *Egress) EgressAddrs() []netip.Addr {
	var out []netip.Addr
	for _, e := range g.svc.live.all() {
		// The record as last set: a create or resume that refreshes the
		// set must not wait for another sandbox's pause or kill.
		rec := e.record()
		if p, err := policy.FromStore(rec.Network); rec.State == store.StateRunning && err == nil && (p.Internet || len(p.Allow) > 0) {
			out = append(out, e.ep.SandboxIP)
		}
	}
	return out
}

// caEnv points the usual TLS stacks at the trust store that holds the
// gateway's CA (Node reads only its own bundle plus this file).
var caEnv = map[string]string{
	"SSL_CERT_FILE":       "/etc/ssl/certs/ca-certificates.crt",
	"REQUESTS_CA_BUNDLE":  "/etc/ssl/certs/ca-certificates.crt",
	"NODE_EXTRA_CA_CERTS": "/etc/ssl/certs/space-egress-ca.pem",
}

// attachSecrets gives each requested env var a fresh placeholder of its
// secret, and adds the CA variables the caller did not set.
func (s *Service) attachSecrets(req *CreateRequest) error {
	env := maps.Clone(req.Env)
	if env == nil {
		env = map[string]string{}
	}
	if len(req.Secrets) > 0 {
		req.placeholders = map[string]string{}
	}
	for k, name := range req.Secrets {
		if !envName.MatchString(k) {
			return errdefs.New(errdefs.ErrInvalidArgument, "secrets: env var name %q is not valid", k)
		}
		if _, ok := req.Env[k]; ok {
			return errdefs.New(errdefs.ErrInvalidArgument, "secrets: env var %q is also in env", k)
		}
		if s.cfg.Egress.SecretExists == nil || !s.cfg.Egress.SecretExists(name) {
			return errdefs.New(errdefs.ErrInvalidArgument, "secrets: no secret named %q", tenant.Bare(name))
		}
		p := secrets.NewPlaceholder(name)
		env[k], req.placeholders[p] = p, name
	}
	for k, v := range platformEnv(s.cfg.Egress.CAPEM) {
		if _, ok := env[k]; !ok {
			env[k] = v
		}
	}
	if len(env) > 0 {
		req.Env = env
	}
	return nil
}

// platformEnv is the env every sandbox gets unless its caller sets the
// same names: the CA variables when the gateway has a CA (ca). Boot gives
// it to the agent, so a claim whose env is just this does not call the
// agent.
func platformEnv(ca []byte) map[string]string {
	if len(ca) == 0 {
		return nil
	}
	return maps.Clone(caEnv)
}
