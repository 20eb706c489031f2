package store

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Postgres is the cluster catalog: the store of many spaced nodes sharing
// one PostgreSQL database (pgx, the maintained native driver; migrations
// with tern, its author's migrator, which serialises concurrent starts with
// an advisory lock). It keeps the same records as Bolt, with what a shared
// catalog adds:
//
//   - A live sandbox is held by one node (the node this store was opened
//     for when it was created or revived) and its slot is that node's.
//     ListSandboxes answers this node's live records and every record that
//     is not live (paused ones resume on any node); another node's live
//     record is not this node's to list, update or delete.
//   - Reviving a paused record is a compare-and-swap: of two nodes resuming
//     one sandbox at once, one wins and the other gets ErrFailedPrecondition.
//   - A record the cluster gave up on (reported lost when its node's lease
//     lapsed) never becomes live again through its old node: that node's
//     writes are refused and it tears the sandbox down (Reconcile).
//   - Builds carry their node (a restart fails only its own); volumes hold
//     data on one node's disk, so their names are unique per node.
//
// An unreachable database is ErrUnavailable (503), never a half-written
// record: every write is one transaction.
type Postgres struct {
	pool *pgxpool.Pool
	node string
	// migration is the schema's version before and after the open's
	// migrations (see Migration).
	migration [2]int32
	// epoch is the node's registration (see Register): what its
	// idempotency claims are held by.
	epoch atomic.Int64
}

//go:embed migrations/*.sql
var migrations embed.FS

// versionTable is where tern records the schema version.
const versionTable = "space_schema_version"

// OpenPostgres connects to the database at url as node and brings its
// schema to the newest version.
func OpenPostgres(ctx context.Context, url, node string) (*Postgres, error) {
	return openPostgres(ctx, url, node, nil)
}

// openPostgres is OpenPostgres with tr (if set) told of every statement:
// the tests explain what the store really runs.
func openPostgres(ctx context.Context, url, node string, tr pgx.QueryTracer) (*Postgres, error) {
	if node == "" {
		return nil, errors.New("postgres catalog: the node needs an id")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres catalog: %w", err)
	}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres catalog: %w", err)
	}
	before, after, err := migrateCatalog(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &Postgres{pool: pool, node: node, migration: [2]int32{before, after}}, nil
}

// Migration answers the catalog schema's version before and after this
// open's migrations (equal when there were none).
func (p *Postgres) Migration() (before, after int32) { return p.migration[0], p.migration[1] }

func migrateCatalog(ctx context.Context, pool *pgxpool.Pool) (before, after int32, err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("postgres catalog: connect: %w", err)
	}
	defer conn.Release()
	m, err := migrate.NewMigrator(ctx, conn.Conn(), versionTable)
	if err != nil {
		return 0, 0, fmt.Errorf("postgres catalog: migrations: %w", err)
	}
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return 0, 0, err
	}
	if err := m.LoadMigrations(sub); err != nil {
		return 0, 0, fmt.Errorf("postgres catalog: load migrations: %w", err)
	}
	before, err = m.GetCurrentVersion(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("postgres catalog: schema version: %w", err)
	}
	if err := m.Migrate(ctx); err != nil {
		return 0, 0, fmt.Errorf("postgres catalog: migrate: %w", err)
	}
	return before, int32(len(m.Migrations)), nil
}

// Node is the node this store writes as.
func (p *Postgres) Node() string { return p.node }

func (p *Postgres) Close() error {
	p.pool.Close()
	return nil
}

// dbErr classes what the database said: a duplicate key is
// ErrAlreadyExists, anything short of an answer (the server down or
// restarting, the network) ErrUnavailable.
func dbErr(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "23505":
			return errdefs.Wrap(errdefs.ErrAlreadyExists, err, format+": already exists", args...)
		case pe.Code[:2] == "57" || pe.Code[:2] == "08" || pe.Code[:2] == "53":
			// Operator intervention (shutdown), connection, resources.
			return errdefs.Wrap(errdefs.ErrUnavailable, err, "the catalog database is unavailable: %s", pe.Message)
		}
		return fmt.Errorf(format+": %w", append(args, err)...)
	}
	if errdefs.Class(err) != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return errdefs.Wrap(errdefs.ErrUnavailable, err, "the catalog database is unreachable")
}

