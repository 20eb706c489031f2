package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/spacesandbox/space/internal/errdefs"
)

var (
	bucketSandboxes = []byte("sandboxes")
	bucketSlots     = []byte("slots")
	bucketTemplates = []byte("templates")
	bucketBuilds    = []byte("builds")
	// bucketVolumes holds volume records by ID, bucketVolumeNames the
	// name -> ID index.
	bucketVolumes     = []byte("volumes")
	bucketVolumeNames = []byte("volume_names")
	bucketTenants     = []byte("tenants")
	bucketAPIKeys     = []byte("api_keys")
	bucketAudit       = []byte("audit")
	// bucketWebhooks holds webhook registrations by ID, bucketWebhookQueue
	// the deliveries waiting to be made, by sequence number.
	bucketWebhooks     = []byte("webhooks")
	bucketWebhookQueue = []byte("webhook_queue")
)

// Bolt is the embedded store, one bbolt file. bbolt was chosen over SQLite
// because it is pure Go (spaced stays a static binary), has one writer at a
// time (slot allocation cannot race) and fsyncs every commit.
type Bolt struct {
	db     *bolt.DB
	writes *groupCommit
}

// OpenBolt opens (creating if needed) the store file at path, mode 0600.
func OpenBolt(path string) (*Bolt, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketSandboxes, bucketSlots, bucketTemplates, bucketBuilds, bucketVolumes, bucketVolumeNames, bucketTenants, bucketAPIKeys, bucketAudit, bucketWebhooks, bucketWebhookQueue} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init store: %w", err)
	}
	return &Bolt{db: db, writes: &groupCommit{db: db}}, nil
}

func (b *Bolt) Close() error { return b.db.Close() }

func slotKey(slot int) []byte {
	k := make([]byte, 4)
	binary.BigEndian.PutUint32(k, uint32(slot))
	return k
}

// Writes go through groupCommit: concurrent writers (a burst of creates)
// share one transaction and one fsync instead of queueing for one each.
// A write function may run more than once, so each is idempotent.

func (b *Bolt) CreateSandbox(_ context.Context, s *Sandbox, maxSlots int, avoid func(int) bool) error {
	return b.writes.do(func(tx *bolt.Tx) error {
		sb := tx.Bucket(bucketSandboxes)
		if sb.Get([]byte(s.ID)) != nil {
			return errdefs.New(errdefs.ErrAlreadyExists, "sandbox %q already exists", s.ID)
		}
		slot, err := freeSlot(tx.Bucket(bucketSlots), maxSlots, avoid)
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketSlots).Put(slotKey(slot), []byte(s.ID)); err != nil {
			return err
		}
		s.Slot = slot
		return putSandbox(sb, s)
	})
}

func (b *Bolt) ReviveSandbox(_ context.Context, s *Sandbox, from Expect, maxSlots int, avoid func(int) bool) error {
	if !s.Live() {
		return fmt.Errorf("revive sandbox %s: state %s is not live", s.ID, s.State)
	}
	return b.writes.do(func(tx *bolt.Tx) error {
		sb := tx.Bucket(bucketSandboxes)
		old, err := getSandbox(sb, s.ID)
		if err != nil {
			return err
		}
		if old.Live() {
			return errdefs.New(errdefs.ErrFailedPrecondition, "sandbox %q is %s", s.ID, old.State)
		}
		if err := from.check(old); err != nil {
			return err
		}
		slot, err := freeSlot(tx.Bucket(bucketSlots), maxSlots, avoid)
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketSlots).Put(slotKey(slot), []byte(s.ID)); err != nil {
			return err
		}
		s.Slot = slot
		return putSandbox(sb, s)
	})
}

// getSandbox decodes the stored record id (ErrNotFound when none).
func getSandbox(sb *bolt.Bucket, id string) (*Sandbox, error) {
	data := sb.Get([]byte(id))
	if data == nil {
		return nil, errdefs.New(errdefs.ErrNotFound, "sandbox %q not found", id)
	}
	s := new(Sandbox)
	if err := json.Unmarshal(data, s); err != nil {
		return nil, fmt.Errorf("decode sandbox %s: %w", id, err)
	}
	return s, nil
}

// freeSlot returns the lowest slot not in use and not avoided. Slots are
// few (one per live sandbox) so a scan of the sorted keys is cheap.
func freeSlot(slots *bolt.Bucket, maxSlots int, avoid func(int) bool) (int, error) {
	var used []int
	c := slots.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		used = append(used, int(binary.BigEndian.Uint32(k)))
	}
	return lowestFreeSlot(used, maxSlots, avoid)
}

// lowestFreeSlot is the lowest slot below maxSlots not in used (sorted)
// and not avoided.
func lowestFreeSlot(used []int, maxSlots int, avoid func(int) bool) (int, error) {
	want := 0
	skip := func() {
		for avoid != nil && want < maxSlots && avoid(want) {
			want++
		}
	}
	skip()
	for _, u := range used {
		if u > want {
			break
		}
		if u == want {
			want++
			skip()
		}
	}
	if want >= maxSlots {
		return 0, errdefs.New(errdefs.ErrResourceExhausted, "no free sandbox network slot (%d in use)", maxSlots)
	}
	return want, nil
}

