package sandbox

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spacesandbox/space/internal/admission"
	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/network"
	"github.com/spacesandbox/space/internal/recipe"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/seal"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// Config of the service.
type Config struct {
	// Logger receives the service's log lines (nil: discarded).
	Logger *slog.Logger
	// Templates resolves template names to images.
	Templates      Templates
	DefaultTimeout time.Duration
	MaxTimeout     time.Duration
	Defaults       runtime.Limits
	// Network is the address plan for sandbox veth pairs.
	Network network.Plan
	// Links sets up and removes each sandbox's network on the host (its
	// namespace and veth pair); nil is the host's own (network.Host).
	Links Network
	// AgentBootTimeout bounds how long a new sandbox's agent may take to answer.
	AgentBootTimeout time.Duration
	// KeepEnded is how long records of killed or lost sandboxes stay listable.
	KeepEnded time.Duration
	// Pools are the warm pools, one per template at most.
	Pools []PoolConfig
	// PoolBoots bounds how many pool sandboxes boot at once, across pools.
	PoolBoots int
	// MaxBoots bounds how many sandboxes creates boot at once; more wait
	// their turn (a boot that waits does not spend its boot timeout).
	MaxBoots int
	// Checkpoints is where checkpoints and disk snapshots are stored; nil
	// turns pause, resume, fork and snapshots off.
	Checkpoints *checkpoint.Repo
	// Keys holds the platform key and the customer keys (BYOK).
	Keys *seal.Keyring
	// ImagesDir holds checkpoint images while they are made or restored.
	ImagesDir string
	// PausedRetention is how long a paused sandbox is kept before it and
	// its checkpoint are deleted.
	PausedRetention time.Duration
	// Egress is what sandboxes need of the egress gateway.
	Egress EgressConfig
	// Volumes is the volume service; nil: sandboxes mount no volumes.
	Volumes Volumes
	// Admission is the node's budgets; nil admits every start.
	Admission *AdmissionConfig
	// Quotas returns a tenant's quotas (internal/tenant); nil: none.
	Quotas func(tenant string) store.Quotas
	// TeardownBeforeAnswer makes a pause answer only once the paused
	// sandbox is torn down, instead of tearing it down in the background
	// (a resume here waits for it either way). Cluster mode sets it:
	// another node may restore the sandbox at once, under the same name.
	TeardownBeforeAnswer bool
	// IdleFreeze is how long a running sandbox may go unreached before it
	// is frozen at rest (rest.go), unless it sets its own; 0: never.
	IdleFreeze time.Duration
	// IdleHibernate is how long a running sandbox may go unreached before
	// it is hibernated into Hibernation (0 or no Hibernation: never),
	// unless it sets its own.
	IdleHibernate time.Duration
	// Hibernation keeps the images of hibernated sandboxes, on this
	// node's own disk (a wake must not wait for object storage).
	Hibernation *checkpoint.Repo
}

// Network is what the service needs of the host's networking: a
// sandbox's namespace and veth pair made on its endpoint, and removed.
// network.Host is the real one; tests use one that makes nothing.
type Network interface {
	// Attach makes ep's namespace and link; on failure it removes what
	// it made. An address range in use on the host is
	// network.ErrRangeInUse.
	Attach(ep network.Endpoint) error
	// Detach removes ep's namespace and link; missing pieces are not an
	// error (half-made or already removed endpoints).
	Detach(ep network.Endpoint) error
}