// tx runs fn in a transaction and commits it.
func (p *Postgres) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, p.pool, fn)
}

// lockSlots serialises slot allocation on this node for the rest of tx.
func (p *Postgres) lockSlots(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, "select pg_advisory_xact_lock(hashtext('space-slots:' || $1))", p.node)
	return err
}

// freeSlot is this node's lowest free slot (see lowestFreeSlot).
func (p *Postgres) freeSlot(ctx context.Context, tx pgx.Tx, maxSlots int, avoid func(int) bool) (int, error) {
	if err := p.lockSlots(ctx, tx); err != nil {
		return 0, err
	}
	rows, err := tx.Query(ctx, "select slot from sandboxes where node = $1 and slot >= 0 order by slot", p.node)
	if err != nil {
		return 0, err
	}
	used, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return 0, err
	}
	return lowestFreeSlot(used, maxSlots, avoid)
}

// held is what the catalog says of a sandbox before a write.
type held struct {
	node string
	live bool
	rec  Sandbox
}

func (p *Postgres) lockSandbox(ctx context.Context, tx pgx.Tx, id string) (*held, error) {
	var h held
	var doc []byte
	err := tx.QueryRow(ctx, "select node, live, doc from sandboxes where id = $1 for update", id).Scan(&h.node, &h.live, &doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrNotFound, "sandbox %q not found", id)
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(doc, &h.rec); err != nil {
		return nil, fmt.Errorf("decode sandbox %s: %w", id, err)
	}
	h.rec.Node = h.node
	return &h, nil
}

func (p *Postgres) putSandbox(ctx context.Context, tx pgx.Tx, s *Sandbox, insert bool) error {
	doc, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode sandbox %s: %w", s.ID, err)
	}
	q := `update sandboxes set node = $2, tenant = $3, state = $4, live = $5, slot = $6, doc = $7, created_at = $8,
		ended_at = $9, paused_at = $10, image = $11, updated_at = now() where id = $1`
	if insert {
		q = `insert into sandboxes (id, node, tenant, state, live, slot, doc, created_at, ended_at, paused_at, image)
			values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`
	}
	_, err = tx.Exec(ctx, q, s.ID, s.Node, s.Tenant, s.State, s.Live(), s.Slot, doc, s.CreatedAt, nullTime(s.EndedAt), nullTime(s.PausedAt), s.Image)
	return err
}

func (p *Postgres) CreateSandbox(ctx context.Context, s *Sandbox, maxSlots int, avoid func(int) bool) error {
	rec := *s
	err := p.tx(ctx, func(tx pgx.Tx) error {
		slot, err := p.freeSlot(ctx, tx, maxSlots, avoid)
		if err != nil {
			return err
		}
		rec.Slot, rec.Node = slot, p.node
		return p.putSandbox(ctx, tx, &rec, true)
	})
	if err != nil {
		return dbErr(err, "create sandbox %q", s.ID)
	}
	s.Slot, s.Node = rec.Slot, rec.Node
	return nil
}

func (p *Postgres) UpdateSandbox(ctx context.Context, s *Sandbox, from Expect) error {
	rec := *s
	err := p.tx(ctx, func(tx pgx.Tx) error {
		h, err := p.lockSandbox(ctx, tx, s.ID)
		if err != nil {
			return err
		}
		if err := p.mayWrite(s.ID, h); err != nil {
			return err
		}
		if !h.live && rec.Live() {
			return errdefs.New(errdefs.ErrFailedPrecondition, "sandbox %q is %s in the catalog (%s): it does not run on this node any more", s.ID, h.rec.State, h.rec.Reason)
		}
		if err := from.check(&h.rec); err != nil {
			return err
		}
		if rec.Live() {
			rec.Node = p.node
		} else {
			rec.Node, rec.Slot = "", -1
		}
		return p.putSandbox(ctx, tx, &rec, false)
	})
	if err != nil {
		return dbErr(err, "update sandbox %q", s.ID)
	}
	s.Slot, s.Node = rec.Slot, rec.Node
	return nil
}

