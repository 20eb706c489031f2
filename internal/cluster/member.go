// Package cluster makes a spaced node a member of a cluster that shares a
// PostgreSQL catalog: it registers the node, renews its lease, reports the
// sandboxes of nodes whose lease lapsed lost, and, when this node's own
// lease lapsed (a stall, a partition from the database), ends here what
// the others gave up on before going on.
package cluster

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spacesandbox/space/internal/store"
)

// Catalog is the part of the cluster catalog membership uses
// (store.Postgres).
type Catalog interface {
	Register(ctx context.Context, r store.Registration) (int64, error)
	Renew(ctx context.Context, epoch int64, info store.NodeInfo, ttl time.Duration) error
	ReportLost(ctx context.Context) ([]*store.Sandbox, error)
	PruneIdempotency(ctx context.Context, before time.Time) error
}

// idempotencyKept is how long creates' Idempotency-Keys are kept.
const idempotencyKept = 24 * time.Hour

// Node is this node's part: what it tells the others and what it ends
// when the cluster gave its sandboxes up (sandbox.Service).
type Node interface {
	Running() int
	PoolSizes() map[string]int
	Reconcile(ctx context.Context) (int, error)
	// Draining reports whether the node is draining (it says so again
	// when it registers after a lapse).
	Draining() bool
}

// Config configures a Member.
type Config struct {
	Catalog Catalog
	Node    Node
	// ID and Address: this node's name and the URL the others reach its
	// API on.
	ID, Address string
	// Lease is how long a registration holds without renewal; it is
	// renewed every third of it and lapsed nodes are looked for every half.
	Lease    time.Duration
	Capacity int
	Version  string
	Logger   *slog.Logger
	Registry prometheus.Registerer
	// Lost, if set, runs after each look for lapsed nodes that this node
	// was sure enough to make (the template service fails their builds).
	Lost func(ctx context.Context)
}

// Member keeps this node in the cluster.
type Member struct {
	cfg   Config
	log   *slog.Logger
	epoch int64
	// renewedSince is when this node's renewals started succeeding
	// without a miss (zero while they fail): only a node that has held
	// its own lease for a whole lease reports others lost, so after an
	// outage of the database every node gets a lease's time to renew
	// before anybody is given up.
	renewedSince time.Time

	renewals *prometheus.CounterVec
	lost     prometheus.Counter
}

// Join registers the node (a restarted node gets a new epoch; what it ran
// before was reconciled by the daemon's recovery at start).
func Join(ctx context.Context, cfg Config) (*Member, error) {
	m := &Member{cfg: cfg, log: cfg.Logger}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	m.log = m.log.With("node", cfg.ID)
	m.renewals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "space_cluster_lease_renewals_total", Help: "Lease renewals of this node, by result (ok, lapsed, error).",
	}, []string{"result"})
	m.lost = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "space_cluster_sandboxes_reported_lost_total", Help: "Sandboxes of lapsed nodes this node reported lost.",
	})
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(m.renewals, m.lost)
	}
	epoch, err := cfg.Catalog.Register(ctx, store.Registration{Address: cfg.Address, Info: m.info(), TTL: cfg.Lease})
	if err != nil {
		return nil, err
	}
	m.epoch, m.renewedSince = epoch, time.Now()
	m.log.Info("joined the cluster", "address", cfg.Address, "epoch", epoch, "lease", cfg.Lease)
	return m, nil
}

func (m *Member) info() store.NodeInfo {
	return store.NodeInfo{Sandboxes: m.cfg.Node.Running(), Capacity: m.cfg.Capacity, Version: m.cfg.Version, Pools: m.cfg.Node.PoolSizes()}
}

// Run renews the lease and reports lapsed nodes until ctx ends. A node
// that stops does not leave: its sandboxes run on, and a restart within
// the lease finds them still its own (one that comes back later finds
// them lost and ends them).
func (m *Member) Run(ctx context.Context) {
	renew := time.NewTicker(m.cfg.Lease / 3)
	defer renew.Stop()
	look := time.NewTicker(m.cfg.Lease / 2)
	defer look.Stop()
	prune := time.NewTicker(time.Hour)
	defer prune.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-prune.C:
			if err := m.cfg.Catalog.PruneIdempotency(ctx, time.Now().Add(-idempotencyKept)); err != nil {
				m.log.Warn("prune idempotency keys", "err", err)
			}
		case <-renew.C:
			m.renew(ctx)
		case <-look.C:
			m.reportLost(ctx)
		}
	}
}

func (m *Member) renew(ctx context.Context) {
	err := m.cfg.Catalog.Renew(ctx, m.epoch, m.info(), m.cfg.Lease)
	switch {
	case err == nil:
		m.renewals.WithLabelValues("ok").Inc()
		if m.renewedSince.IsZero() {
			m.renewedSince = time.Now()
		}
		return
	case !errors.Is(err, store.ErrLeaseLost):
		// The database is away: the lease may lapse meanwhile, and the
		// next renewal finds out.
		m.renewals.WithLabelValues("error").Inc()
		m.renewedSince = time.Time{}
		m.log.Warn("renew the node's lease", "err", err)
		return
	}
	m.renewals.WithLabelValues("lapsed").Inc()
	m.log.Warn("the node's lease lapsed: registering again and ending what the cluster gave up on")
	// It ran on: a drain it is in goes on, and so do its creates (their
	// idempotency claims stay its own).
	epoch, err := m.cfg.Catalog.Register(ctx, store.Registration{
		Address: m.cfg.Address, Info: m.info(), TTL: m.cfg.Lease, Again: true, Draining: m.cfg.Node.Draining(),
	})
	if err != nil {
		m.log.Error("register again", "err", err)
		return
	}
	m.epoch, m.renewedSince = epoch, time.Now()
	n, err := m.cfg.Node.Reconcile(ctx)
	if err != nil {
		m.log.Error("reconcile with the cluster", "err", err)
	}
	m.log.Info("back in the cluster", "epoch", epoch, "sandboxes_ended", n)
}

func (m *Member) reportLost(ctx context.Context) {
	if m.renewedSince.IsZero() || time.Since(m.renewedSince) < m.cfg.Lease {
		return // this node may be the one that was away
	}
	lost, err := m.cfg.Catalog.ReportLost(ctx)
	if err != nil {
		m.log.Warn("look for lapsed nodes", "err", err)
	}
	for _, s := range lost {
		m.log.Warn("sandbox reported lost: its node's lease lapsed", "sandbox", s.ID, "reason", s.Reason)
	}
	m.lost.Add(float64(len(lost)))
	if m.cfg.Lost != nil {
		m.cfg.Lost(ctx)
	}
}
