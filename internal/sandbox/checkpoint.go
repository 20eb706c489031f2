package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/keylock"
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
// resume and its delete take, and joins the teardowns it leaves running.
// The service makes it and hands it out (Service.Checkpoints), with the
// parts it shares with the service's other starts: the booter, which
// starts and tears down sandboxes on this host, the live sandboxes (and
// the tenants' quotas a start reserves in them), the admission of starts,
// the stored quotas and the network slots. The records and the runtime it
// reaches through the service.
type Checkpoints struct {
	svc *Service
	// booter starts restored sandboxes and tears paused ones down.
	booter *booter
	// live is the live sandboxes, and the tenants' quotas a resume or a
	// fork reserves to become one.
	live *liveSet
	// admits admits a resume or a fork against the node's budgets.
	admits *admitter
	// stored reserves what a pause will keep of its tenant's quotas.
	stored *storedQuotas
	// slots are the network slots held back from allocation: a paused
	// sandbox's until its teardown is done.
	slots *slots
	// pausedLocks serialise resume and delete of paused sandboxes.
	pausedLocks keylock.Map
	// teardowns counts the teardowns of paused sandboxes still running in
	// the background (Service.Close waits for them).
	teardowns sync.WaitGroup
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
	e, ok := c.live.entry(id)
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
	release, err := c.stored.reserve(ctx, tenant.Usage{PausedSandboxes: 1, PausedMB: c.stored.estimate(id, !opts.DiskOnly)})
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
	c.teardowns.Go(func() {
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
	releaseSlot := c.slots.drain(rec.Slot)
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
	c.live.drop(rec.ID)
	e.agent.Close()
	c.svc.metrics.checkpointed("pause", m.Bytes, tImage.Sub(start), tSaved.Sub(tImage))
	log.Info("sandbox paused", "checkpoint", m.ID, "contents", contents, "bytes", m.Bytes, "took_ms", time.Since(start).Milliseconds())
	log.Debug("pause steps", "freeze_ms", tFreeze.Sub(start).Milliseconds(), "checkpoint_ms", tImage.Sub(tFreeze).Milliseconds(),
		"upload_ms", tSaved.Sub(tImage).Milliseconds(), "record_ms", time.Since(tSaved).Milliseconds())
	ep, old := e.ep, rec.Checkpoint
	return func() func() {
		t := time.Now()
		if err := c.booter.teardown(ctx, rec.ID, ep); err != nil {
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
	m, secret, err := c.booter.manifestOf(rec, id, kind, meta)
	if err != nil {
		return nil, err
	}
	if err := c.svc.cfg.Checkpoints.Save(ctx, m, dir, secret); err != nil {
		return nil, err
	}
	return m, nil
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