// mayWrite refuses a write to a sandbox another node holds.
func (p *Postgres) mayWrite(id string, h *held) error {
	if h.live && h.node != p.node {
		return errdefs.New(errdefs.ErrFailedPrecondition, "sandbox %q is %s on node %s", id, h.rec.State, h.node)
	}
	return nil
}

func (p *Postgres) ReviveSandbox(ctx context.Context, s *Sandbox, from Expect, maxSlots int, avoid func(int) bool) error {
	if !s.Live() {
		return fmt.Errorf("revive sandbox %s: state %s is not live", s.ID, s.State)
	}
	rec := *s
	err := p.tx(ctx, func(tx pgx.Tx) error {
		h, err := p.lockSandbox(ctx, tx, s.ID)
		if err != nil {
			return err
		}
		if h.live {
			if h.node != p.node {
				return errdefs.New(errdefs.ErrFailedPrecondition, "sandbox %q is %s on node %s", s.ID, h.rec.State, h.node)
			}
			return errdefs.New(errdefs.ErrFailedPrecondition, "sandbox %q is %s", s.ID, h.rec.State)
		}
		if err := from.check(&h.rec); err != nil {
			return err
		}
		slot, err := p.freeSlot(ctx, tx, maxSlots, avoid)
		if err != nil {
			return err
		}
		rec.Slot, rec.Node = slot, p.node
		return p.putSandbox(ctx, tx, &rec, false)
	})
	if err != nil {
		return dbErr(err, "revive sandbox %q", s.ID)
	}
	s.Slot, s.Node = rec.Slot, rec.Node
	return nil
}

func (p *Postgres) GetSandbox(ctx context.Context, id string) (*Sandbox, error) {
	var doc []byte
	err := p.pool.QueryRow(ctx, "select doc from sandboxes where id = $1", id).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrNotFound, "sandbox %q not found", id)
	}
	if err != nil {
		return nil, dbErr(err, "get sandbox %q", id)
	}
	s := new(Sandbox)
	if err := json.Unmarshal(doc, s); err != nil {
		return nil, fmt.Errorf("decode sandbox %s: %w", id, err)
	}
	return s, nil
}

// ListSandboxes answers this node's live records and every record that is
// not live.
func (p *Postgres) ListSandboxes(ctx context.Context) ([]*Sandbox, error) {
	return pgList[Sandbox](ctx, p.pool, "sandboxes", "select doc from sandboxes where node = $1 or not live", p.node)
}

// LiveSandboxes answers this node's live records (sandboxes_node_live).
func (p *Postgres) LiveSandboxes(ctx context.Context) ([]*Sandbox, error) {
	return pgList[Sandbox](ctx, p.pool, "sandboxes", "select doc from sandboxes where node = $1 and live", p.node)
}

// StaleSandboxes reads two ranges: sandboxes_ended and sandboxes_paused.
func (p *Postgres) StaleSandboxes(ctx context.Context, ended, paused time.Time) ([]*Sandbox, error) {
	return pgList[Sandbox](ctx, p.pool, "sandboxes", `select doc from sandboxes
		where not live and ended_at < $1 or state = 'paused' and (paused_at < $2 or paused_at is null)`, ended, paused)
}

// HeldImages skips through sandboxes_paused_image from one image to the
// next (a recursive query: PostgreSQL has no skip scan), so it reads an
// entry per image, not per paused sandbox; this node's live records are
// few.
func (p *Postgres) HeldImages(ctx context.Context) ([]string, error) {
	rows, err := p.pool.Query(ctx, `with recursive paused(image) as (
			(select image from sandboxes where state = 'paused' order by image limit 1)
			union all
			select (select s.image from sandboxes s where s.state = 'paused' and s.image > p.image order by s.image limit 1)
			from paused p where p.image is not null)
		select image from paused where image is not null
		union
		select image from sandboxes where node = $1 and live
		order by 1`, p.node)
	if err != nil {
		return nil, dbErr(err, "list held images")
	}
	images, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return images, dbErr(err, "list held images")
}

