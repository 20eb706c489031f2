package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/spacesandbox/space/internal/errdefs"
)

// The catalog's other records: templates and builds, tenants, API keys
// and audit entries (shared by every node), and this node's volumes.

func (p *Postgres) GetTemplate(ctx context.Context, name string) (*Template, error) {
	return pgGet[Template](ctx, p.pool, fmt.Sprintf("template %q not found", name), "select doc from templates where name = $1", name)
}

func (p *Postgres) ListTemplates(ctx context.Context) ([]*Template, error) {
	return pgList[Template](ctx, p.pool, "templates", "select doc from templates order by name")
}

func (p *Postgres) PutTemplate(ctx context.Context, t *Template) error {
	doc, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("encode template %s: %w", t.Name, err)
	}
	return p.exec(ctx, "put template "+t.Name, `insert into templates (name, tenant, doc) values ($1, $2, $3)
		on conflict (name) do update set tenant = excluded.tenant, doc = excluded.doc`, t.Name, t.Tenant, doc)
}

func (p *Postgres) DeleteTemplate(ctx context.Context, name string) error {
	return p.exec(ctx, "delete template "+name, "delete from templates where name = $1", name)
}

func (p *Postgres) GetBuild(ctx context.Context, id string) (*Build, error) {
	return pgGet[Build](ctx, p.pool, fmt.Sprintf("build %q not found", id), "select doc from builds where id = $1", id)
}

func (p *Postgres) ListBuilds(ctx context.Context) ([]*Build, error) {
	return pgList[Build](ctx, p.pool, "builds", "select doc from builds")
}

func (p *Postgres) PutBuild(ctx context.Context, b *Build, t *Template) error {
	bdoc, err := json.Marshal(b)
	if err != nil {
		return fmt.Errorf("encode build %s: %w", b.ID, err)
	}
	var tdoc []byte
	if t != nil {
		if tdoc, err = json.Marshal(t); err != nil {
			return fmt.Errorf("encode template %s: %w", t.Name, err)
		}
	}
	err = p.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `insert into builds (id, node, template, doc) values ($1, $2, $3, $4)
			on conflict (id) do update set node = excluded.node, template = excluded.template, doc = excluded.doc`,
			b.ID, b.Node, b.Template, bdoc); err != nil {
			return err
		}
		if t == nil {
			return nil
		}
		_, err := tx.Exec(ctx, `insert into templates (name, tenant, doc) values ($1, $2, $3)
			on conflict (name) do update set tenant = excluded.tenant, doc = excluded.doc`, t.Name, t.Tenant, tdoc)
		return err
	})
	return dbErr(err, "put build %s", b.ID)
}

func (p *Postgres) CreateTenant(ctx context.Context, t *Tenant) error {
	doc, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("encode tenant %s: %w", t.ID, err)
	}
	// Creating one that exists as it is changes nothing (the default
	// tenant is made at every start); a different one is a conflict.
	tag, err := p.pool.Exec(ctx, `insert into tenants (id, doc) values ($1, $2)
		on conflict (id) do update set doc = excluded.doc where tenants.doc = excluded.doc`, t.ID, doc)
	if err != nil {
		return dbErr(err, "create tenant %q", t.ID)
	}
	if tag.RowsAffected() == 0 {
		return errdefs.New(errdefs.ErrAlreadyExists, "tenant %q already exists", t.ID)
	}
	return nil
}

func (p *Postgres) UpdateTenant(ctx context.Context, t *Tenant) error {
	doc, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("encode tenant %s: %w", t.ID, err)
	}
	tag, err := p.pool.Exec(ctx, "update tenants set doc = $2 where id = $1", t.ID, doc)
	if err != nil {
		return dbErr(err, "update tenant %q", t.ID)
	}
	if tag.RowsAffected() == 0 {
		return errdefs.New(errdefs.ErrNotFound, "tenant %q not found", t.ID)
	}
	return nil
}

func (p *Postgres) GetTenant(ctx context.Context, id string) (*Tenant, error) {
	return pgGet[Tenant](ctx, p.pool, fmt.Sprintf("tenant %q not found", id), "select doc from tenants where id = $1", id)
}

func (p *Postgres) ListTenants(ctx context.Context) ([]*Tenant, error) {
	return pgList[Tenant](ctx, p.pool, "tenants", "select doc from tenants order by id")
}

func (p *Postgres) CreateAPIKey(ctx context.Context, k *APIKey) error {
	doc, err := json.Marshal(k)
	if err != nil {
		return fmt.Errorf("encode key %s: %w", k.ID, err)
	}
	tag, err := p.pool.Exec(ctx, `insert into api_keys (id, tenant, doc) values ($1, $2, $3) on conflict (id) do nothing`, k.ID, k.Tenant, doc)
	if err != nil {
		return dbErr(err, "create key %s", k.ID)
	}
	if tag.RowsAffected() == 0 {
		return errdefs.New(errdefs.ErrAlreadyExists, "key id %q is taken", k.ID)
	}
	return nil
}

