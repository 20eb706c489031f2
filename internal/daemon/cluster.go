package daemon

import (
	"context"
	"crypto/rand"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spacesandbox/space/internal/cluster"
	"github.com/spacesandbox/space/internal/config"
	"github.com/spacesandbox/space/internal/egress/secrets"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/template"
	"github.com/spacesandbox/space/internal/tenant"
)

// clusterDeps are what this node's membership of a cluster acts on.
type clusterDeps struct {
	catalog   *store.Postgres
	sandboxes *sandbox.Service
	templates *template.Service
	tenants   *tenant.Service
	secrets   *secrets.Store
	// capacity is how many sandboxes this node takes.
	capacity int
	registry prometheus.Registerer
	log      *slog.Logger
}

// clusterMember is this node in a cluster: its registration, renewed; the
// router that learns of the other nodes' changes and where each sandbox
// runs; the drainer that moves this node's sandboxes when asked; and the
// secret the nodes sign forwarded requests with.
type clusterMember struct {
	member  *cluster.Member
	router  *cluster.Router
	drainer *cluster.Drainer
	secret  []byte
	lease   time.Duration
	// loops run the three until the part stops; the router's hooks act
	// within their context.
	loops *loops
}

// joinCluster registers this node in the cluster's catalog.
func joinCluster(ctx context.Context, cfg config.Config, d clusterDeps) (*clusterMember, error) {
	pg, log := d.catalog, d.log
	m, err := cluster.Join(ctx, cluster.Config{
		Logger:  log,
		Catalog: pg, Node: memberNode{d.sandboxes}, ID: cfg.NodeID, Address: cfg.NodeAddress, Lease: cfg.NodeLease,
		Capacity: d.capacity, Registry: d.registry, Lost: func(ctx context.Context) { failLostBuilds(ctx, pg, d.templates, log) },
	})
	if err != nil {
		return nil, err
	}
	fresh := make([]byte, 32)
	rand.Read(fresh)
	secret, err := pg.ClusterSecret(ctx, fresh)
	if err != nil {
		return nil, err
	}
	c := &clusterMember{member: m, secret: secret, lease: cfg.NodeLease, loops: newLoops()}
	life := c.loops.ctx
	c.drainer = cluster.NewDrainer(cfg.NodeID, pg, drainSandboxes{d.sandboxes}, log)
	c.router = cluster.NewRouter(pg, cluster.Hooks{
		Tenants: func() {
			if err := d.tenants.Reload(life); err != nil {
				log.Warn("reload tenants and keys", "err", err)
			}
		},
		Migration: func(id string) { c.drainer.MigrationRequested(life, id) },
		Missed:    func() { c.drainer.Rescan(life) },
		Secrets: func() {
			if err := d.secrets.Reload(); err != nil {
				log.Warn("reload secrets", "err", err)
			}
		},
	}, log)
	return c, nil
}

// part renews the registration, follows the other nodes and drains from
// its start; its stop ends the three and joins them.
func (c *clusterMember) part() part {
	return part{
		name: "cluster",
		start: func(context.Context) error {
			c.loops.Go(c.member.Run)
			c.loops.Go(c.router.Run)
			c.loops.Go(func(ctx context.Context) { c.drainer.Run(ctx, c.lease/3) })
			return nil
		},
		stop: func(context.Context) error { c.loops.stop(); return nil },
	}
}

// failLostBuilds fails the builds of the nodes whose lease lapsed (their
// build sandboxes went with them).
func failLostBuilds(ctx context.Context, pg *store.Postgres, tpl *template.Service, log *slog.Logger) {
	members, err := pg.Members(ctx)
	if err != nil {
		log.Warn("list nodes for their builds", "err", err)
		return
	}
	var lost []string
	for _, m := range members {
		if !m.Alive {
			lost = append(lost, m.ID)
		}
	}
	if _, err := tpl.FailBuildsOfLostNodes(ctx, lost); err != nil {
		log.Warn("fail the builds of lost nodes", "err", err)
	}
}

// memberNode is this node as its cluster membership sees it: the sandbox
// service and the sizes of its pools.
type memberNode struct{ *sandbox.Service }

func (n memberNode) PoolSizes() map[string]int { return n.Pools().PoolSizes() }

// drainSandboxes is the sandbox service as a drain sees it.
type drainSandboxes struct{ svc *sandbox.Service }

func (d drainSandboxes) SetDraining(on bool) { d.svc.SetDraining(on) }

func (d drainSandboxes) Movable() []cluster.Movable {
	var out []cluster.Movable
	for _, m := range d.svc.Movable() {
		out = append(out, cluster.Movable{ID: m.ID, Left: m.Left})
	}
	return out
}

func (d drainSandboxes) Pause(ctx context.Context, id string) error {
	_, err := d.svc.Checkpoints().Pause(ctx, id, sandbox.PauseOptions{})
	return err
}

func (d drainSandboxes) Resume(ctx context.Context, id string, timeout time.Duration) error {
	_, err := d.svc.Checkpoints().Resume(ctx, id, timeout)
	return err
}
