package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/spacesandbox/space/internal/errdefs"
)

func (b *Bolt) CreateTenant(_ context.Context, t *Tenant) error {
	data, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("encode tenant %s: %w", t.ID, err)
	}
	return b.writes.do(func(tx *bolt.Tx) error {
		tb := tx.Bucket(bucketTenants)
		if old := tb.Get([]byte(t.ID)); old != nil && !bytes.Equal(old, data) {
			return errdefs.New(errdefs.ErrAlreadyExists, "tenant %q already exists", t.ID)
		}
		return tb.Put([]byte(t.ID), data)
	})
}

func (b *Bolt) UpdateTenant(_ context.Context, t *Tenant) error {
	data, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("encode tenant %s: %w", t.ID, err)
	}
	return b.writes.do(func(tx *bolt.Tx) error {
		tb := tx.Bucket(bucketTenants)
		if tb.Get([]byte(t.ID)) == nil {
			return errdefs.New(errdefs.ErrNotFound, "tenant %q not found", t.ID)
		}
		return tb.Put([]byte(t.ID), data)
	})
}

func (b *Bolt) GetTenant(_ context.Context, id string) (*Tenant, error) {
	t := new(Tenant)
	if err := b.get(bucketTenants, id, t); err != nil {
		return nil, notFound(err, "tenant %q not found", id)
	}
	return t, nil
}

func (b *Bolt) ListTenants(_ context.Context) ([]*Tenant, error) {
	return list[Tenant](b, bucketTenants)
}

func (b *Bolt) PutAPIKey(_ context.Context, k *APIKey) error {
	data, err := json.Marshal(k)
	if err != nil {
		return fmt.Errorf("encode key %s: %w", k.ID, err)
	}
	return b.writes.do(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAPIKeys).Put([]byte(k.ID), data)
	})
}

func (b *Bolt) ListAPIKeys(_ context.Context) ([]*APIKey, error) {
	return list[APIKey](b, bucketAPIKeys)
}

// Audit entries are keyed by time (big-endian nanoseconds) and a sequence
// number, so a range scan is a time window.
func auditKey(t time.Time, seq uint64) []byte {
	k := make([]byte, 16)
	binary.BigEndian.PutUint64(k, uint64(t.UnixNano()))
	binary.BigEndian.PutUint64(k[8:], seq)
	return k
}

func (b *Bolt) AppendAudit(_ context.Context, entries []AuditEntry) error {
	return b.writes.do(func(tx *bolt.Tx) error {
		ab := tx.Bucket(bucketAudit)
		for _, e := range entries {
			data, err := json.Marshal(e)
			if err != nil {
				return fmt.Errorf("encode audit entry: %w", err)
			}
			seq, _ := ab.NextSequence()
			if err := ab.Put(auditKey(e.Time, seq), data); err != nil {
				return err
			}
		}
		return nil
	})
}

func (b *Bolt) Audit(_ context.Context, from, to time.Time, limit int) ([]AuditEntry, error) {
	var out []AuditEntry
	err := b.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketAudit).Cursor()
		end := auditKey(to, 0)
		for k, v := c.Seek(auditKey(from, 0)); k != nil && bytes.Compare(k, end) < 0 && len(out) < limit; k, v = c.Next() {
			var e AuditEntry
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("decode audit entry: %w", err)
			}
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

func (b *Bolt) PruneAudit(_ context.Context, before time.Time) (int, error) {
	n := 0
	err := b.writes.do(func(tx *bolt.Tx) error {
		n = 0
		c := tx.Bucket(bucketAudit).Cursor()
		end := auditKey(before, 0)
		for k, _ := c.First(); k != nil && bytes.Compare(k, end) < 0; k, _ = c.Next() {
			if err := c.Delete(); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}
