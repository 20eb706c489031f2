package client

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
)

// PauseSandbox checkpoints a sandbox to object storage and stops it; it
// returns once the checkpoint is complete.
func (c *Client) PauseSandbox(ctx context.Context, id string) (*Sandbox, error) {
	return c.PauseSandboxWith(ctx, id, PauseOptions{})
}

// PauseOptions say what a pause keeps.
type PauseOptions struct {
	// DiskOnly keeps the disk only: the processes end, and a resume boots
	// a fresh sandbox on that disk.
	DiskOnly bool
}

// PauseSandboxWith pauses a sandbox as opts say.
func (c *Client) PauseSandboxWith(ctx context.Context, id string, opts PauseOptions) (*Sandbox, error) {
	var in any
	if opts.DiskOnly {
		in = struct {
			KeepMemory bool `json:"keep_memory"`
		}{false}
	}
	var sb Sandbox
	if err := c.call(ctx, http.MethodPost, nil, in, &sb, "v1", "sandboxes", id, "pause"); err != nil {
		return nil, fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	return &sb, nil
}

// ResumeSandbox restores a paused sandbox; timeoutSeconds 0 means the
// daemon's default.
func (c *Client) ResumeSandbox(ctx context.Context, id string, timeoutSeconds int) (*Sandbox, error) {
	in := struct {
		TimeoutSeconds int `json:"timeout_seconds,omitempty"`
	}{timeoutSeconds}
	var sb Sandbox
	if err := c.call(ctx, http.MethodPost, nil, in, &sb, "v1", "sandboxes", id, "resume"); err != nil {
		return nil, fmt.Errorf("resume sandbox %s: %w", id, err)
	}
	return &sb, nil
}

// ForkSandbox makes count sandboxes that go on from a running one. When
// only some could be made it returns those and an error.
func (c *Client) ForkSandbox(ctx context.Context, id string, count int) ([]Sandbox, error) {
	in := struct {
		Count int `json:"count"`
	}{count}
	var out struct {
		Sandboxes []Sandbox `json:"sandboxes"`
		Error     *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := c.call(ctx, http.MethodPost, nil, in, &out, "v1", "sandboxes", id, "fork"); err != nil {
		return nil, fmt.Errorf("fork sandbox %s: %w", id, err)
	}
	if out.Error != nil {
		return out.Sandboxes, fmt.Errorf("fork sandbox %s: %d of %d made: %s", id, len(out.Sandboxes), count, out.Error.Message)
	}
	return out.Sandboxes, nil
}

// TakeSnapshot snapshots a running sandbox's disk.
func (c *Client) TakeSnapshot(ctx context.Context, id string) (*Snapshot, error) {
	return c.TakeSnapshotWith(ctx, id, SnapshotOptions{})
}

// SnapshotOptions say what a snapshot holds and what it is called.
type SnapshotOptions struct {
	// Memory takes memory and processes too: a sandbox made from the
	// snapshot goes on from them.
	Memory bool `json:"memory,omitempty"`
	// Name is name or name:tag; a later snapshot of the same name and
	// tag replaces this one.
	Name string `json:"name,omitempty"`
}

// TakeSnapshotWith snapshots a running sandbox as opts say; it runs on.
func (c *Client) TakeSnapshotWith(ctx context.Context, id string, opts SnapshotOptions) (*Snapshot, error) {
	var sn Snapshot
	if err := c.call(ctx, http.MethodPost, nil, opts, &sn, "v1", "sandboxes", id, "snapshots"); err != nil {
		return nil, fmt.Errorf("snapshot sandbox %s: %w", id, err)
	}
	return &sn, nil
}

// ListSnapshots lists snapshots, of one sandbox if sandboxID is set.
func (c *Client) ListSnapshots(ctx context.Context, sandboxID string) ([]Snapshot, error) {
	return c.ListSnapshotsNamed(ctx, sandboxID, "")
}

// ListSnapshotsNamed lists snapshots of one sandbox (if sandboxID is set)
// and of a name (if name is set: a name, name:tag or an ID), newest first.
func (c *Client) ListSnapshotsNamed(ctx context.Context, sandboxID, name string) ([]Snapshot, error) {
	q := url.Values{}
	if sandboxID != "" {
		q.Set("sandbox_id", sandboxID)
	}
	if name != "" {
		q.Set("name", name)
	}
	var out struct {
		Snapshots []Snapshot `json:"snapshots"`
	}
	if err := c.call(ctx, http.MethodGet, q, nil, &out, "v1", "snapshots"); err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	return out.Snapshots, nil
}

// DeleteSnapshot deletes a snapshot by ID, or every snapshot of a name
// (name:tag: of that tag).
func (c *Client) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	if err := c.call(ctx, http.MethodDelete, nil, nil, nil, "v1", "snapshots", snapshotID); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", snapshotID, err)
	}
	return nil
}

type keyBody struct {
	Key string `json:"key"`
}

// PutKey loads customer key id (32 bytes) into the daemon's memory.
func (c *Client) PutKey(ctx context.Context, id string, key []byte) error {
	if err := c.call(ctx, http.MethodPut, nil, keyBody{base64.StdEncoding.EncodeToString(key)}, nil, "v1", "keys", id); err != nil {
		return fmt.Errorf("put key %s: %w", id, err)
	}
	return nil
}

// RotateKey replaces customer key id by newKey and re-wraps every data key
// under it; it returns how many manifests were re-wrapped.
func (c *Client) RotateKey(ctx context.Context, id string, newKey []byte) (int, error) {
	var out struct {
		Rewrapped int `json:"rewrapped"`
	}
	if err := c.call(ctx, http.MethodPost, nil, keyBody{base64.StdEncoding.EncodeToString(newKey)}, &out, "v1", "keys", id, "rotate"); err != nil {
		return 0, fmt.Errorf("rotate key %s: %w", id, err)
	}
	return out.Rewrapped, nil
}

// DeleteKey makes the daemon forget customer key id.
func (c *Client) DeleteKey(ctx context.Context, id string) error {
	if err := c.call(ctx, http.MethodDelete, nil, nil, nil, "v1", "keys", id); err != nil {
		return fmt.Errorf("delete key %s: %w", id, err)
	}
	return nil
}
