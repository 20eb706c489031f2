package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	// Pools are its warm pools' ready sandboxes, by template.
	Pools map[string]int `json:"pools,omitempty"`
}

// Member is a node as the catalog knows it.
type Member struct {
	ID         string    `json:"id"`
	Address    string    `json:"address"`
	Epoch      int64     `json:"epoch"`
	StartedAt  time.Time `json:"started_at"`
	LeaseUntil time.Time `json:"lease_until"`
	// Alive: its lease has not lapsed.
	Alive bool `json:"alive"`
	// Draining: it takes no new sandboxes and moves its running ones.
	Draining bool     `json:"draining"`
	Info     NodeInfo `json:"info"`
}

// ErrLeaseLost is what a renewal gets once the node's lease lapsed (and
// the others may have given its sandboxes up): register again and
// reconcile.
var ErrLeaseLost = errors.New("the node's lease lapsed")

// Registration is what a node registers with.
type Registration struct {
	// Address is the URL the other nodes reach its API on.
	Address string
	Info    NodeInfo
	// TTL is the lease.
	TTL time.Duration
	// Again: the node registers again after its lease lapsed, having run
	// on: it keeps its drain (Draining says it) and the idempotency
	// claims of the creates it runs. Otherwise it starts afresh: a drain
	// it was in ends (a drained node is restarted to take work again)
	// and the claims of its previous run lapse.
	Again    bool
	Draining bool
}

