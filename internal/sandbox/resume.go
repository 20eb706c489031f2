package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spacesandbox/space/internal/admission"
	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// Resume: a paused sandbox restored from its latest checkpoint (see
// checkpoint.go for how a pause makes one).

// Resume restores a paused sandbox from its latest checkpoint and makes it
// expire timeout from now (0: the default). A sandbox this node has no
// record of is looked for in object storage: it was paused by another
// spaced sharing the store. Resuming a running sandbox returns it.
func (c *Checkpoints) Resume(ctx context.Context, id string, timeout time.Duration) (*Sandbox, error) {
	if _, err := c.checkpointer(); err != nil {
		return nil, err
	}
	if err := c.svc.refuseIfDraining(); err != nil {
		return nil, err
	}
	if timeout == 0 {
		timeout = c.svc.cfg.DefaultTimeout
	}
	if err := c.svc.checkTimeout(timeout); err != nil {
		return nil, err
	}
	// One resume or delete of a paused sandbox at a time; a second resume
	// waits and then finds it running.
	unlock := c.pausedLocks.Lock(id)
	defer unlock()
	if e, ok := c.live.entry(id); ok {
		e.mu.Lock()
		defer e.mu.Unlock()
		return fromRecord(e.rec), nil
	}
	rec, err := c.svc.store.GetSandbox(ctx, id)
	known := err == nil
	switch {
	case err != nil && !errors.Is(err, errdefs.ErrNotFound):
		return nil, err
	case known && rec.State != store.StatePaused:
		return nil, errdefs.New(errdefs.ErrFailedPrecondition, "sandbox %q is %s, not paused", id, rec.State)
	}
	var ckptID string
	var use tenant.Usage
	var need admission.Need
	if known {
		if rec.Checkpoint == nil {
			return nil, errdefs.New(errdefs.ErrFailedPrecondition, "sandbox %q is paused but has no checkpoint", id)
		}
		ckptID, use = rec.Checkpoint.ID, usageOf(rec.CPU, rec.MemoryMB)
		need = c.resumeNeed(rec.MemoryMB, rec.Checkpoint.Bytes, rec.Checkpoint.DiskOnly)
	} else {
		m, err := c.latestArtifact(ctx, id, "checkpoint")
		if err != nil {
			return nil, err
		}
		if !tenant.FromContext(ctx).Owns(m.Meta[metaTenant]) {
			return nil, c.noArtifact(id)
		}
		ckptID, use = m.ID, usageOf(m.Limits.CPU, m.Limits.MemoryMB)
		need = c.resumeNeed(m.Limits.MemoryMB, m.Bytes, !hasMemory(m))
	}
	q, err := c.live.reserve(ctx, use)
	if err != nil {
		return nil, err
	}
	defer c.live.release(q)
	// A resume starts a sandbox: admitted before the download, so a node
	// at a budget refuses it at once (and the sandbox stays paused).
	r, err := c.admits.admit(ctx, need, "resume")
	if err != nil {
		return nil, err
	}
	return c.restore(ctx, id, ckptID, rec, timeout, r, q) // rec nil when unknown
}

// resumeNeed is what resuming a checkpoint of stored bytes takes: its
// memory image is restored into memory; a disk-only one boots afresh on
// its layer.
func (c *Checkpoints) resumeNeed(memoryMB int, bytes int64, diskOnly bool) admission.Need {
	if diskOnly {
		return c.admits.need(memoryMB, 0, bytes, false)
	}
	return c.admits.need(memoryMB, bytes, 0, false)
}

// latestArtifact is the newest complete checkpoint or snapshot of sandbox
// id (from the catalog's index by sandbox in a cluster).
func (c *Checkpoints) latestArtifact(ctx context.Context, id, kind string) (*checkpoint.Manifest, error) {
	all, err := c.svc.cfg.Checkpoints.ListOf(ctx, id)
	if err != nil {
		return nil, err
	}
	var best *checkpoint.Manifest
	for _, m := range all {
		if m.SandboxID == id && m.Kind == kind && (best == nil || m.CreatedAt.After(best.CreatedAt)) {
			best = m
		}
	}
	if best == nil {
		return nil, c.noArtifact(id)
	}
	return best, nil
}

// noArtifact is the answer for a sandbox with no artifact here
// (or one of another tenant: the same answer).
func (c *Checkpoints) noArtifact(id string) error {
	return errdefs.New(errdefs.ErrNotFound, "sandbox %q not found", id)
}