func (p *Postgres) RevokeAPIKey(ctx context.Context, id string, at time.Time) (*APIKey, error) {
	var k *APIKey
	err := p.tx(ctx, func(tx pgx.Tx) error {
		var doc []byte
		err := tx.QueryRow(ctx, "select doc from api_keys where id = $1 for update", id).Scan(&doc)
		if errors.Is(err, pgx.ErrNoRows) {
			return errdefs.New(errdefs.ErrNotFound, "key %q not found", id)
		}
		if err != nil {
			return err
		}
		k = new(APIKey)
		if err := json.Unmarshal(doc, k); err != nil {
			return fmt.Errorf("decode key %s: %w", id, err)
		}
		if !k.RevokedAt.IsZero() {
			return nil
		}
		k.RevokedAt = at
		if doc, err = json.Marshal(k); err != nil {
			return fmt.Errorf("encode key %s: %w", id, err)
		}
		_, err = tx.Exec(ctx, "update api_keys set doc = $2 where id = $1", id, doc)
		return err
	})
	if err != nil {
		return nil, dbErr(err, "revoke key %s", id)
	}
	return k, nil
}

func (p *Postgres) ListAPIKeys(ctx context.Context) ([]*APIKey, error) {
	return pgList[APIKey](ctx, p.pool, "keys", "select doc from api_keys order by id")
}

func (p *Postgres) AppendAudit(ctx context.Context, entries []AuditEntry) error {
	rows := make([][]any, 0, len(entries))
	for _, e := range entries {
		doc, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("encode audit entry: %w", err)
		}
		rows = append(rows, []any{e.Time, doc})
	}
	_, err := p.pool.CopyFrom(ctx, pgx.Identifier{"audit"}, []string{"at", "doc"}, pgx.CopyFromRows(rows))
	return dbErr(err, "append audit")
}

// An entry's cursor is its row's at (in microseconds, as the column keeps
// it: not the entry's own time, which has nanoseconds) and seq: rows are
// read in that order.
func (p *Postgres) Audit(ctx context.Context, q AuditQuery) ([]AuditEntry, error) {
	query := "select at, seq, doc from audit where at >= $1 and at < $2 order by at, seq limit $3"
	args := []any{q.From, q.To, q.Limit}
	if q.After != "" {
		micros, seq, err := parsePGCursor(q.After)
		if err != nil {
			return nil, err
		}
		query = `select at, seq, doc from audit where at >= $1 and at < $2 and (at, seq) > ($4, $5)
			order by at, seq limit $3`
		args = append(args, time.UnixMicro(micros), seq)
	}
	rows, err := p.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, dbErr(err, "list audit")
	}
	var out []AuditEntry
	var at time.Time
	var seq int64
	var doc []byte
	_, err = pgx.ForEachRow(rows, []any{&at, &seq, &doc}, func() error {
		var e AuditEntry
		if err := json.Unmarshal(doc, &e); err != nil {
			return fmt.Errorf("decode audit entry: %w", err)
		}
		e.Cursor = fmt.Sprintf("%d.%d", at.UnixMicro(), seq)
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, dbErr(err, "list audit")
	}
	return out, nil
}

func parsePGCursor(c string) (micros, seq int64, err error) {
	a, b, ok := strings.Cut(c, ".")
	if ok {
		if micros, err = strconv.ParseInt(a, 10, 64); err == nil {
			seq, err = strconv.ParseInt(b, 10, 64)
		}
	}
	if !ok || err != nil {
		return 0, 0, errdefs.New(errdefs.ErrInvalidArgument, "audit cursor %q is not one of this store's", c)
	}
	return micros, seq, nil
}

func (p *Postgres) PruneAudit(ctx context.Context, before time.Time) (int, error) {
	tag, err := p.pool.Exec(ctx, "delete from audit where at < $1", before)
	if err != nil {
		return 0, dbErr(err, "prune audit")
	}
	return int(tag.RowsAffected()), nil
}

func (p *Postgres) CreateVolume(ctx context.Context, v *Volume) error {
	doc, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode volume %s: %w", v.ID, err)
	}
	_, err = p.pool.Exec(ctx, `insert into volumes (id, node, name, doc) values ($1, $2, $3, $4)
		on conflict (id) do update set doc = excluded.doc where volumes.node = excluded.node and volumes.name = excluded.name`,
		v.ID, p.node, v.Name, doc)
	if err != nil {
		if errdefs.Class(dbErr(err, "")) == errdefs.ErrAlreadyExists {
			return errdefs.New(errdefs.ErrAlreadyExists, "a volume named %q already exists", v.Name)
		}
		return dbErr(err, "create volume %q", v.Name)
	}
	return nil
}

func (p *Postgres) UpdateVolume(ctx context.Context, v *Volume) error {
	doc, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode volume %s: %w", v.ID, err)
	}
	tag, err := p.pool.Exec(ctx, "update volumes set doc = $3 where id = $1 and node = $2", v.ID, p.node, doc)
	if err != nil {
		return dbErr(err, "update volume %q", v.ID)
	}
	if tag.RowsAffected() == 0 {
		return errdefs.New(errdefs.ErrNotFound, "volume %q not found", v.ID)
	}
	return nil
}

