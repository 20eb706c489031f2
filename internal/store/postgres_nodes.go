package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Node registry and leases. Every node registers (address, what it holds)
// and renews a lease; a node whose lease lapses has its live sandboxes
// reported lost by the others, in the same transaction that finds it
// lapsed, and a bumped epoch, so its next renewal fails and it reconciles
// instead of going on as if nothing happened. Leases are compared on the
// database's clock, never a node's.

// NodeInfo is what a node tells the others about itself.
type NodeInfo struct {
	// Sandboxes is how many sandboxes it runs.
	Sandboxes int `json:"sandboxes"`
	// Capacity is how many it may run (0: no limit of its own).
	Capacity int    `json:"capacity,omitempty"`
	Version  string `json:"version,omitempty"`
}

// Member is a node as the catalog knows it.
type Member struct {
	ID         string    `json:"id"`
	Address    string    `json:"address"`
	Epoch      int64     `json:"epoch"`
	StartedAt  time.Time `json:"started_at"`
	LeaseUntil time.Time `json:"lease_until"`
	// Alive: its lease has not lapsed.
	Alive bool     `json:"alive"`
	Info  NodeInfo `json:"info"`
}

// ErrLeaseLost is what a renewal gets once the node's lease lapsed (and
// the others may have given its sandboxes up): register again and
// reconcile.
var ErrLeaseLost = errors.New("the node's lease lapsed")

// Register enters this node with a fresh lease of ttl and a new epoch.
func (p *Postgres) Register(ctx context.Context, address string, info NodeInfo, ttl time.Duration) (epoch int64, err error) {
	doc, err := json.Marshal(info)
	if err != nil {
		return 0, err
	}
	err = p.pool.QueryRow(ctx, `insert into nodes (id, address, lease_until, info) values ($1, $2, now() + make_interval(secs => $3), $4)
		on conflict (id) do update set address = excluded.address, epoch = nodes.epoch + 1, started_at = now(),
			lease_until = excluded.lease_until, info = excluded.info
		returning epoch`, p.node, address, ttl.Seconds(), doc).Scan(&epoch)
	return epoch, dbErr(err, "register node %s", p.node)
}

// Renew extends the lease of this node's epoch by ttl from now; once it
// lapsed, ErrLeaseLost.
func (p *Postgres) Renew(ctx context.Context, epoch int64, info NodeInfo, ttl time.Duration) error {
	doc, err := json.Marshal(info)
	if err != nil {
		return err
	}
	tag, err := p.pool.Exec(ctx, `update nodes set lease_until = now() + make_interval(secs => $3), info = $4
		where id = $1 and epoch = $2 and lease_until >= now()`, p.node, epoch, ttl.Seconds(), doc)
	if err != nil {
		return dbErr(err, "renew the lease of node %s", p.node)
	}
	if tag.RowsAffected() == 0 {
		return ErrLeaseLost
	}
	return nil
}

// Members lists every registered node.
func (p *Postgres) Members(ctx context.Context) ([]Member, error) {
	rows, err := p.pool.Query(ctx, `select id, address, epoch, started_at, lease_until, lease_until >= now(), info from nodes order by id`)
	if err != nil {
		return nil, dbErr(err, "list nodes")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Member, error) {
		var m Member
		var info []byte
		if err := r.Scan(&m.ID, &m.Address, &m.Epoch, &m.StartedAt, &m.LeaseUntil, &m.Alive, &info); err != nil {
			return m, err
		}
		return m, json.Unmarshal(info, &m.Info)
	})
	return out, dbErr(err, "list nodes")
}

