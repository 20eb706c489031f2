package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/spacesandbox/space/client/apitypes"
)

// VolumeMount is one volume mounted into a sandbox. At most one sandbox at
// a time mounts a volume read-write (running or paused), beside any number
// read-only.
type VolumeMount = apitypes.VolumeMount

// Volume is a named, size-limited directory on one node's disk that
// outlives the sandboxes mounting it.
type Volume = apitypes.Volume

// VolumeHolder is a sandbox mounting a volume.
type VolumeHolder = apitypes.VolumeHolder

// VolumeEntry is a file or directory in a volume.
type VolumeEntry = apitypes.VolumeEntry

// VolumeBackup is a volume's files at one instant, in the object store.
type VolumeBackup = apitypes.VolumeBackup

// CreateVolumeRequest is the body of POST /v1/volumes.
type CreateVolumeRequest = apitypes.CreateVolumeJSONBody

// CreateVolume makes a volume on the daemon's node.
func (c *Client) CreateVolume(ctx context.Context, req CreateVolumeRequest) (*Volume, error) {
	var v Volume
	if err := c.call(ctx, http.MethodPost, nil, req, &v, "v1", "volumes"); err != nil {
		return nil, fmt.Errorf("create volume %s: %w", req.Name, err)
	}
	return &v, nil
}

// ListVolumes lists the node's volumes.
func (c *Client) ListVolumes(ctx context.Context) ([]Volume, error) {
	var out struct {
		Volumes []Volume `json:"volumes"`
	}
	if err := c.call(ctx, http.MethodGet, nil, nil, &out, "v1", "volumes"); err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	return out.Volumes, nil
}

// GetVolume returns a volume by ID or name.
func (c *Client) GetVolume(ctx context.Context, ref string) (*Volume, error) {
	var v Volume
	if err := c.call(ctx, http.MethodGet, nil, nil, &v, "v1", "volumes", ref); err != nil {
		return nil, fmt.Errorf("get volume %s: %w", ref, err)
	}
	return &v, nil
}

// DeleteVolume deletes a volume and its files; it fails (409) while a
// sandbox mounts it.
func (c *Client) DeleteVolume(ctx context.Context, ref string) error {
	if err := c.call(ctx, http.MethodDelete, nil, nil, nil, "v1", "volumes", ref); err != nil {
		return fmt.Errorf("delete volume %s: %w", ref, err)
	}
	return nil
}

// ReadVolumeFile streams a file out of a volume; the caller closes it.
func (c *Client) ReadVolumeFile(ctx context.Context, ref, path string) (io.ReadCloser, error) {
	u, err := c.endpoint(pathQuery(path), "v1", "volumes", ref, "files")
	if err == nil {
		var req *http.Request
		if req, err = c.newRequest(ctx, http.MethodGet, u, nil); err == nil {
			var resp *http.Response
			if resp, err = c.send(req); err == nil {
				return resp.Body, nil
			}
		}
	}
	return nil, fmt.Errorf("read %s from volume %s: %w", path, ref, err)
}