// CountOnImages counts entries of sandboxes_paused_image (and this
// node's few live records).
func (p *Postgres) CountOnImages(ctx context.Context, images []string) (int, error) {
	var n int
	err := p.pool.QueryRow(ctx, `select (select count(*) from sandboxes where node = $1 and live and image = any($2) and not (doc ? 'build'))
		+ (select coalesce(sum(c), 0) from unnest($2::text[]) i, lateral (select count(*) c from sandboxes where state = 'paused' and image = i) x)`, p.node, images).Scan(&n)
	return n, dbErr(err, "count sandboxes on images")
}

// PausedUsage reads the tenants' ranges of sandboxes_tenant_list.
func (p *Postgres) PausedUsage(ctx context.Context, tenants []string) (n int, bytes int64, err error) {
	err = p.pool.QueryRow(ctx, `select count(*), coalesce(sum((doc->'checkpoint'->>'bytes')::bigint), 0)::bigint
		from sandboxes where tenant = any($1) and state = 'paused'`, tenants).Scan(&n, &bytes)
	return n, bytes, dbErr(err, "count paused sandboxes")
}

// VolumeHolders reads this node's live records and sandboxes_paused_volumes.
func (p *Postgres) VolumeHolders(ctx context.Context) ([]*Sandbox, error) {
	return pgList[Sandbox](ctx, p.pool, "sandboxes", `select doc from sandboxes where node = $1 and live and doc ? 'volumes'
		union all select doc from sandboxes where state = 'paused' and doc ? 'volumes'`, p.node)
}

// QuerySandboxes filters, orders and pages in SQL (listSQL): a page is
// a range of sandboxes_tenant_list (of every tenant's, of sandboxes_list)
// per tenant and state asked for, however big the catalog.
func (p *Postgres) QuerySandboxes(ctx context.Context, q Query) ([]*Sandbox, *Cursor, error) {
	sql, args, err := listSQL(q)
	if err != nil {
		return nil, nil, err
	}
	rows, err := p.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, nil, dbErr(err, "list sandboxes")
	}
	var out []*Sandbox
	var next *Cursor
	var doc []byte
	var id string
	var created, lastCreated time.Time
	_, err = pgx.ForEachRow(rows, []any{&doc, &created, &id}, func() error {
		if q.Limit > 0 && len(out) == q.Limit {
			last := out[len(out)-1]
			next = &Cursor{CreatedAt: lastCreated, ID: last.ID}
			return nil
		}
		s := new(Sandbox)
		if err := json.Unmarshal(doc, s); err != nil {
			return fmt.Errorf("decode sandbox: %w", err)
		}
		out = append(out, s)
		lastCreated = created
		return nil
	})
	if err != nil {
		return nil, nil, dbErr(err, "list sandboxes")
	}
	return out, next, nil
}