// Service owns the sandboxes of this node: their lifecycle (create, kill,
// timeouts, recovery at start) and what every part that boots, restores or
// looks up sandboxes stands on: their records, and the parts it holds,
// each of one job: the boot, restore and teardown of sandboxes on this
// host (booter, which shares with Checkpoints the network slots held back
// from allocation), the live sandboxes with the tenants' quotas starts
// reserve to become one (liveSet), the admission of each start against the
// node's budgets (admitter), the quotas pauses and snapshots reserve
// (storedQuotas). The parts that work on sandboxes have a job each:
// Pools, Checkpoints and Snapshots, which the service makes and hands out
// (the last two given the parts they share with it); BuildBoxes, Targets,
// Egress and Feed, which the daemon makes on it; Commands and Files on
// Targets' agent lookup.
type Service struct {
	cfg     Config
	log     *slog.Logger
	store   store.Sandboxes
	rt      runtime.Runtime
	metrics *Metrics
	// egressWatchers are told when a sandbox's egress may have changed
	// (Egress.OnChange).
	egressWatchers watchers
	// hibernatedNow counts the live sandboxes hibernated now (rest.go):
	// they hold no runtime sandbox, so no place in the node's budget.
	hibernatedNow atomic.Int64
	// nodeDraining: the node takes no new sandboxes (see SetDraining).
	nodeDraining atomic.Bool
	// adm is the node's budgets and what its sandboxes were measured at
	// (nil: no budgets); admits admits each start against it.
	adm    *admission.Controller
	admits *admitter

	// live is the live sandboxes and what starts in flight reserve of
	// their tenants' quotas.
	live *liveSet
	// stored reserves the tenants' quotas that pauses and snapshots in
	// flight will take in the object store.
	stored *storedQuotas
	// booter boots, restores and tears down sandboxes on this host.
	booter *booter

	// ckpts pauses, resumes and forks sandboxes; it owns the locks of
	// paused sandboxes.
	ckpts *Checkpoints
	// snaps takes and keeps snapshots of sandboxes.
	snaps *Snapshots

	pools     *Pools
	stopPools context.CancelFunc
	poolsDone sync.WaitGroup

	// background counts the teardowns of pool sandboxes a resize gave up
	// still running.
	background sync.WaitGroup
}

// entry is a live sandbox: its record, its agent connection and a lock that
// serialises lifecycle changes (kill vs. timeout vs. set-timeout).
type entry struct {
	mu sync.Mutex
	// rec is replaced (setRec), never changed in place.
	rec *store.Sandbox
	// pub is rec as last set, for readers that look at every sandbox
	// (the egress set, a signed URL's sandbox): they must not wait for
	// one that is being paused, forked or killed, which holds mu
	// throughout (seconds on a loaded host).
	pub   atomic.Pointer[store.Sandbox]
	agent *AgentConn
	ep    network.Endpoint
	// Disk snapshot schedule: when the last one ended, and whether one is
	// being taken.
	lastSnapshot time.Time
	snapshotting bool
	// build is the template build whose sandbox this is (never changes).
	build string
	// owner and use are the tenant it counts against and what it holds
	// of the tenant's quotas (never change; zero for pool and build
	// sandboxes).
	owner string
	use   tenant.Usage
}

// published makes e's record readable without its lock; for an entry
// just made.
func (e *entry) published() *entry {
	e.pub.Store(e.rec)
	return e
}

// setRec replaces e's record; the caller holds e.mu.
func (e *entry) setRec(r *store.Sandbox) {
	e.rec = r
	e.pub.Store(r)
}

// record is e's record as last set, without waiting for e.mu. Never
// change it.
func (e *entry) record() *store.Sandbox { return e.pub.Load() }

