package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/spacesandbox/space/internal/errdefs"
)

func (b *Bolt) GetTemplate(_ context.Context, name string) (*Template, error) {
	t := new(Template)
	if err := b.get(bucketTemplates, name, t); err != nil {
		return nil, notFound(err, "template %q not found", name)
	}
	return t, nil
}

func (b *Bolt) ListTemplates(_ context.Context) ([]*Template, error) {
	return list[Template](b, bucketTemplates)
}

func (b *Bolt) PutTemplate(_ context.Context, t *Template) error {
	data, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("encode template %s: %w", t.Name, err)
	}
	return b.writes.do(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketTemplates).Put([]byte(t.Name), data)
	})
}

func (b *Bolt) DeleteTemplate(_ context.Context, name string) error {
	return b.writes.do(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketTemplates).Delete([]byte(name))
	})
}

func (b *Bolt) GetBuild(_ context.Context, id string) (*Build, error) {
	bd := new(Build)
	if err := b.get(bucketBuilds, id, bd); err != nil {
		return nil, notFound(err, "build %q not found", id)
	}
	return bd, nil
}

func (b *Bolt) ListBuilds(_ context.Context) ([]*Build, error) {
	return list[Build](b, bucketBuilds)
}

func (b *Bolt) PutBuild(_ context.Context, bd *Build, t *Template) error {
	bdata, err := json.Marshal(bd)
	if err != nil {
		return fmt.Errorf("encode build %s: %w", bd.ID, err)
	}
	var tdata []byte
	if t != nil {
		if tdata, err = json.Marshal(t); err != nil {
			return fmt.Errorf("encode template %s: %w", t.Name, err)
		}
	}
	return b.writes.do(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketBuilds).Put([]byte(bd.ID), bdata); err != nil {
			return err
		}
		if t != nil {
			return tx.Bucket(bucketTemplates).Put([]byte(t.Name), tdata)
		}
		return nil
	})
}

// notFound gives a missing record its message; other errors (a record
// that does not decode) stay what they are.
func notFound(err error, format string, args ...any) error {
	if errors.Is(err, errdefs.ErrNotFound) {
		return errdefs.New(errdefs.ErrNotFound, format, args...)
	}
	return err
}

// get decodes key of bucket into v; a missing key is ErrNotFound.
func (b *Bolt) get(bucket []byte, key string, v any) error {
	return b.db.View(func(tx *bolt.Tx) error {
		data := tx.Bucket(bucket).Get([]byte(key))
		if data == nil {
			return errdefs.ErrNotFound
		}
		if err := json.Unmarshal(data, v); err != nil {
			return fmt.Errorf("decode %s %s: %w", bucket, key, err)
		}
		return nil
	})
}

func list[T any](b *Bolt, bucket []byte) ([]*T, error) {
	var out []*T
	err := b.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(_, data []byte) error {
			v := new(T)
			if err := json.Unmarshal(data, v); err != nil {
				return err
			}
			out = append(out, v)
			return nil
		})
	})
	return out, err
}