// listSQL is the statement QuerySandboxes runs. A page of one tenant (or
// of all) in one state is a range of one index, in list order (the
// equalities lead the index, (created_at, id) follow). A page of several
// tenants or states (the default tenant's list: tenants "default" and "";
// E2B's paused list: paused and resuming; a native list of any states)
// is a UNION ALL of one such range per (tenant, state), each cut at the
// page's size, that the planner merges (Merge Append) and cuts again:
// "tenant = any(...) and state = any(...)" would read and sort every
// match first. A list without a limit reads every match anyway, and
// sorts them. With no state asked for, no index leads with the tenant
// alone: only the journal lists so, once, without a limit. The limit is
// a literal, which a generic plan does not have to guess.
func listSQL(q Query) (string, []any, error) {
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	common := []string{"state <> 'pooled'", "not (doc ? 'build')"}
	if len(q.Metadata) > 0 {
		md, err := json.Marshal(map[string]any{"metadata": q.Metadata})
		if err != nil {
			return "", nil, err
		}
		common = append(common, "doc @> "+arg(string(md))+"::jsonb")
	}
	if q.After != nil {
		common = append(common, "(created_at, id) < ("+arg(q.After.CreatedAt)+", "+arg(q.After.ID)+")")
	}
	const order = " order by created_at desc, id desc"
	limit := ""
	if q.Limit > 0 {
		limit = " limit " + strconv.Itoa(q.Limit+1)
	}
	tenants := slices.Compact(slices.Sorted(slices.Values(q.Tenants)))
	states := slices.Compact(slices.Sorted(slices.Values(q.States)))
	if q.Limit == 0 || len(tenants) <= 1 && len(states) <= 1 {
		where := common
		for _, c := range []struct {
			col  string
			vals []string
		}{{"tenant", tenants}, {"state", states}} {
			switch len(c.vals) {
			case 0:
			case 1:
				where = append(where, c.col+" = "+arg(c.vals[0]))
			default:
				where = append(where, c.col+" = any("+arg(c.vals)+")")
			}
		}
		return "select doc, created_at, id from sandboxes where " + strings.Join(where, " and ") + order + limit, args, nil
	}
	// Each value once: the branches share the parameters.
	params := func(col string, vals []string) []string {
		if len(vals) == 0 {
			return []string{""}
		}
		out := make([]string, 0, len(vals))
		for _, v := range vals {
			out = append(out, col+" = "+arg(v))
		}
		return out
	}
	var branches []string
	ts, ss := params("tenant", tenants), params("state", states)
	for _, t := range ts {
		for _, st := range ss {
			where := slices.DeleteFunc([]string{t, st}, func(c string) bool { return c == "" })
			branches = append(branches, "(select doc, created_at, id from sandboxes where "+strings.Join(append(where, common...), " and ")+order+limit+")")
		}
	}
	return strings.Join(branches, " union all ") + order + limit, args, nil
}

func (p *Postgres) DeleteSandbox(ctx context.Context, id string, from Expect) error {
	err := p.tx(ctx, func(tx pgx.Tx) error {
		h, err := p.lockSandbox(ctx, tx, id)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := p.mayWrite(id, h); err != nil {
			return err
		}
		if err := from.check(&h.rec); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "delete from sandboxes where id = $1", id)
		return err
	})
	return dbErr(err, "delete sandbox %q", id)
}

// pgList decodes the doc column of every row q answers.
func pgList[T any](ctx context.Context, pool *pgxpool.Pool, what, q string, args ...any) ([]*T, error) {
	rows, err := pool.Query(ctx, q, args...)
	if err != nil {
		return nil, dbErr(err, "list %s", what)
	}
	docs, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, dbErr(err, "list %s", what)
	}
	out := make([]*T, 0, len(docs))
	for _, d := range docs {
		v := new(T)
		if err := json.Unmarshal(d, v); err != nil {
			return nil, fmt.Errorf("decode %s: %w", what, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// pgGet decodes the doc column of the one row q answers; none is
// ErrNotFound with the message given.
func pgGet[T any](ctx context.Context, pool *pgxpool.Pool, notFound, q string, args ...any) (*T, error) {
	var doc []byte
	err := pool.QueryRow(ctx, q, args...).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.New(errdefs.ErrNotFound, "%s", notFound)
	}
	if err != nil {
		return nil, dbErr(err, "get")
	}
	v := new(T)
	if err := json.Unmarshal(doc, v); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	return v, nil
}

// exec runs one statement.
func (p *Postgres) exec(ctx context.Context, what string, q string, args ...any) error {
	_, err := p.pool.Exec(ctx, q, args...)
	return dbErr(err, "%s", what)
}

// now is the database's clock: leases compare against one clock, not each
// node's.
func (p *Postgres) now(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := p.pool.QueryRow(ctx, "select now()").Scan(&t)
	return t, dbErr(err, "read the catalog's clock")
}