// ReportLost finds the nodes whose lease lapsed and reports every live
// sandbox they held lost, and answers those records. Each lapsed node is
// handled in one transaction with its row locked, so a renewal cannot
// slip in between; its epoch goes up, so a renewal of the old one fails.
func (p *Postgres) ReportLost(ctx context.Context) ([]*Sandbox, error) {
	rows, err := p.pool.Query(ctx, "select id from nodes where lease_until < now() and id <> $1", p.node)
	if err != nil {
		return nil, dbErr(err, "find lapsed nodes")
	}
	lapsed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, dbErr(err, "find lapsed nodes")
	}
	var out []*Sandbox
	for _, node := range lapsed {
		var lost []*Sandbox
		err := p.tx(ctx, func(tx pgx.Tx) error {
			lost = nil
			var still bool
			err := tx.QueryRow(ctx, "select lease_until < now() from nodes where id = $1 for update", node).Scan(&still)
			if errors.Is(err, pgx.ErrNoRows) || err == nil && !still {
				return nil // renewed or gone meanwhile
			}
			if err != nil {
				return err
			}
			reason := fmt.Sprintf("its node %s stopped renewing its lease", node)
			rows, err := tx.Query(ctx, `update sandboxes set state = $2, live = false, node = '', slot = -1, updated_at = now(),
					doc = (doc - 'ending') || jsonb_build_object('state', $2::text, 'reason', $3::text, 'node', '', 'slot', -1, 'ended_at', now())
				where node = $1 and live returning doc`, node, StateLost, reason)
			if err != nil {
				return err
			}
			docs, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
			if err != nil {
				return err
			}
			for _, d := range docs {
				s := new(Sandbox)
				if err := json.Unmarshal(d, s); err != nil {
					return fmt.Errorf("decode sandbox: %w", err)
				}
				lost = append(lost, s)
			}
			_, err = tx.Exec(ctx, "update nodes set epoch = epoch + 1 where id = $1", node)
			return err
		})
		if err != nil {
			return out, dbErr(err, "report the sandboxes of node %s lost", node)
		}
		out = append(out, lost...)
	}
	return out, nil
}

// RouteOf answers the node that holds sandbox id and its address, or
// ErrNotFound when no node does (unknown, paused or ended).
func (p *Postgres) RouteOf(ctx context.Context, id string) (node, address string, err error) {
	err = p.pool.QueryRow(ctx, `select s.node, n.address from sandboxes s join nodes n on n.id = s.node
		where s.id = $1 and s.live`, id).Scan(&node, &address)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", errdefs.New(errdefs.ErrNotFound, "sandbox %q runs on no node", id)
	}
	return node, address, dbErr(err, "route sandbox %q", id)
}

// ClusterSecret answers the secret nodes sign forwarded requests with,
// made from fresh (the first node to ask) if there is none yet.
func (p *Postgres) ClusterSecret(ctx context.Context, fresh []byte) ([]byte, error) {
	var secret []byte
	err := p.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "insert into cluster_secret (secret) values ($1) on conflict (id) do nothing", fresh); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "select secret from cluster_secret").Scan(&secret)
	})
	return secret, dbErr(err, "read the cluster secret")
}

// CatalogEvents are what Listen reports.
type CatalogEvents struct {
	// Ready: the listener is in place (events from here on are seen).
	Ready func()
	// Route: the route of sandbox id changed.
	Route func(id string)
	// Tenants: a tenant or an API key changed.
	Tenants func()
}

// Listen reports catalog changes until ctx ends or the connection fails
// (the error says why: from then on the caller's caches cannot be
// trusted until the next Ready).
func (p *Postgres) Listen(ctx context.Context, ev CatalogEvents) error {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return dbErr(err, "listen for catalog changes")
	}
	// A connection that listened is never handed back to the pool.
	c := conn.Hijack()
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, "listen space_routes; listen space_tenants"); err != nil {
		return dbErr(err, "listen for catalog changes")
	}
	ev.Ready()
	for {
		n, err := c.WaitForNotification(ctx)
		if err != nil {
			return dbErr(err, "wait for catalog changes")
		}
		switch n.Channel {
		case "space_routes":
			ev.Route(n.Payload)
		case "space_tenants":
			ev.Tenants()
		}
	}
}
