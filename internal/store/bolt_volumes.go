package store

import (
	"context"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Volumes are kept by ID, with a name index (name -> ID) in its own bucket
// so a name is taken in the same transaction that writes the record.

func (b *Bolt) CreateVolume(_ context.Context, v *Volume) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode volume %s: %w", v.ID, err)
	}
	return b.writes.do(func(tx *bolt.Tx) error {
		names := tx.Bucket(bucketVolumeNames)
		// A write may run twice (group commit): its own name is no clash.
		if id := names.Get([]byte(v.Name)); id != nil && string(id) != v.ID {
			return errdefs.New(errdefs.ErrAlreadyExists, "a volume named %q already exists", v.Name)
		}
		if err := names.Put([]byte(v.Name), []byte(v.ID)); err != nil {
			return err
		}
		return tx.Bucket(bucketVolumes).Put([]byte(v.ID), data)
	})
}

func (b *Bolt) UpdateVolume(_ context.Context, v *Volume) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode volume %s: %w", v.ID, err)
	}
	return b.writes.do(func(tx *bolt.Tx) error {
		vb := tx.Bucket(bucketVolumes)
		if vb.Get([]byte(v.ID)) == nil {
			return errdefs.New(errdefs.ErrNotFound, "volume %q not found", v.ID)
		}
		return vb.Put([]byte(v.ID), data)
	})
}

func (b *Bolt) GetVolume(_ context.Context, id string) (*Volume, error) {
	v := new(Volume)
	if err := b.get(bucketVolumes, id, v); err != nil {
		return nil, notFound(err, "volume %q not found", id)
	}
	return v, nil
}

func (b *Bolt) VolumeByName(ctx context.Context, name string) (*Volume, error) {
	var id []byte
	b.db.View(func(tx *bolt.Tx) error {
		if got := tx.Bucket(bucketVolumeNames).Get([]byte(name)); got != nil {
			id = append(id, got...)
		}
		return nil
	})
	if id == nil {
		return nil, errdefs.New(errdefs.ErrNotFound, "volume %q not found", name)
	}
	return b.GetVolume(ctx, string(id))
}

func (b *Bolt) ListVolumes(_ context.Context) ([]*Volume, error) {
	return list[Volume](b, bucketVolumes)
}

func (b *Bolt) DeleteVolume(_ context.Context, id string) error {
	return b.writes.do(func(tx *bolt.Tx) error {
		vb := tx.Bucket(bucketVolumes)
		data := vb.Get([]byte(id))
		if data == nil {
			return nil
		}
		var v Volume
		if err := json.Unmarshal(data, &v); err != nil {
			return fmt.Errorf("decode volume %s: %w", id, err)
		}
		names := tx.Bucket(bucketVolumeNames)
		if got := names.Get([]byte(v.Name)); got != nil && string(got) == id {
			if err := names.Delete([]byte(v.Name)); err != nil {
				return err
			}
		}
		return vb.Delete([]byte(id))
	})
}
