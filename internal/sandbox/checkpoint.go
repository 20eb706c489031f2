package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/spacesandbox/space/api/agent/v1"
	"github.com/spacesandbox/space/internal/admission"
	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/keylock"
	"github.com/spacesandbox/space/internal/network"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// Pause, resume and fork. A pause checkpoints a frozen sandbox (memory,
// processes and writable layer; or, disk-only, the writable layer alone),
// uploads the image to object storage with its manifest last, and only
// once the checkpoint is complete records the sandbox paused and tears it
// down: a failure at any earlier step thaws the sandbox and it goes on
// running. A resume restores the latest complete checkpoint, on this node
// or on any spaced sharing the object store; a disk-only one boots a fresh
// sandbox on the saved disk.

// sealedState is the part of a sandbox a checkpoint needs that must not be
// stored in plain: it goes into the manifest encrypted under the same key
// as the artifacts.
type sealedState struct {
	AccessToken string            `json:"access_token"`
	Env         map[string]string `json:"env,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	OpenAccess  bool              `json:"open_access,omitempty"`
	AutoPause   bool              `json:"auto_pause,omitempty"`
	AutoResume  bool              `json:"auto_resume,omitempty"`
	// AutoPauseDiskOnly: the record's flag, for a resume on another node.
	AutoPauseDiskOnly bool `json:"auto_pause_disk_only,omitempty"`
	// Secrets maps placeholders to secret names (never values).
	Secrets map[string]string `json:"secrets,omitempty"`
}

// metaTemplateImage is the manifest's image.
const metaTemplateImage = checkpoint.MetaImage

// metaContents is the manifest's Meta key that says what a checkpoint or
// snapshot holds: contentsMemory (memory, processes and disk) or
// contentsDisk (the writable layer only). Without it a checkpoint holds
// memory and a snapshot the disk (what they held before the key existed).
const (
	metaContents   = "contents"
	contentsMemory = "memory"
	contentsDisk   = "disk"
)

// hasMemory says whether the image of m holds memory and processes (a
// runsc checkpoint) rather than the writable layer alone.
func hasMemory(m *checkpoint.Manifest) bool {
	switch m.Meta[metaContents] {
	case contentsMemory:
		return true
	case contentsDisk:
		return false
	}
	return m.Kind == checkpoint.KindCheckpoint
}

// agentCheckTimeout bounds the check that a sandbox's agent answers before
// a pause that needs it.
const agentCheckTimeout = 3 * time.Second

// PauseOptions say what a pause keeps.
type PauseOptions struct {
	// DiskOnly keeps the writable layer only: the processes end, and a
	// resume boots a fresh sandbox on the saved disk.
	DiskOnly bool
	// RequireHealthyAgent refuses the pause (the sandbox runs on) when
	// the sandbox's agent does not answer (E2B's requireHealthyGuest, and
	// its rule for a pause without memory).
	RequireHealthyAgent bool
}

// Checkpoints pauses running sandboxes into object storage, resumes paused
// ones (on this node, or on any spaced sharing the store), forks running
// ones, and ends paused ones: a kill's, a retention's or, at a timeout,
// an auto-pause's. It holds the lock of each paused sandbox that its
// resume and its delete take; everything else (the live sandboxes, boots,
// quotas, admission, the network) it reaches through the service, which
// makes it and hands it out (Service.Checkpoints).
type Checkpoints struct {
	svc *Service
	// pausedLocks serialise resume and delete of paused sandboxes.
	pausedLocks keylock.Map
}

func (c *Checkpoints) checkpointer() (runtime.Checkpointer, error) {
	cp, ok := c.svc.rt.(runtime.Checkpointer)
	if !ok || c.svc.cfg.Checkpoints == nil {
		return nil, errdefs.New(errdefs.ErrFailedPrecondition, "this node cannot checkpoint sandboxes (runtime %s)", c.svc.rt.Name())
	}
	return cp, nil
}

// newArtifactID names a checkpoint or snapshot of sandbox id.
func newArtifactID(id, kind string) string {
	return id + "-" + kind + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// imageDir is a fresh local directory for one image; the caller removes it.
func (c *Checkpoints) imageDir(name string) (string, error) {
	dir := filepath.Join(c.svc.cfg.ImagesDir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("image dir: %w", err)
	}
	return dir, nil
}

// Pause checkpoints a running sandbox to object storage and stops it.
func (c *Checkpoints) Pause(ctx context.Context, id string, opts PauseOptions) (*Sandbox, error) {
	e, ok := c.svc.entry(id)
	if !ok {
		rec, err := c.svc.store.GetSandbox(ctx, id)
		if err != nil {
			return nil, err
		}
		if rec.State == store.StatePaused {
			return fromRecord(rec), nil // pausing twice is not an error
		}
		return nil, errdefs.New(errdefs.ErrNotFound, "sandbox %q is %s", id, rec.State)
	}
	release, err := c.svc.reserveStored(ctx, tenant.Usage{PausedSandboxes: 1, PausedMB: c.svc.storedEstimate(id, !opts.DiskOnly)})
	if err != nil {
		return nil, err
	}
	// The paused lock first (the order Resume takes them in): a resume
	// waits until the pause has torn the sandbox down, not just recorded it.
	unlock := c.pausedLocks.Lock(id)
	e.mu.Lock()
	if e.rec.State != store.StateRunning {
		state := e.rec.State
		e.mu.Unlock()
		unlock()
		release()
		return nil, errdefs.New(errdefs.ErrNotFound, "sandbox %q is %s", id, state)
	}
	teardown, err := c.pauseLocked(ctx, e, "paused by request", opts)
	paused := fromRecord(e.rec)
	e.mu.Unlock()
	// Recorded paused (or failed): the record counts now, not the
	// reservation.
	release()
	if err != nil {
		unlock()
		return nil, err
	}
	// Paused is durable once recorded: the caller need not wait for the
	// old sandbox to go (tens to hundreds of milliseconds). A resume waits
	// for it on the paused lock, but not for the cleanup after it.
	if c.svc.cfg.TeardownBeforeAnswer {
		cleanup := teardown()
		unlock()
		cleanup()
		return paused, nil
	}
	c.svc.background.Go(func() {
		cleanup := teardown()
		unlock()
		cleanup()
	})
	return paused, nil
}

// pauseLocked pauses e, whose lock the caller holds, and returns the
// teardown of the paused sandbox, which the caller runs (at once or in
// the background) before it lets go of the sandbox's paused lock: a resume
// must not start before the teardown is done (its netns and cgroup would
// still be there). The teardown returns what may run after the lock is let
// go (deleting the checkpoint this one supersedes: a resume does not wait
// for it). On an error the sandbox runs on and there is nothing to tear
// down.
func (c *Checkpoints) pauseLocked(ctx context.Context, e *entry, reason string, opts PauseOptions) (teardown func() (cleanup func()), err error) {
	cp, err := c.checkpointer()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	rec := e.rec
	log := c.svc.log.With("sandbox", rec.ID)
	ctx = context.WithoutCancel(ctx) // a client hanging up must not leave it half-paused
	defer func() {
		if err != nil {
			c.svc.metrics.checkpointFailed("pause")
			log.Warn("pause failed; the sandbox goes on running", "err", err)
		}
	}()

	// A sandbox frozen at rest is thawed first: runsc's pause and
	// checkpoint ask its kernel, which answers nothing frozen.
	if err := e.wake(ctx); err != nil {
		return nil, err
	}
	if opts.RequireHealthyAgent {
		hctx, cancel := context.WithTimeout(ctx, agentCheckTimeout)
		err := e.agent.waitHealthy(hctx, nil)
		cancel()
		if err != nil {
			return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "the sandbox's agent does not answer, so the sandbox was not paused")
		}
	}
	ckptID := newArtifactID(rec.ID, "c")
	dir, err := c.imageDir(ckptID)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := cp.Freeze(ctx, rec.ID); err != nil {
		return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "could not freeze the sandbox")
	}
	frozen := true
	defer func() {
		if frozen {
			if terr := cp.Thaw(ctx, rec.ID); terr != nil {
				log.Error("thaw after failed pause", "err", terr)
			}
		}
	}()
	tFreeze := time.Now()
	// Frozen, the disk image is the disk as it was when the pause was
	// asked for, as the memory image is.
	contents := contentsMemory
	if opts.DiskOnly {
		contents = contentsDisk
		err = cp.SnapshotDisk(ctx, rec.ID, dir)
	} else {
		err = cp.Checkpoint(ctx, rec.ID, dir, true)
	}
	if err != nil {
		return nil, err
	}
	tImage := time.Now()
	m, err := c.saveCheckpoint(ctx, rec, ckptID, checkpoint.KindCheckpoint, dir, map[string]string{metaContents: contents})
	if err != nil {
		return nil, err
	}
	tSaved := time.Now()

	// Recorded paused, the sandbox no longer holds its slot in the store,
	// but its network stays on the host until the teardown below: nothing
	// else may get the slot before then.
	releaseSlot := c.svc.drainSlot(rec.Slot)
	defer func() {
		if err != nil {
			releaseSlot()
		}
	}()
	updated := *rec
	updated.State, updated.Reason = store.StatePaused, reason
	updated.PausedAt = time.Now().UTC()
	updated.Checkpoint = &store.CheckpointRef{ID: m.ID, CreatedAt: m.CreatedAt, Bytes: m.Bytes, Took: time.Since(start), DiskOnly: opts.DiskOnly}
	if err := c.svc.store.UpdateSandbox(ctx, &updated, store.Was(rec)); err != nil {
		// Not recorded: the checkpoint is of no use to anybody.
		if derr := c.svc.cfg.Checkpoints.Delete(ctx, m.ID); derr != nil {
			log.Warn("delete unrecorded checkpoint", "checkpoint", m.ID, "err", derr)
		}
		return nil, fmt.Errorf("record paused sandbox: %w", err)
	}
	// From here on the pause is durable: the sandbox is torn down (a crash
	// now leaves an orphan that Recover removes) and never thawed.
	frozen = false
	e.setRec(&updated)
	c.svc.dropLive(rec.ID)
	go c.svc.egressChanged() // not under e.mu: it reads every entry
	e.agent.Close()
	c.svc.metrics.checkpointed("pause", m.Bytes, tImage.Sub(start), tSaved.Sub(tImage))
	log.Info("sandbox paused", "checkpoint", m.ID, "contents", contents, "bytes", m.Bytes, "took_ms", time.Since(start).Milliseconds())
	log.Debug("pause steps", "freeze_ms", tFreeze.Sub(start).Milliseconds(), "checkpoint_ms", tImage.Sub(tFreeze).Milliseconds(),
		"upload_ms", tSaved.Sub(tImage).Milliseconds(), "record_ms", time.Since(tSaved).Milliseconds())
	ep, old := e.ep, rec.Checkpoint
	return func() func() {
		t := time.Now()
		if err := c.svc.teardown(ctx, rec.ID, ep); err != nil {
			log.Warn("tear down paused sandbox", "err", err)
		}
		releaseSlot()
		log.Debug("paused sandbox torn down", "teardown_ms", time.Since(t).Milliseconds())
		return func() {
			if old != nil && old.ID != m.ID {
				if err := c.svc.cfg.Checkpoints.Delete(ctx, old.ID); err != nil {
					log.Warn("delete superseded checkpoint", "checkpoint", old.ID, "err", err)
				}
			}
		}
	}, nil
}

// saveCheckpoint uploads the image in dir as artifact id of rec; meta is
// added to the manifest's Meta.
func (c *Checkpoints) saveCheckpoint(ctx context.Context, rec *store.Sandbox, id, kind, dir string, meta map[string]string) (*checkpoint.Manifest, error) {
	m, secret, err := c.svc.manifestOf(rec, id, kind, meta)
	if err != nil {
		return nil, err
	}
	if err := c.svc.cfg.Checkpoints.Save(ctx, m, dir, secret); err != nil {
		return nil, err
	}
	return m, nil
}

// manifestOf is the manifest of artifact id of rec, and the state to seal
// in it; meta is added to the manifest's Meta.
func (s *Service) manifestOf(rec *store.Sandbox, id, kind string, meta map[string]string) (*checkpoint.Manifest, []byte, error) {
	image, err := s.imageRoot(rec.Template, rec.Image)
	if err != nil {
		return nil, nil, err
	}
	netJSON, err := json.Marshal(rec.Network)
	if err != nil {
		return nil, nil, fmt.Errorf("encode network policy: %w", err)
	}
	secret, err := json.Marshal(sealedState{
		AccessToken: rec.AccessToken, Env: rec.Env, Metadata: rec.Metadata,
		OpenAccess: rec.OpenAccess, AutoPause: rec.AutoPause, AutoResume: rec.AutoResume,
		AutoPauseDiskOnly: rec.AutoPauseDiskOnly, Secrets: rec.Secrets,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("encode sandbox state: %w", err)
	}
	cp, _ := s.rt.(runtime.Checkpointer)
	m := &checkpoint.Manifest{
		ID: id, Kind: kind, SandboxID: rec.ID, Template: rec.Template,
		CreatedAt:      time.Now().UTC(),
		RuntimeVersion: cp.Version(),
		Limits:         checkpoint.Limits{CPU: rec.CPU, MemoryMB: rec.MemoryMB, DiskMB: rec.DiskMB, MaxProcesses: rec.MaxProcs},
		Network:        netJSON,
		Meta:           map[string]string{metaTemplateImage: filepath.Base(image), metaTenant: tenant.Of(rec.Tenant)},
		KeyID:          rec.KeyID,
	}
	for k, v := range meta {
		m.Meta[k] = v
	}
	if vols, err := volumesMeta(rec.Volumes); err != nil {
		return nil, nil, err
	} else if vols != "" {
		m.Meta[metaVolumes] = vols
	}
	return m, secret, nil
}

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
	if e, ok := c.svc.entry(id); ok {
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
	q, err := c.svc.reserve(ctx, use)
	if err != nil {
		return nil, err
	}
	defer c.svc.release(q)
	// A resume starts a sandbox: admitted before the download, so a node
	// at a budget refuses it at once (and the sandbox stays paused).
	r, err := c.svc.admit(ctx, need, "resume")
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
		return c.svc.need(memoryMB, 0, bytes, false)
	}
	return c.svc.need(memoryMB, bytes, 0, false)
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
	rootfs, err := c.checkRestorable(m)
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
		err = c.svc.store.ReviveSandbox(ctx, &rec, store.Was(paused), c.svc.cfg.Network.Slots(), c.svc.avoidSlot)
	} else {
		// This node's record holds the mounts' claims from here on.
		release, cerr := c.svc.claimVolumes(ctx, &rec)
		if cerr != nil {
			return nil, cerr
		}
		rec.Slot = -1
		err = c.svc.store.CreateSandbox(ctx, &rec, c.svc.cfg.Network.Slots(), c.svc.avoidSlot)
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
	ep, err := c.svc.cfg.Network.Endpoint(id, rec.Slot)
	if err == nil {
		// What a failed teardown of its pause left under its names (the
		// sandbox is paused and its lock held: nothing else has them).
		if derr := c.svc.cfg.Links.Detach(ep); derr != nil {
			log.Warn("remove the paused sandbox's leftover network", "err", derr)
		}
		err = c.svc.cfg.Links.Attach(ep)
	}
	if err != nil {
		return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "could not set up the sandbox network")
	}
	undo.add("detach network", func() error { return c.svc.cfg.Links.Detach(ep) })
	limits := runtime.Limits{CPUs: m.Limits.CPU, MemoryMB: m.Limits.MemoryMB, DiskMB: m.Limits.DiskMB, MaxProcs: m.Limits.MaxProcesses}
	var agent *AgentConn
	if hasMemory(m) {
		var mounts []runtime.Mount
		if mounts, err = c.svc.runtimeMounts(ctx, rec.Volumes); err != nil {
			return nil, err
		}
		agent, err = c.svc.restoreInto(ctx, rec.ID, rootfs, ep, limits, mounts, dir, st.AccessToken, &undo)
		if err != nil {
			return nil, err
		}
		// The sandbox has a new address: point its resolver at its gateway.
		if err := c.initRestored(ctx, agent, st.AccessToken, rec.Env, ep); err != nil {
			agent.Close()
			return nil, err
		}
	} else {
		// Only the disk was kept: a fresh sandbox boots on it.
		agent, err = c.bootOnDisk(ctx, &rec, st.AccessToken, rootfs, ep, limits, dir, &undo)
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
	c.svc.addLive(&entry{rec: &rec, agent: agent, ep: ep, owner: tenant.Of(rec.Tenant), use: usageOf(rec.CPU, rec.MemoryMB)}, q, q.useOrZero())
	r.Done(ctx, id)
	c.svc.egressChanged()
	c.svc.metrics.restored(tLoad.Sub(start), time.Since(tLoad))
	log.Info("sandbox resumed", "memory", hasMemory(m), "download_ms", tLoad.Sub(start).Milliseconds(), "restore_ms", time.Since(tLoad).Milliseconds())
	return fromRecord(&rec), nil
}

// checkRestorable refuses a checkpoint this node cannot restore, and says
// why; it returns the template image to restore over.
func (c *Checkpoints) checkRestorable(m *checkpoint.Manifest) (string, error) {
	cp, _ := c.svc.rt.(runtime.Checkpointer)
	if m.RuntimeVersion != cp.Version() {
		return "", errdefs.New(errdefs.ErrFailedPrecondition, "checkpoint %s was taken by %q and this node runs %q", m.ID, m.RuntimeVersion, cp.Version())
	}
	// The image the sandbox ran on, not the template's current one: a
	// restored process maps its binaries again by path.
	return c.svc.imageRoot(m.Template, m.Meta[metaTemplateImage])
}

// initRestored sends a restored agent Init: token becomes its token (the
// one it has, for a resume), env its env, and its resolver and trust store
// point at this node's egress gateway on the sandbox's new address.
func (c *Checkpoints) initRestored(ctx context.Context, agent *AgentConn, token string, env map[string]string, ep network.Endpoint) error {
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := agent.Agent.Init(ictx, connect.NewRequest(&agentv1.InitRequest{
		// No default user or workdir: the restored agent keeps its own.
		AccessToken: token, EnvVars: env,
		Nameserver: ep.HostIP.String(), CaPem: string(c.svc.cfg.Egress.CAPEM),
	})); err != nil {
		return errdefs.Wrap(errdefs.ErrUnavailable, err, "restored sandbox agent init failed")
	}
	return nil
}

// bootOnDisk boots a fresh sandbox rec on the disk image in dir (a pause
// that kept no memory) and gives its agent what a create's boot and claim
// would: token, env, the template's user and workdir, resolver and CA. It
// pushes its undo steps.
func (c *Checkpoints) bootOnDisk(ctx context.Context, rec *store.Sandbox, token, rootfs string, ep network.Endpoint, limits runtime.Limits, dir string, undo *cleanup) (*AgentConn, error) {
	agent, err := c.svc.bootAgent(ctx, rec.ID, rootfs, ep, bootSpec{limits: limits, diskImage: dir, state: rec.State, volumes: rec.Volumes}, undo)
	if err != nil {
		return nil, err
	}
	// The user and workdir are the template's, as at the sandbox's create
	// (the agent's own state is not on its disk: /run is a tmpfs).
	user, workdir := "user", ""
	if img, err := c.svc.cfg.Templates.Resolve(ctx, rec.Template); err == nil {
		user, workdir = defaultUser(img), img.Workdir
	} else {
		c.svc.log.Warn("template of a sandbox rebooted on its disk not found; default user and workdir", "sandbox", rec.ID, "template", rec.Template, "err", err)
	}
	ictx, cancel := context.WithTimeout(ctx, c.svc.cfg.AgentBootTimeout)
	defer cancel()
	if _, err := agent.Agent.Init(ictx, connect.NewRequest(&agentv1.InitRequest{
		AccessToken: token, EnvVars: rec.Env, DefaultUser: user, DefaultWorkdir: workdir,
		Nameserver: ep.HostIP.String(), CaPem: string(c.svc.cfg.Egress.CAPEM),
	})); err != nil {
		agent.Close()
		return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "the sandbox booted on its saved disk, but its agent init failed")
	}
	agent.setToken(token)
	return agent, nil
}

// ForkRequest asks for Count new sandboxes from a running one.
type ForkRequest struct {
	Count    int
	Timeout  time.Duration
	Metadata map[string]string
}

const maxForks = 16

// Fork makes req.Count new sandboxes that go on from the running sandbox
// id's current state (memory, processes, files), each with its own id,
// address and access token. The parent keeps running.
func (c *Checkpoints) Fork(ctx context.Context, id string, req ForkRequest) ([]*Sandbox, error) {
	if err := c.svc.refuseIfDraining(); err != nil {
		return nil, err
	}
	cp, err := c.checkpointer()
	if err != nil {
		return nil, err
	}
	if req.Count == 0 {
		req.Count = 1
	}
	if req.Count < 1 || req.Count > maxForks {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "count must be between 1 and %d", maxForks)
	}
	if req.Timeout == 0 {
		req.Timeout = c.svc.cfg.DefaultTimeout
	}
	if err := c.svc.checkTimeout(req.Timeout); err != nil {
		return nil, err
	}
	e, ok := c.svc.entry(id)
	if !ok {
		return nil, c.svc.notRunning(id)
	}
	// Every fork is a running copy of the parent: each is admitted, with
	// what the parent takes now, before the parent is checkpointed; all of
	// them or none.
	rs := make([]*admission.Reservation, 0, req.Count)
	defer func() {
		for _, r := range rs {
			r.Cancel() // those no fork used; Done ones stay done
		}
	}()
	e.mu.Lock()
	memoryMB, cpu := e.rec.MemoryMB, e.rec.CPU
	e.mu.Unlock()
	q, err := c.svc.reserve(ctx, tenant.Usage{Sandboxes: req.Count, VCPU: req.Count * cpu, MemoryMB: req.Count * memoryMB})
	if err != nil {
		return nil, err
	}
	defer c.svc.release(q)
	for range req.Count {
		r, err := c.svc.admit(ctx, c.svc.need(memoryMB, c.svc.adm.Usage(id).Memory, 0, false), "fork")
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	e.mu.Lock()
	if e.rec.State != store.StateRunning {
		e.mu.Unlock()
		return nil, errdefs.New(errdefs.ErrNotFound, "sandbox %q is %s", id, e.rec.State)
	}
	parent := *e.rec
	if name, rw := readWrite(parent.Volumes); rw {
		e.mu.Unlock()
		return nil, errdefs.New(errdefs.ErrFailedPrecondition,
			"sandbox %s mounts volume %q read-write, and its forks would mount it too: one sandbox at a time may write to a volume (file locks do not reach across sandboxes); fork a sandbox whose volumes are read-only", id, name)
	}
	dir, err := c.imageDir(newArtifactID(id, "f"))
	if err == nil {
		defer os.RemoveAll(dir)
		err = e.wake(ctx) // a sandbox frozen at rest is thawed for the checkpoint
	}
	if err == nil {
		err = cp.Checkpoint(context.WithoutCancel(ctx), id, dir, true)
	}
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	rootfs, err := c.svc.imageRoot(parent.Template, parent.Image)
	if err != nil {
		return nil, err
	}
	// Each fork is the parent's but for its metadata (when asked) and the
	// snapshot schedule, which stays the parent's.
	tmpl := parent
	tmpl.Metadata, tmpl.SnapshotEvery, tmpl.SnapshotKeep = parent.Metadata, 0, 0
	if req.Metadata != nil {
		tmpl.Metadata = req.Metadata
	}
	var out []*Sandbox
	for i := range req.Count {
		sb, err := c.forkOne(ctx, &tmpl, rootfs, dir, req.Timeout, parent.ID, rs[i], q)
		if err != nil {
			// The forks made so far are the caller's; say how many.
			return out, fmt.Errorf("fork %d of %d: %w", len(out)+1, req.Count, err)
		}
		out = append(out, sb)
	}
	return out, nil
}

// forkOne makes a new sandbox from the checkpoint image in dir, taken of a
// running sandbox whose agent held tmpl.AccessToken: a fork, or a create
// from a full snapshot. The new sandbox has its own ID, address and access
// token; tmpl gives its template, image, limits, key, env, metadata,
// policy, secrets and lifecycle, and it expires timeout from now. from
// names the parent or snapshot (logs).
func (c *Checkpoints) forkOne(ctx context.Context, tmpl *store.Sandbox, rootfs, dir string, timeout time.Duration, from string, r *admission.Reservation, q *reservation) (_ *Sandbox, err error) {
	ctx = context.WithoutCancel(ctx)
	defer func() {
		if err != nil {
			r.Cancel()
		}
	}()
	rec := &store.Sandbox{
		ID: newID(), Tenant: tmpl.Tenant, Template: tmpl.Template, Image: tmpl.Image, State: store.StateCreating, CreatedAt: time.Now().UTC(),
		CPU: tmpl.CPU, MemoryMB: tmpl.MemoryMB, DiskMB: tmpl.DiskMB, MaxProcs: tmpl.MaxProcs,
		AccessToken: tmpl.AccessToken, KeyID: tmpl.KeyID,
		// The image's volumes: a restore needs the mounts it was taken with.
		Volumes: slices.Clone(tmpl.Volumes),
	}
	log := c.svc.log.With("sandbox", rec.ID, "from", from)
	var undo cleanup
	defer func() {
		if err != nil {
			undo.run(log)
		}
	}()
	release, err := c.svc.claimVolumes(ctx, rec)
	if err != nil {
		return nil, err
	}
	ep, err := c.svc.recordAndAttach(ctx, rec, log)
	release()
	if err != nil {
		return nil, err
	}
	created := *rec
	undo.add("delete record", func() error { return c.svc.store.DeleteSandbox(context.Background(), rec.ID, store.Was(&created)) })
	undo.add("detach network", func() error { return c.svc.cfg.Links.Detach(ep) })
	limits := runtime.Limits{CPUs: tmpl.CPU, MemoryMB: tmpl.MemoryMB, DiskMB: tmpl.DiskMB, MaxProcs: tmpl.MaxProcs}
	mounts, err := c.svc.runtimeMounts(ctx, rec.Volumes)
	if err != nil {
		return nil, err
	}
	agent, err := c.svc.restoreInto(ctx, rec.ID, rootfs, ep, limits, mounts, dir, tmpl.AccessToken, &undo)
	if err != nil {
		return nil, err
	}
	// The new agent still answers to the old token: give it its own, its
	// env, and point its resolver at its own gateway address.
	token := newToken()
	if err := c.initRestored(ctx, agent, token, tmpl.Env, ep); err != nil {
		agent.Close()
		return nil, err
	}
	agent.setToken(token)
	now := time.Now().UTC()
	rec.State, rec.AccessToken = store.StateRunning, token
	rec.CreatedAt, rec.ExpiresAt = now, now.Add(timeout)
	rec.Env, rec.Metadata = maps.Clone(tmpl.Env), maps.Clone(tmpl.Metadata)
	rec.OpenAccess, rec.Network, rec.Secrets = tmpl.OpenAccess, cloneNetwork(tmpl.Network), maps.Clone(tmpl.Secrets)
	rec.AutoPause, rec.AutoResume, rec.AutoPauseDiskOnly = tmpl.AutoPause, tmpl.AutoResume, tmpl.AutoPauseDiskOnly
	rec.SnapshotEvery, rec.SnapshotKeep = tmpl.SnapshotEvery, tmpl.SnapshotKeep
	if err := c.svc.store.UpdateSandbox(ctx, rec, store.Was(&created)); err != nil {
		agent.Close()
		return nil, fmt.Errorf("record new sandbox: %w", err)
	}
	c.svc.addLive(&entry{rec: rec, agent: agent, ep: ep, owner: tenant.Of(rec.Tenant), use: usageOf(rec.CPU, rec.MemoryMB)}, q, usageOf(rec.CPU, rec.MemoryMB))
	r.Done(ctx, rec.ID)
	c.svc.egressChanged()
	log.Info("sandbox restored from a running sandbox's image")
	out := fromRecord(rec)
	out.AccessToken = token
	return out, nil
}

// deletePausedLocked ends paused sandbox id under its paused lock: its
// record says killed and its checkpoint is deleted.
func (c *Checkpoints) deletePausedLocked(ctx context.Context, id, reason string) error {
	unlock := c.pausedLocks.Lock(id)
	defer unlock()
	rec, err := c.svc.store.GetSandbox(ctx, id)
	if err != nil {
		return err
	}
	if rec.State != store.StatePaused {
		return errdefs.New(errdefs.ErrNotFound, "sandbox %q is %s", id, rec.State)
	}
	return c.deletePaused(ctx, rec, reason)
}

// deletePaused records paused sandbox rec killed, if it still is as read
// (a resume on another node may have won it meanwhile), and only then
// deletes its checkpoint: a resume that loaded it before finds the record
// killed and fails. A checkpoint whose delete fails stays named in the
// killed record, and goes when the record is pruned.
func (c *Checkpoints) deletePaused(ctx context.Context, rec *store.Sandbox, reason string) error {
	killed := *rec
	killed.State, killed.Reason, killed.EndedAt = store.StateKilled, reason, time.Now().UTC()
	if err := c.svc.store.UpdateSandbox(ctx, &killed, store.Was(rec)); err != nil {
		return fmt.Errorf("record end of paused sandbox: %w", err)
	}
	if rec.Checkpoint != nil && c.svc.cfg.Checkpoints != nil {
		if err := c.svc.cfg.Checkpoints.Delete(ctx, rec.Checkpoint.ID); err != nil {
			c.svc.log.Warn("delete the checkpoint of a killed paused sandbox; the prune of its record retries", "sandbox", rec.ID, "checkpoint", rec.Checkpoint.ID, "err", err)
		}
	}
	c.svc.metrics.ended(store.StateKilled, reason)
	c.svc.log.Info("paused sandbox deleted", "sandbox", rec.ID, "reason", reason)
	return nil
}

// autoPauseRetry is how long an expired auto-pause sandbox whose pause
// failed runs on before the next try: its work is never thrown away.
const autoPauseRetry = 30 * time.Second

// autoPause pauses an expired sandbox created with auto-pause, and says
// whether it was one.
func (c *Checkpoints) autoPause(ctx context.Context, id string, e *entry) bool {
	unlock := c.pausedLocks.Lock(id)
	defer unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.rec.AutoPause || e.rec.State != store.StateRunning {
		return false
	}
	teardown, err := c.pauseLocked(ctx, e, "paused at timeout", PauseOptions{DiskOnly: e.rec.AutoPauseDiskOnly})
	if err == nil {
		teardown()()
	} else {
		c.svc.log.Error("auto-pause at timeout failed; retrying later", "sandbox", e.rec.ID, "err", err)
		updated := *e.rec
		updated.ExpiresAt = time.Now().UTC().Add(autoPauseRetry)
		if err := c.svc.store.UpdateSandbox(ctx, &updated, store.Was(e.rec)); err == nil {
			e.setRec(&updated)
		}
	}
	return true
}