func (p *Postgres) GetVolume(ctx context.Context, id string) (*Volume, error) {
	return pgGet[Volume](ctx, p.pool, fmt.Sprintf("volume %q not found", id), "select doc from volumes where id = $1 and node = $2", id, p.node)
}

func (p *Postgres) VolumeByName(ctx context.Context, name string) (*Volume, error) {
	return pgGet[Volume](ctx, p.pool, fmt.Sprintf("volume %q not found", name), "select doc from volumes where name = $1 and node = $2", name, p.node)
}

func (p *Postgres) ListVolumes(ctx context.Context) ([]*Volume, error) {
	return pgList[Volume](ctx, p.pool, "volumes", "select doc from volumes where node = $1", p.node)
}

func (p *Postgres) DeleteVolume(ctx context.Context, id string) error {
	return p.exec(ctx, "delete volume "+id, "delete from volumes where id = $1 and node = $2", id, p.node)
}

// The manifest index (checkpoint.Index).

func (p *Postgres) PutManifest(ctx context.Context, prefix, id string, manifest []byte) error {
	var m struct {
		Sandbox string `json:"sandbox_id"`
	}
	if err := json.Unmarshal(manifest, &m); err != nil {
		return fmt.Errorf("index manifest %s%s: %w", prefix, id, err)
	}
	return p.exec(ctx, "index manifest "+prefix+id, `insert into manifests (prefix, id, doc, sandbox) values ($1, $2, $3, $4)
		on conflict (prefix, id) do update set doc = excluded.doc, sandbox = excluded.sandbox, indexed_at = now()`, prefix, id, manifest, m.Sandbox)
}

func (p *Postgres) DeleteManifest(ctx context.Context, prefix, id string) error {
	return p.exec(ctx, "unindex manifest "+prefix+id, "delete from manifests where prefix = $1 and id = $2", prefix, id)
}

func (p *Postgres) Manifests(ctx context.Context, prefix string) ([][]byte, error) {
	rows, err := p.pool.Query(ctx, "select doc from manifests where prefix = $1 order by id", prefix)
	if err != nil {
		return nil, dbErr(err, "list manifests")
	}
	docs, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	return docs, dbErr(err, "list manifests")
}

// ManifestsOf answers the manifests under prefix of sandbox id (an
// index range of manifests_sandbox).
func (p *Postgres) ManifestsOf(ctx context.Context, prefix, sandbox string) ([][]byte, error) {
	rows, err := p.pool.Query(ctx, "select doc from manifests where prefix = $1 and sandbox = $2 order by id", prefix, sandbox)
	if err != nil {
		return nil, dbErr(err, "list a sandbox's manifests")
	}
	docs, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	return docs, dbErr(err, "list a sandbox's manifests")
}

func (p *Postgres) KeepManifests(ctx context.Context, prefix string, ids []string, since time.Time) error {
	return p.exec(ctx, "prune the manifest index", `delete from manifests where prefix = $1 and indexed_at < $3 and not (id = any($2))`, prefix, ids, since)
}

// Secrets is the catalog as the egress gateway's secrets backend
// (secrets.Backend): sealed records by name.
func (p *Postgres) Secrets() PostgresSecrets { return PostgresSecrets{p} }

// PostgresSecrets keeps sealed secrets in the catalog.
type PostgresSecrets struct{ p *Postgres }

// secretsTimeout bounds a call (the secrets API has no context of its own).
const secretsTimeout = 10 * time.Second

func (s PostgresSecrets) LoadSecrets() (map[string][]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), secretsTimeout)
	defer cancel()
	rows, err := s.p.pool.Query(ctx, "select name, record from secrets")
	if err != nil {
		return nil, dbErr(err, "load secrets")
	}
	out := map[string][]byte{}
	var name string
	var rec []byte
	_, err = pgx.ForEachRow(rows, []any{&name, &rec}, func() error {
		out[name] = append([]byte(nil), rec...)
		return nil
	})
	return out, dbErr(err, "load secrets")
}

func (s PostgresSecrets) PutSecret(name string, record []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), secretsTimeout)
	defer cancel()
	return s.p.exec(ctx, "store secret", `insert into secrets (name, record) values ($1, $2)
		on conflict (name) do update set record = excluded.record`, name, record)
}

func (s PostgresSecrets) DeleteSecret(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), secretsTimeout)
	defer cancel()
	return s.p.exec(ctx, "delete secret", "delete from secrets where name = $1", name)
}

// ClusterKey answers the sealed key of name, made from fresh (by the
// first node that asks) if there is none yet.
func (p *Postgres) ClusterKey(ctx context.Context, name string, fresh []byte) ([]byte, error) {
	var sealed []byte
	err := p.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "insert into cluster_keys (name, sealed) values ($1, $2) on conflict (name) do nothing", name, fresh); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "select sealed from cluster_keys where name = $1", name).Scan(&sealed)
	})
	return sealed, dbErr(err, "read cluster key %s", name)
}