func putSandbox(sb *bolt.Bucket, s *Sandbox) error {
	data, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode sandbox %s: %w", s.ID, err)
	}
	return sb.Put([]byte(s.ID), data)
}

func (b *Bolt) UpdateSandbox(_ context.Context, s *Sandbox, from Expect) error {
	rec := *s
	err := b.writes.do(func(tx *bolt.Tx) error {
		rec = *s
		sb := tx.Bucket(bucketSandboxes)
		old, err := getSandbox(sb, rec.ID)
		if err != nil {
			return err
		}
		if err := from.check(old); err != nil {
			return err
		}
		if !rec.Live() && rec.Slot >= 0 {
			if err := releaseSlot(tx.Bucket(bucketSlots), rec.Slot, rec.ID); err != nil {
				return err
			}
			rec.Slot = -1
		}
		return putSandbox(sb, &rec)
	})
	if err == nil {
		s.Slot = rec.Slot
	}
	return err
}

func releaseSlot(slots *bolt.Bucket, slot int, id string) error {
	k := slotKey(slot)
	if owner := slots.Get(k); owner != nil && string(owner) == id {
		return slots.Delete(k)
	}
	return nil
}

func (b *Bolt) GetSandbox(_ context.Context, id string) (*Sandbox, error) {
	var s *Sandbox
	err := b.db.View(func(tx *bolt.Tx) error {
		data := tx.Bucket(bucketSandboxes).Get([]byte(id))
		if data == nil {
			return errdefs.New(errdefs.ErrNotFound, "sandbox %q not found", id)
		}
		s = new(Sandbox)
		return json.Unmarshal(data, s)
	})
	return s, err
}

func (b *Bolt) ListSandboxes(_ context.Context) ([]*Sandbox, error) {
	var out []*Sandbox
	err := b.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSandboxes).ForEach(func(_, v []byte) error {
			s := new(Sandbox)
			if err := json.Unmarshal(v, s); err != nil {
				return err
			}
			out = append(out, s)
			return nil
		})
	})
	return out, err
}

// The queries below filter every record: one node's catalog is small
// enough, and bbolt has no secondary index to keep in step.

func (b *Bolt) LiveSandboxes(_ context.Context) ([]*Sandbox, error) {
	return b.filter(func(s *Sandbox) bool { return s.Live() })
}

func (b *Bolt) StaleSandboxes(_ context.Context, ended, paused time.Time) ([]*Sandbox, error) {
	return b.filter(func(s *Sandbox) bool { return s.stale(ended, paused) })
}

// stale reports whether s is a record a prune may forget (StaleSandboxes).
func (s *Sandbox) stale(ended, paused time.Time) bool {
	return !s.Live() && !s.EndedAt.IsZero() && s.EndedAt.Before(ended) ||
		s.State == StatePaused && (s.PausedAt.IsZero() || s.PausedAt.Before(paused))
}

func (b *Bolt) HeldImages(_ context.Context) ([]string, error) {
	recs, err := b.filter(func(s *Sandbox) bool { return s.Live() || s.State == StatePaused })
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range recs {
		out = append(out, r.Image)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func (b *Bolt) CountOnImages(_ context.Context, images []string) (int, error) {
	recs, err := b.filter(func(s *Sandbox) bool {
		return slices.Contains(images, s.Image) && (s.Live() && s.Build == "" || s.State == StatePaused)
	})
	return len(recs), err
}

func (b *Bolt) PausedUsage(_ context.Context, tenants []string) (int, int64, error) {
	recs, err := b.filter(func(s *Sandbox) bool { return s.State == StatePaused && slices.Contains(tenants, s.Tenant) })
	var bytes int64
	for _, r := range recs {
		if r.Checkpoint != nil {
			bytes += r.Checkpoint.Bytes
		}
	}
	return len(recs), bytes, err
}

func (b *Bolt) VolumeHolders(_ context.Context) ([]*Sandbox, error) {
	return b.filter((*Sandbox).Holds)
}

// filter answers the records keep keeps.
func (b *Bolt) filter(keep func(*Sandbox) bool) ([]*Sandbox, error) {
	all, err := b.ListSandboxes(context.Background())
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(s *Sandbox) bool { return !keep(s) }), nil
}

// QuerySandboxes filters and sorts every record.
func (b *Bolt) QuerySandboxes(ctx context.Context, q Query) ([]*Sandbox, *Cursor, error) {
	all, err := b.ListSandboxes(ctx)
	if err != nil {
		return nil, nil, err
	}
	out := all[:0]
	for _, s := range all {
		if q.matches(s) && q.After.before(s.CreatedAt, s.ID) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *Sandbox) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
		last := out[len(out)-1]
		return out, &Cursor{CreatedAt: last.CreatedAt, ID: last.ID}, nil
	}
	return out, nil, nil
}

func (b *Bolt) DeleteSandbox(_ context.Context, id string, from Expect) error {
	return b.writes.do(func(tx *bolt.Tx) error {
		sb := tx.Bucket(bucketSandboxes)
		s, err := getSandbox(sb, id)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := from.check(s); err != nil {
			return err
		}
		if s.Slot >= 0 {
			if err := releaseSlot(tx.Bucket(bucketSlots), s.Slot, id); err != nil {
				return err
			}
		}
		return sb.Delete([]byte(id))
	})
}