// WriteVolumeFile writes r to a file of a volume (whole or not at all);
// its directory must exist. mode 0 means 0644.
func (c *Client) WriteVolumeFile(ctx context.Context, ref, path string, r io.Reader, mode uint32) (*VolumeEntry, error) {
	q := pathQuery(path)
	if mode != 0 {
		q.Set("mode", strconv.FormatUint(uint64(mode), 8))
	}
	u, err := c.endpoint(q, "v1", "volumes", ref, "files")
	if err != nil {
		return nil, fmt.Errorf("write %s to volume %s: %w", path, ref, err)
	}
	req, err := c.newRequest(ctx, http.MethodPut, u, io.NopCloser(r))
	if err != nil {
		return nil, fmt.Errorf("write %s to volume %s: %w", path, ref, err)
	}
	if n, ok := knownLength(r); ok {
		req.ContentLength = n
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.send(req)
	if err != nil {
		return nil, fmt.Errorf("write %s to volume %s: %w", path, ref, err)
	}
	defer resp.Body.Close()
	var e VolumeEntry
	if err := decodeJSON(resp, &e); err != nil {
		return nil, fmt.Errorf("write %s to volume %s: %w", path, ref, err)
	}
	return &e, nil
}

// ListVolumeFiles lists a directory of a volume, depth levels down (0: 1).
func (c *Client) ListVolumeFiles(ctx context.Context, ref, path string, depth int) ([]VolumeEntry, error) {
	q := pathQuery(path)
	if depth > 0 {
		q.Set("depth", strconv.Itoa(depth))
	}
	var out struct {
		Entries []VolumeEntry `json:"entries"`
	}
	if err := c.call(ctx, http.MethodGet, q, nil, &out, "v1", "volumes", ref, "files", "list"); err != nil {
		return nil, fmt.Errorf("list %s of volume %s: %w", path, ref, err)
	}
	return out.Entries, nil
}

// StatVolumeFile describes a file or directory of a volume.
func (c *Client) StatVolumeFile(ctx context.Context, ref, path string) (*VolumeEntry, error) {
	var e VolumeEntry
	if err := c.call(ctx, http.MethodGet, pathQuery(path), nil, &e, "v1", "volumes", ref, "files", "stat"); err != nil {
		return nil, fmt.Errorf("stat %s of volume %s: %w", path, ref, err)
	}
	return &e, nil
}

// MakeVolumeDir makes a directory in a volume (with parents: the missing
// ones above it too).
func (c *Client) MakeVolumeDir(ctx context.Context, ref, path string, parents bool) (*VolumeEntry, error) {
	in := struct {
		Path    string `json:"path"`
		Parents bool   `json:"parents,omitempty"`
	}{path, parents}
	var e VolumeEntry
	if err := c.call(ctx, http.MethodPost, nil, in, &e, "v1", "volumes", ref, "files", "mkdir"); err != nil {
		return nil, fmt.Errorf("mkdir %s in volume %s: %w", path, ref, err)
	}
	return &e, nil
}

// RemoveVolumeFile removes a file or a directory tree of a volume.
func (c *Client) RemoveVolumeFile(ctx context.Context, ref, path string) error {
	if err := c.call(ctx, http.MethodDelete, pathQuery(path), nil, nil, "v1", "volumes", ref, "files"); err != nil {
		return fmt.Errorf("remove %s from volume %s: %w", path, ref, err)
	}
	return nil
}

// BackupVolume backs a volume up to the object store.
func (c *Client) BackupVolume(ctx context.Context, ref string) (*VolumeBackup, error) {
	var b VolumeBackup
	if err := c.call(ctx, http.MethodPost, nil, nil, &b, "v1", "volumes", ref, "backups"); err != nil {
		return nil, fmt.Errorf("back up volume %s: %w", ref, err)
	}
	return &b, nil
}

// ListVolumeBackups lists the backups in the object store, of volumes of
// one name or ID if volume is set, newest first.
func (c *Client) ListVolumeBackups(ctx context.Context, volume string) ([]VolumeBackup, error) {
	var q url.Values
	if volume != "" {
		q = url.Values{"volume": {volume}}
	}
	var out struct {
		Backups []VolumeBackup `json:"backups"`
	}
	if err := c.call(ctx, http.MethodGet, q, nil, &out, "v1", "volume-backups"); err != nil {
		return nil, fmt.Errorf("list volume backups: %w", err)
	}
	return out.Backups, nil
}

// DeleteVolumeBackup deletes a backup.
func (c *Client) DeleteVolumeBackup(ctx context.Context, id string) error {
	if err := c.call(ctx, http.MethodDelete, nil, nil, nil, "v1", "volume-backups", id); err != nil {
		return fmt.Errorf("delete volume backup %s: %w", id, err)
	}
	return nil
}