// New returns a service; call Recover before serving requests.
func New(cfg Config, st store.Sandboxes, rt runtime.Runtime, m *Metrics) *Service {
	if cfg.AgentBootTimeout == 0 {
		cfg.AgentBootTimeout = 15 * time.Second
	}
	if cfg.KeepEnded == 0 {
		cfg.KeepEnded = time.Hour
	}
	if cfg.PoolBoots == 0 {
		cfg.PoolBoots = 1
	}
	if cfg.MaxBoots == 0 {
		cfg.MaxBoots = 4
	}
	if cfg.PausedRetention == 0 {
		cfg.PausedRetention = 30 * 24 * time.Hour
	}
	if cfg.Links == nil {
		cfg.Links = network.Host{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{cfg: cfg, log: cfg.Logger, store: st, rt: rt, metrics: m}
	s.live = newLiveSet(cfg.Quotas, m, s.attachRest, s.egressChanged)
	s.pools = newPools(s, cfg.Pools)
	s.adm = s.newAdmission(cfg.Admission)
	// The network slots allocation avoids for now: the booter's, which
	// allocates them, and the pauses', which hold a paused sandbox's.
	sl := newSlots()
	s.booter = newBooter(cfg, st, rt, sl, s.adm)
	s.admits = &admitter{adm: s.adm, log: s.log, makeRoom: func(ctx context.Context, ref *admission.Refusal) bool {
		return s.pools.releaseOne(ctx, ref) || s.hibernateForRoom(ctx, ref)
	}}
	s.stored = newStoredQuotas(cfg.Quotas, s.storedOf, s.adm, m)
	s.ckpts = &Checkpoints{svc: s, booter: s.booter, live: s.live, admits: s.admits, stored: s.stored, slots: sl}
	s.snaps = &Snapshots{svc: s, booter: s.booter, live: s.live, admits: s.admits, stored: s.stored, ckpts: s.ckpts}
	return s
}

// StartPools fills the warm pools in the background until Close, and
// starts sampling what the node's sandboxes take (admission control):
// call it after Recover, so the first sample sees every sandbox.
func (s *Service) StartPools(ctx context.Context) {
	ctx, s.stopPools = context.WithCancel(ctx)
	if err := s.adm.Refresh(ctx); err != nil {
		s.log.Warn("admission: first sample failed", "err", err)
	}
	s.poolsDone.Add(1)
	go func() {
		defer s.poolsDone.Done()
		s.adm.Run(ctx, time.Second)
	}()
	s.pools.start(ctx, &s.poolsDone)
}

// Pools are the node's warm pools.
func (s *Service) Pools() *Pools { return s.pools }

// Checkpoints pauses, resumes and forks the node's sandboxes.
func (s *Service) Checkpoints() *Checkpoints { return s.ckpts }

// Snapshots takes and keeps snapshots of the node's sandboxes.
func (s *Service) Snapshots() *Snapshots { return s.snaps }

// Close stops the pools and tears down their unclaimed sandboxes, and
// waits for the teardowns of paused sandboxes. Claimed sandboxes keep
// running.
func (s *Service) Close() {
	if s.stopPools != nil {
		s.stopPools()
	}
	s.poolsDone.Wait()
	s.background.Wait()
	s.ckpts.teardowns.Wait()
	s.pools.drain()
}

// limitsOf is what a sandbox of img gets when the request names no limits:
// the template's own, else the node's defaults.
func (s *Service) limitsOf(img *Image) runtime.Limits {
	l, d := img.Limits, s.cfg.Defaults
	for _, f := range []struct {
		v   *int
		def int
	}{{&l.CPUs, d.CPUs}, {&l.MemoryMB, d.MemoryMB}, {&l.DiskMB, d.DiskMB}, {&l.MaxProcs, d.MaxProcs}} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	return l
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

const (
	maxMetadataEntries = 64
	maxMetadataLen     = 1024
	maxEnvEntries      = 256
	maxEnvValueLen     = 32 << 10
)

// validate checks req, fills in its defaults (the template's, then the
// node's) and returns the template's image.
func (s *Service) validate(ctx context.Context, req *CreateRequest) (*Image, error) {
	if req.Template == "" {
		req.Template = "base"
	}
	if !recipe.TemplateRef.MatchString(req.Template) {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "template %q is not a valid name[:tag]", req.Template)
	}
	// What needs no template is checked first: bad input is a 400 even
	// when the template does not exist.
	if req.Timeout == 0 {
		req.Timeout = s.cfg.DefaultTimeout
	}
	if err := s.checkTimeout(req.Timeout); err != nil {
		return nil, err
	}
	if err := s.checkVolumes(req.Volumes); err != nil {
		return nil, err
	}
	img, err := s.cfg.Templates.Resolve(ctx, req.Template)
	if err != nil {
		return nil, err
	}
	if err := s.checkRequest(req, img); err != nil {
		return nil, err
	}
	for k, v := range img.Env {
		if _, ok := req.Env[k]; !ok {
			if req.Env == nil {
				req.Env = map[string]string{}
			}
			req.Env[k] = v
		}
	}
	return img, nil
}

func (s *Service) checkRequest(req *CreateRequest, img *Image) error {
	d := s.limitsOf(img)
	for _, l := range []struct {
		name     string
		v        *int
		def      int
		min, max int
	}{
		{"cpu", &req.CPU, d.CPUs, 1, 64},
		{"memory_mb", &req.MemoryMB, d.MemoryMB, 64, 65536},
		{"disk_mb", &req.DiskMB, d.DiskMB, 16, 1 << 20},
		{"max_processes", &req.MaxProcs, d.MaxProcs, 16, 65536},
	} {
		if *l.v == 0 {
			*l.v = l.def
		}
		if *l.v < l.min || *l.v > l.max {
			return errdefs.New(errdefs.ErrInvalidArgument, "%s must be between %d and %d", l.name, l.min, l.max)
		}
	}
	if st := img.Start; st != nil && req.limits() != st.Limits {
		return errdefs.New(errdefs.ErrInvalidArgument, "template %s starts from a checkpoint of its start command taken with cpu %d, memory_mb %d, disk_mb %d, max_processes %d: create its sandboxes with those limits (or leave them out)",
			req.Template, st.Limits.CPUs, st.Limits.MemoryMB, st.Limits.DiskMB, st.Limits.MaxProcs)
	}
	if len(req.Volumes) > 0 && img.Start != nil {
		return errdefs.New(errdefs.ErrInvalidArgument, "template %s starts from a checkpoint of its running start command, which cannot take mounts it was made without: mount volumes in sandboxes of a template without a start command", req.Template)
	}
	if err := checkImagePaths(img.Root, req.Volumes); err != nil {
		return err
	}
	if err := checkNetwork(req.Network); err != nil {
		return err
	}
	if err := s.attachSecrets(req); err != nil {
		return err
	}
	if len(req.Env) > maxEnvEntries {
		return errdefs.New(errdefs.ErrInvalidArgument, "at most %d env vars", maxEnvEntries)
	}
	for k, v := range req.Env {
		if !envName.MatchString(k) {
			return errdefs.New(errdefs.ErrInvalidArgument, "env var name %q is not valid", k)
		}
		if len(v) > maxEnvValueLen {
			return errdefs.New(errdefs.ErrInvalidArgument, "env var %s is longer than %d bytes", k, maxEnvValueLen)
		}
	}
	if req.SnapshotEvery != 0 && (req.SnapshotEvery < 5*time.Second || req.SnapshotEvery > 24*time.Hour) {
		return errdefs.New(errdefs.ErrInvalidArgument, "snapshot interval must be between 5s and 24h")
	}
	if err := checkIdleDelay("freeze", req.IdleFreeze, maxIdleFreeze); err != nil {
		return err
	}
	if err := checkIdleDelay("hibernate", req.IdleHibernate, maxIdleHibernate); err != nil {
		return err
	}
	if req.SnapshotKeep < 0 || req.SnapshotKeep > 100 {
		return errdefs.New(errdefs.ErrInvalidArgument, "snapshots to keep must be between 0 and 100")
	}
	if req.SnapshotEvery > 0 && req.SnapshotKeep == 0 {
		req.SnapshotKeep = 3
	}
	if req.AutoResume && !req.AutoPause {
		return errdefs.New(errdefs.ErrInvalidArgument, "auto-resume needs auto-pause")
	}
	if req.AutoPauseDiskOnly && !req.AutoPause {
		return errdefs.New(errdefs.ErrInvalidArgument, "a disk-only pause at the timeout needs auto-pause")
	}
	if req.AutoPauseDiskOnly && req.AutoResume {
		return errdefs.New(errdefs.ErrInvalidArgument, "auto-resume cannot be combined with a disk-only auto-pause: a sandbox paused without its memory boots afresh, so it is resumed only by an explicit resume or connect")
	}
	if (req.SnapshotEvery > 0 || req.AutoPause || req.Snapshot != "") && s.cfg.Checkpoints == nil {
		return errdefs.New(errdefs.ErrFailedPrecondition, "this node has no object store for snapshots and checkpoints")
	}
	if req.KeyID != "" && (s.cfg.Keys == nil || !s.cfg.Keys.HasKey(req.KeyID)) {
		return errdefs.New(errdefs.ErrFailedPrecondition, "encryption key %q is not loaded: supply it with PUT /v1/keys/%s first", tenant.Bare(req.KeyID), tenant.Bare(req.KeyID))
	}
	if len(req.Metadata) > maxMetadataEntries {
		return errdefs.New(errdefs.ErrInvalidArgument, "at most %d metadata entries", maxMetadataEntries)
	}
	for k, v := range req.Metadata {
		if k == "" || len(k) > 256 || len(v) > maxMetadataLen {
			return errdefs.New(errdefs.ErrInvalidArgument, "metadata key %q: keys must be 1-256 bytes and values at most %d", k, maxMetadataLen)
		}
	}
	return nil
}

// Get returns a sandbox, live or ended.
func (s *Service) Get(ctx context.Context, id string) (*Sandbox, error) {
	if e, ok := s.live.entry(id); ok {
		e.mu.Lock()
		defer e.mu.Unlock()
		return fromRecord(e.rec), nil
	}
	rec, err := s.store.GetSandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	if rec.State == store.StatePooled || rec.State == store.StateCreating || rec.Build != "" {
		return nil, errdefs.New(errdefs.ErrNotFound, "sandbox %q not found", id)
	}
	return fromRecord(rec), nil
}

// List returns every sandbox matching f, newest first: the caller's
// tenant's only, unless it is the admin.
func (s *Service) List(ctx context.Context, f ListFilter) ([]*Sandbox, error) {
	out, _, err := s.ListPage(ctx, f, 0, "")
	return out, err
}

// ListPage returns up to limit sandboxes matching f (0: all), newest
// first, from where the page that answered token ended ("" for the
// first), and the token of the next page ("" after the last). The
// catalog filters and pages: a page reads its own records, not the table.
func (s *Service) ListPage(ctx context.Context, f ListFilter, limit int, token string) ([]*Sandbox, string, error) {
	q := f.query(limit)
	if p := tenant.FromContext(ctx); !p.Admin {
		q.Tenants = []string{p.Tenant}
		if p.Tenant == tenant.Default {
			q.Tenants = append(q.Tenants, "") // made before tenants existed
		}
	}
	if token != "" {
		raw, err := base64.RawURLEncoding.DecodeString(token)
		q.After = new(store.Cursor)
		if err != nil || json.Unmarshal(raw, q.After) != nil || q.After.ID == "" {
			return nil, "", errdefs.New(errdefs.ErrInvalidArgument, "page_token is not valid")
		}
	}
	recs, next, err := s.store.QuerySandboxes(ctx, q)
	if err != nil {
		return nil, "", fmt.Errorf("list sandboxes: %w", err)
	}
	out := make([]*Sandbox, 0, len(recs))
	for _, r := range recs {
		out = append(out, fromRecord(r))
	}
	if next == nil {
		return out, "", nil
	}
	raw, err := json.Marshal(next)
	if err != nil {
		return nil, "", err
	}
	return out, base64.RawURLEncoding.EncodeToString(raw), nil
}

func (s *Service) notRunning(id string) error {
	rec, err := s.store.GetSandbox(context.Background(), id)
	if err != nil {
		return err
	}
	return errdefs.New(errdefs.ErrNotFound, "sandbox %q is %s", id, rec.State)
}

// checkTimeout refuses a sandbox timeout outside 1s..MaxTimeout, the one
// range every call that sets one (create, set, resume, fork, connect,
// create from a snapshot) allows.
func (s *Service) checkTimeout(d time.Duration) error {
	if d < time.Second || d > s.cfg.MaxTimeout {
		return errdefs.New(errdefs.ErrInvalidArgument, "timeout must be between 1s and %s", s.cfg.MaxTimeout)
	}
	return nil
}

// SetTimeout makes the sandbox expire d from now. A d of 0 ends its life
// now, as its timeout would (paused if it pauses at the timeout, else
// killed), as E2B's set_timeout(0) does; the sandbox comes back as it ended.
func (s *Service) SetTimeout(ctx context.Context, id string, d time.Duration) (*Sandbox, error) {
	if d == 0 {
		return s.expireNow(ctx, id)
	}
	if err := s.checkTimeout(d); err != nil {
		return nil, err
	}
	return s.updateRunning(ctx, id, "timeout", func(rec *store.Sandbox) bool {
		rec.ExpiresAt = time.Now().UTC().Add(d)
		return true
	})
}

// expireNow does to a running sandbox what the reaper does at its timeout.
func (s *Service) expireNow(ctx context.Context, id string) (*Sandbox, error) {
	e, ok := s.live.entry(id)
	if !ok {
		return nil, s.notRunning(id)
	}
	e.mu.Lock()
	running := e.rec.State == store.StateRunning
	e.mu.Unlock()
	if !running {
		return nil, s.notRunning(id)
	}
	// A pause that fails keeps the sandbox running and tries again later,
	// as at a timeout: its work is never thrown away.
	if !s.ckpts.autoPause(ctx, id, e) {
		if err := s.end(ctx, id, store.StateKilled, "timeout"); err != nil {
			return nil, err
		}
	}
	return s.Get(ctx, id)
}

// updateRunning changes a running sandbox's record under its lock: change
// edits a copy and says whether there is anything to write; the copy is
// stored durably before it replaces the record in memory.
func (s *Service) updateRunning(ctx context.Context, id, what string, change func(*store.Sandbox) bool) (*Sandbox, error) {
	e, ok := s.live.entry(id)
	if !ok {
		return nil, s.notRunning(id)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.rec.State != store.StateRunning {
		return nil, errdefs.New(errdefs.ErrNotFound, "sandbox %q is %s", id, e.rec.State)
	}
	updated := *e.rec
	if !change(&updated) {
		return fromRecord(e.rec), nil
	}
	if err := s.store.UpdateSandbox(ctx, &updated, store.Was(e.rec)); err != nil {
		return nil, fmt.Errorf("record %s: %w", what, err)
	}
	e.setRec(&updated)
	return fromRecord(e.rec), nil
}

// Kill destroys a sandbox and everything it had on the host.
func (s *Service) Kill(ctx context.Context, id string) error {
	if e, ok := s.live.get(id); ok && e.build != "" {
		return errdefs.New(errdefs.ErrNotFound, "sandbox %q not found", id)
	}
	return s.end(ctx, id, store.StateKilled, "killed by request")
}

// end tears a live sandbox down and records why. The record changes only
// after the host resources are gone, so a crash in between is found again
// by Recover.
func (s *Service) end(ctx context.Context, id, state, reason string) error {
	e, ok := s.live.get(id)
	if !ok {
		rec, err := s.store.GetSandbox(ctx, id)
		if err != nil {
			return err
		}
		if rec.State == store.StatePaused && state == store.StateKilled {
			return s.ckpts.deletePausedLocked(ctx, id, reason)
		}
		if rec.State == store.StateResuming {
			// A resume (here or on another node) holds it: the kill
			// comes after it.
			return errdefs.New(errdefs.ErrFailedPrecondition, "sandbox %q is resuming: retry once it runs", id)
		}
		return errdefs.New(errdefs.ErrNotFound, "sandbox %q is not running", id)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.rec.Live() {
		return errdefs.New(errdefs.ErrNotFound, "sandbox %q is not running", id)
	}
	// The intent first: a crash during the teardown leaves a record that
	// Recover finishes as this end, not one it must report lost.
	intent := *e.rec
	intent.Ending, intent.Reason = state, reason
	if err := s.store.UpdateSandbox(context.WithoutCancel(ctx), &intent, store.Was(e.rec)); err != nil {
		return fmt.Errorf("record end of sandbox: %w", err)
	}
	e.setRec(&intent)
	// Nothing wakes it from here on; a hibernated one goes with its image.
	image := e.retire()
	if err := s.booter.teardown(context.WithoutCancel(ctx), e.rec.ID, e.ep); err != nil {
		return err
	}
	s.deleteHibernation(context.WithoutCancel(ctx), id, image)
	updated := *e.rec
	updated.State, updated.Reason, updated.EndedAt, updated.Ending = state, reason, time.Now().UTC(), ""
	if err := s.store.UpdateSandbox(context.WithoutCancel(ctx), &updated, store.Was(e.rec)); err != nil {
		return fmt.Errorf("record end of sandbox: %w", err)
	}
	e.setRec(&updated)
	s.live.drop(id)
	e.agent.Close()
	s.metrics.ended(state, reason)
	s.log.Info("sandbox ended", "sandbox", id, "state", state, "reason", reason)
	return nil
}

// Running returns the number of live sandboxes.
func (s *Service) Running() int { return s.live.count() }