// Register enters this node with a fresh lease and a new epoch.
func (p *Postgres) Register(ctx context.Context, r Registration) (epoch int64, err error) {
	doc, err := json.Marshal(r.Info)
	if err != nil {
		return 0, err
	}
	draining := r.Again && r.Draining
	err = p.tx(ctx, func(tx pgx.Tx) error {
		var old int64
		if err := tx.QueryRow(ctx, `select epoch from nodes where id = $1 for update`, p.node).Scan(&old); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		err := tx.QueryRow(ctx, `insert into nodes (id, address, lease_until, info, draining) values ($1, $2, now() + make_interval(secs => $3), $4, $5)
			on conflict (id) do update set address = excluded.address, epoch = nodes.epoch + 1, started_at = now(),
				lease_until = excluded.lease_until, info = excluded.info, draining = excluded.draining
			returning epoch`, p.node, r.Address, r.TTL.Seconds(), doc, draining).Scan(&epoch)
		if err != nil || !r.Again {
			return err
		}
		_, err = tx.Exec(ctx, "update idempotency set epoch = $3 where node = $1 and epoch = $2 and not done", p.node, old, epoch)
		return err
	})
	if err != nil {
		return 0, dbErr(err, "register node %s", p.node)
	}
	p.epoch.Store(epoch)
	return epoch, nil
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
	rows, err := p.pool.Query(ctx, `select id, address, epoch, started_at, lease_until, lease_until >= now(), draining, info from nodes order by id`)
	if err != nil {
		return nil, dbErr(err, "list nodes")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Member, error) {
		var m Member
		var info []byte
		if err := r.Scan(&m.ID, &m.Address, &m.Epoch, &m.StartedAt, &m.LeaseUntil, &m.Alive, &m.Draining, &info); err != nil {
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
			rows, err := tx.Query(ctx, `update sandboxes set state = $2, live = false, node = '', slot = -1, updated_at = now(), ended_at = now(),
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
	// Migration: sandbox id was paused to move, and awaits its target.
	Migration func(id string)
	// Secrets: a secret changed.
	Secrets func()
	// Node: node id registered (perhaps at another address) or left.
	Node func(id string)
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
	if _, err := c.Exec(ctx, "listen space_routes; listen space_tenants; listen space_migrations; listen space_secrets; listen space_nodes"); err != nil {
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
		case "space_migrations":
			ev.Migration(n.Payload)
		case "space_secrets":
			ev.Secrets()
		case "space_nodes":
			if ev.Node != nil {
				ev.Node(n.Payload)
			}
		}
	}
}

// SetDraining marks this node draining (or not): the others see it in
// Members, and no migration targets it.
func (p *Postgres) SetDraining(ctx context.Context, draining bool) error {
	return p.exec(ctx, "set draining", "update nodes set draining = $2 where id = $1", p.node, draining)
}

// Migration is one sandbox's move from a draining node to another.
type Migration struct {
	Sandbox   string        `json:"sandbox"`
	From      string        `json:"from"`
	To        string        `json:"to"`
	Timeout   time.Duration `json:"-"`
	Requested time.Time     `json:"requested_at"`
	Paused    time.Time     `json:"paused_at,omitzero"`
	Resumed   time.Time     `json:"resumed_at,omitzero"`
	Error     string        `json:"error,omitempty"`
}

// PutMigration writes m (a new move of its sandbox replaces an old one).
func (p *Postgres) PutMigration(ctx context.Context, m *Migration) error {
	return p.exec(ctx, "record migration of "+m.Sandbox, `insert into migrations (sandbox, from_node, to_node, timeout_ms, requested_at, paused_at, resumed_at, error)
		values ($1, $2, $3, $4, $5, $6, $7, $8)
		on conflict (sandbox) do update set from_node = excluded.from_node, to_node = excluded.to_node, timeout_ms = excluded.timeout_ms,
			requested_at = excluded.requested_at, paused_at = excluded.paused_at, resumed_at = excluded.resumed_at, error = excluded.error`,
		m.Sandbox, m.From, m.To, m.Timeout.Milliseconds(), m.Requested, nullTime(m.Paused), nullTime(m.Resumed), m.Error)
}

// GetMigration reads the move of sandbox id.
func (p *Postgres) GetMigration(ctx context.Context, id string) (*Migration, error) {
	m := &Migration{}
	var ms int64
	var paused, resumed *time.Time
	err := p.pool.QueryRow(ctx, `select sandbox, from_node, to_node, timeout_ms, requested_at, paused_at, resumed_at, error
		from migrations where sandbox = $1`, id).Scan(&m.Sandbox, &m.From, &m.To, &ms, &m.Requested, &paused, &resumed, &m.Error)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrNotFound, "no migration of sandbox %q", id)
	}
	if err != nil {
		return nil, dbErr(err, "read migration of %q", id)
	}
	m.Timeout = time.Duration(ms) * time.Millisecond
	if paused != nil {
		m.Paused = *paused
	}
	if resumed != nil {
		m.Resumed = *resumed
	}
	return m, nil
}

// PendingMigrations answers the sandboxes paused to move to this node
// and not resumed yet (what a missed notification would have said).
func (p *Postgres) PendingMigrations(ctx context.Context) ([]string, error) {
	rows, err := p.pool.Query(ctx, `select sandbox from migrations
		where to_node = $1 and paused_at is not null and resumed_at is null and error = '' order by paused_at`, p.node)
	if err != nil {
		return nil, dbErr(err, "list pending migrations")
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids, dbErr(err, "list pending migrations")
}

// FinishMigration records how the target's resume went (err "" for
// success), once: it answers false when the move was finished already.
func (p *Postgres) FinishMigration(ctx context.Context, id, errText string) (bool, error) {
	tag, err := p.pool.Exec(ctx, `update migrations set resumed_at = case when $2 = '' then now() end, error = $2
		where sandbox = $1 and to_node = $3 and resumed_at is null and error = ''`, id, errText, p.node)
	if err != nil {
		return false, dbErr(err, "finish migration of %q", id)
	}
	return tag.RowsAffected() == 1, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Stored is the answer a create with an idempotency key got.
type Stored struct {
	Status      int
	ContentType string
	Body        []byte
}

// ClaimIdempotency claims scope for a create about to run (claimed), or
// answers what the create that claimed it answered (stored, once done;
// nil while it runs). A claim is held by the registration of the node
// that made it: one whose node's lease lapsed, or whose node registered
// afresh since (a restart: the create it ran is gone), is taken over.
func (p *Postgres) ClaimIdempotency(ctx context.Context, scope string) (claimed bool, stored *Stored, err error) {
	tag, err := p.pool.Exec(ctx, `insert into idempotency (scope, node, epoch) values ($1, $2, $3)
		on conflict (scope) do update set node = excluded.node, epoch = excluded.epoch, created_at = now()
		where not idempotency.done and not exists (select 1 from nodes n
			where n.id = idempotency.node and n.epoch = idempotency.epoch and n.lease_until >= now())`, scope, p.node, p.epoch.Load())
	if err != nil {
		return false, nil, dbErr(err, "claim an idempotency key")
	}
	if tag.RowsAffected() == 1 {
		return true, nil, nil
	}
	var done bool
	s := &Stored{}
	err = p.pool.QueryRow(ctx, "select done, status, content_type, body from idempotency where scope = $1", scope).Scan(&done, &s.Status, &s.ContentType, &s.Body)
	if errors.Is(err, pgx.ErrNoRows) {
		return p.ClaimIdempotency(ctx, scope) // released meanwhile
	}
	if err != nil || !done {
		return false, nil, dbErr(err, "read an idempotency key")
	}
	return false, s, nil
}

// FinishIdempotency stores the answer of scope's create (a success), or
// releases the key (s nil: the create failed, and may be tried again),
// if this node still holds the claim: an answer for a claim another node
// took over is ErrFailedPrecondition. Storing the same answer twice is
// not an error.
func (p *Postgres) FinishIdempotency(ctx context.Context, scope string, s *Stored) error {
	var tag pgconn.CommandTag
	var err error
	if s == nil {
		tag, err = p.pool.Exec(ctx, "delete from idempotency where scope = $1 and node = $2 and not done", scope, p.node)
	} else {
		tag, err = p.pool.Exec(ctx, "update idempotency set done = true, status = $3, content_type = $4, body = $5 where scope = $1 and node = $2",
			scope, p.node, s.Status, s.ContentType, s.Body)
	}
	if err != nil {
		return dbErr(err, "finish an idempotency key")
	}
	if tag.RowsAffected() == 0 && s != nil {
		return errdefs.New(errdefs.ErrFailedPrecondition, "the idempotency claim is not this node's any more")
	}
	return nil
}

// PruneIdempotency forgets keys older than before.
func (p *Postgres) PruneIdempotency(ctx context.Context, before time.Time) error {
	return p.exec(ctx, "prune idempotency keys", "delete from idempotency where created_at < $1", before)
}
