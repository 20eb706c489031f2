package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
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

func (b *Bolt) CreateAPIKey(_ context.Context, k *APIKey) error {
	data, err := json.Marshal(k)
	if err != nil {
		return fmt.Errorf("encode key %s: %w", k.ID, err)
	}
	return b.writes.do(func(tx *bolt.Tx) error {
		kb := tx.Bucket(bucketAPIKeys)
		if kb.Get([]byte(k.ID)) != nil {
			return errdefs.New(errdefs.ErrAlreadyExists, "key id %q is taken", k.ID)
		}
		return kb.Put([]byte(k.ID), data)
	})
}

func (b *Bolt) RevokeAPIKey(_ context.Context, id string, at time.Time) (*APIKey, error) {
	var k *APIKey
	err := b.writes.do(func(tx *bolt.Tx) error {
		k = nil
		kb := tx.Bucket(bucketAPIKeys)
		old := kb.Get([]byte(id))
		if old == nil {
			return errdefs.New(errdefs.ErrNotFound, "key %q not found", id)
		}
		k = new(APIKey)
		if err := json.Unmarshal(old, k); err != nil {
			return fmt.Errorf("decode key %s: %w", id, err)
		}
		if !k.RevokedAt.IsZero() {
			return nil
		}
		k.RevokedAt = at
		data, err := json.Marshal(k)
		if err != nil {
			return fmt.Errorf("encode key %s: %w", id, err)
		}
		return kb.Put([]byte(id), data)
	})
	if err != nil {
		return nil, err
	}
	return k, nil
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

// An entry's cursor is its key in hex.
func (b *Bolt) Audit(_ context.Context, q AuditQuery) ([]AuditEntry, error) {
	start := auditKey(q.From, 0)
	var after []byte
	if q.After != "" {
		var err error
		if after, err = hex.DecodeString(q.After); err != nil || len(after) != 16 {
			return nil, errdefs.New(errdefs.ErrInvalidArgument, "audit cursor %q is not one of this store's", q.After)
		}
		if bytes.Compare(after, start) >= 0 {
			start = after
		}
	}
	var out []AuditEntry
	err := b.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketAudit).Cursor()
		end := auditKey(q.To, 0)
		for k, v := c.Seek(start); k != nil && bytes.Compare(k, end) < 0 && len(out) < q.Limit; k, v = c.Next() {
			if after != nil && bytes.Compare(k, after) <= 0 {
				continue
			}
			var e AuditEntry
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("decode audit entry: %w", err)
			}
			e.Cursor = hex.EncodeToString(k)
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