// restore brings sandbox id back from checkpoint ckptID. paused is its
// record as read (nil when the catalog has none: the record is made from
// the checkpoint); the record is revived only if it is still that, so a
// kill or another resume meanwhile (on any node) wins and this resume
// fails having changed nothing.
func (c *Checkpoints) restore(ctx context.Context, id, ckptID string, paused *store.Sandbox, timeout time.Duration, r *admission.Reservation, q *reservation) (_ *Sandbox, err error) {
	known := paused != nil
	start := time.Now()
	defer func() {
		if err != nil {
			r.Cancel()
		}
	}()
	log := c.svc.log.With("sandbox", id, "checkpoint", ckptID)
	ctx = context.WithoutCancel(ctx)
	dir, err := c.imageDir(ckptID + "-restore")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	m, secret, err := c.svc.cfg.Checkpoints.Load(ctx, ckptID, dir)
	if err != nil {
		// A kill (on any node) deletes the checkpoint once the record
		// says killed: say that, not that the checkpoint is gone.
		if known {
			if cur, gerr := c.svc.store.GetSandbox(ctx, id); gerr == nil && store.Was(cur) != store.Was(paused) {
				return nil, errdefs.New(errdefs.ErrFailedPrecondition, "sandbox %q is %s, not paused: it changed while it was being resumed", id, cur.State)
			}
		}
		return nil, err
	}
	tLoad := time.Now()
	var st sealedState
	if err := json.Unmarshal(secret, &st); err != nil {
		return nil, fmt.Errorf("decode sealed state of %s: %w", ckptID, err)
	}
	rootfs, err := c.booter.checkRestorable(m)
	if err != nil {
		return nil, err
	}

	var rec store.Sandbox
	if known {
		rec = *paused
	} else {
		rec = store.Sandbox{
			ID: id, Tenant: m.Meta[metaTenant], Template: m.Template, Image: m.Meta[metaTemplateImage], CreatedAt: m.CreatedAt,
			CPU: m.Limits.CPU, MemoryMB: m.Limits.MemoryMB, DiskMB: m.Limits.DiskMB, MaxProcs: m.Limits.MaxProcesses,
			AccessToken: st.AccessToken, Env: st.Env, Metadata: st.Metadata,
			OpenAccess: st.OpenAccess, AutoPause: st.AutoPause, AutoResume: st.AutoResume, KeyID: m.KeyID,
			AutoPauseDiskOnly: st.AutoPauseDiskOnly, Secrets: st.Secrets,
			Checkpoint: &store.CheckpointRef{ID: m.ID, CreatedAt: m.CreatedAt, Bytes: m.Bytes, DiskOnly: !hasMemory(m)},
		}
		// Another node paused it: its volumes are this node's volumes of
		// the same names (restored here from their backups).
		if rec.Volumes, err = manifestVolumes(m); err != nil {
			return nil, err
		}
		if len(m.Network) > 0 && string(m.Network) != "null" {
			if err := json.Unmarshal(m.Network, &rec.Network); err != nil {
				return nil, fmt.Errorf("decode network policy of %s: %w", ckptID, err)
			}
		}
	}
	rec.State, rec.Reason = store.StateResuming, ""
	if known {
		err = c.svc.store.ReviveSandbox(ctx, &rec, store.Was(paused), c.svc.cfg.Network.Slots(), c.slots.avoid)
	} else {
		// This node's record holds the mounts' claims from here on.
		release, cerr := c.booter.claimVolumes(ctx, &rec)
		if cerr != nil {
			return nil, cerr
		}
		rec.Slot = -1
		err = c.svc.store.CreateSandbox(ctx, &rec, c.svc.cfg.Network.Slots(), c.slots.avoid)
		release()
	}
	if err != nil {
		return nil, fmt.Errorf("record resuming sandbox: %w", err)
	}
	resuming := rec
	var undo cleanup
	defer func() {
		if err != nil {
			undo.run(log)
			c.svc.metrics.checkpointFailed("resume")
		}
	}()
	undo.add("record paused again", func() error {
		if !known {
			return c.svc.store.DeleteSandbox(context.Background(), id, store.Was(&resuming))
		}
		// Its checkpoint is the one it had: nothing else could change
		// the record while it was resuming here.
		back := resuming
		back.State = store.StatePaused
		return c.svc.store.UpdateSandbox(context.Background(), &back, store.Was(&resuming))
	})
	ep, err := c.booter.attachAgain(id, rec.Slot, log, &undo)
	if err != nil {
		return nil, err
	}
	limits := runtime.Limits{CPUs: m.Limits.CPU, MemoryMB: m.Limits.MemoryMB, DiskMB: m.Limits.DiskMB, MaxProcs: m.Limits.MaxProcesses}
	var agent *AgentConn
	if hasMemory(m) {
		// Its own token and env again; the sandbox has a new address, so
		// its resolver is pointed at its gateway.
		agent, err = c.booter.startRestored(ctx, restoredStart{
			id: rec.ID, rootfs: rootfs, dir: dir, ep: ep, limits: limits, volumes: rec.Volumes,
			held: st.AccessToken, token: st.AccessToken, env: rec.Env,
		}, &undo)
		if err != nil {
			return nil, err
		}
	} else {
		// Only the disk was kept: a fresh sandbox boots on it.
		agent, err = c.booter.bootOnDisk(ctx, &rec, st.AccessToken, rootfs, ep, limits, dir, &undo)
		if err != nil {
			return nil, err
		}
	}
	now := time.Now().UTC()
	rec.State, rec.ExpiresAt, rec.PausedAt = store.StateRunning, now.Add(timeout), time.Time{}
	if err := c.svc.store.UpdateSandbox(ctx, &rec, store.Was(&resuming)); err != nil {
		agent.Close()
		return nil, fmt.Errorf("record resumed sandbox: %w", err)
	}
	c.live.add(newLiveEntry(&rec, agent, ep), q, q.useOrZero())
	r.Done(ctx, id)
	c.svc.metrics.restored(tLoad.Sub(start), time.Since(tLoad))
	log.Info("sandbox resumed", "memory", hasMemory(m), "download_ms", tLoad.Sub(start).Milliseconds(), "restore_ms", time.Since(tLoad).Milliseconds())
	return fromRecord(&rec), nil
}
