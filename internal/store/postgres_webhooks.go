package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Webhooks are the cluster's (any node serves their routes); deliveries
// are each node's own queue: the node that saw an event delivers it.

func (p *Postgres) PutWebhook(ctx context.Context, w *Webhook) error {
	doc, err := json.Marshal(w)
	if err != nil {
		return fmt.Errorf("encode webhook %s: %w", w.ID, err)
	}
	return p.exec(ctx, "put webhook "+w.ID, `insert into webhooks (id, doc) values ($1, $2)
		on conflict (id) do update set doc = excluded.doc`, w.ID, doc)
}

func (p *Postgres) GetWebhook(ctx context.Context, id string) (*Webhook, error) {
	return pgGet[Webhook](ctx, p.pool, fmt.Sprintf("webhook %q not found", id), "select doc from webhooks where id = $1", id)
}

func (p *Postgres) ListWebhooks(ctx context.Context) ([]*Webhook, error) {
	return pgList[Webhook](ctx, p.pool, "webhooks", "select doc from webhooks order by id")
}

func (p *Postgres) DeleteWebhook(ctx context.Context, id string) error {
	return p.exec(ctx, "delete webhook "+id, "delete from webhooks where id = $1", id)
}

func (p *Postgres) EnqueueWebhookDeliveries(ctx context.Context, ds []*WebhookDelivery) error {
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		for _, d := range ds {
			var seq uint64
			if err := tx.QueryRow(ctx, "select nextval('webhook_deliveries_seq_seq')").Scan(&seq); err != nil {
				return dbErr(err, "enqueue webhook delivery")
			}
			d.Seq = seq
			doc, err := json.Marshal(d)
			if err != nil {
				return fmt.Errorf("encode webhook delivery: %w", err)
			}
			if _, err := tx.Exec(ctx, "insert into webhook_deliveries (seq, node, webhook, doc) values ($1, $2, $3, $4)",
				seq, p.node, d.Webhook, doc); err != nil {
				return dbErr(err, "enqueue webhook delivery")
			}
		}
		return nil
	})
}

func (p *Postgres) WebhookDeliveries(ctx context.Context) ([]*WebhookDelivery, error) {
	return pgList[WebhookDelivery](ctx, p.pool, "webhook deliveries",
		"select doc from webhook_deliveries where node = $1 order by seq", p.node)
}

func (p *Postgres) DeleteWebhookDelivery(ctx context.Context, seq uint64) error {
	return p.exec(ctx, "delete webhook delivery", "delete from webhook_deliveries where seq = $1 and node = $2", seq, p.node)
}
