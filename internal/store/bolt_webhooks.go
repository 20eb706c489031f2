package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Webhooks are kept by ID; the delivery queue by its sequence number
// (big-endian, so a cursor reads it oldest first).

func (b *Bolt) PutWebhook(_ context.Context, w *Webhook) error {
	data, err := json.Marshal(w)
	if err != nil {
		return fmt.Errorf("encode webhook %s: %w", w.ID, err)
	}
	return b.writes.do(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketWebhooks).Put([]byte(w.ID), data)
	})
}

func (b *Bolt) GetWebhook(_ context.Context, id string) (*Webhook, error) {
	w := new(Webhook)
	if err := b.get(bucketWebhooks, id, w); err != nil {
		return nil, notFound(err, "webhook %q not found", id)
	}
	return w, nil
}

func (b *Bolt) ListWebhooks(_ context.Context) ([]*Webhook, error) {
	return list[Webhook](b, bucketWebhooks)
}

func (b *Bolt) DeleteWebhook(_ context.Context, id string) error {
	return b.writes.do(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketWebhooks).Delete([]byte(id)); err != nil {
			return err
		}
		q := tx.Bucket(bucketWebhookQueue)
		var drop [][]byte
		err := q.ForEach(func(k, data []byte) error {
			var d WebhookDelivery
			if err := json.Unmarshal(data, &d); err != nil {
				return fmt.Errorf("decode webhook delivery: %w", err)
			}
			if d.Webhook == id {
				drop = append(drop, append([]byte(nil), k...))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range drop {
			if err := q.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

func (b *Bolt) EnqueueWebhookDeliveries(_ context.Context, ds []*WebhookDelivery) error {
	return b.writes.do(func(tx *bolt.Tx) error {
		q := tx.Bucket(bucketWebhookQueue)
		for _, d := range ds {
			// A write may run twice (group commit), each time in a fresh
			// transaction: the number is taken again.
			seq, err := q.NextSequence()
			if err != nil {
				return err
			}
			d.Seq = seq
			data, err := json.Marshal(d)
			if err != nil {
				return fmt.Errorf("encode webhook delivery: %w", err)
			}
			if err := q.Put(seqKey(d.Seq), data); err != nil {
				return err
			}
		}
		return nil
	})
}

func (b *Bolt) WebhookDeliveries(_ context.Context) ([]*WebhookDelivery, error) {
	return list[WebhookDelivery](b, bucketWebhookQueue)
}

func (b *Bolt) DeleteWebhookDelivery(_ context.Context, seq uint64) error {
	return b.writes.do(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketWebhookQueue).Delete(seqKey(seq))
	})
}

func seqKey(seq uint64) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, seq)
	return k
}
