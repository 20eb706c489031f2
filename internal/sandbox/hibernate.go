package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/spacesandbox/space/internal/admission"
	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/store"
)

// Hibernation, the second rest tier: a sandbox frozen at rest that nothing
// reached for its idle hibernate delay is checkpointed into an image on the
// node's own disk (encrypted under its tenant's key, as every checkpoint
// is), and its runtime sandbox is removed, which gives its memory back. It
// keeps everything else: its record (running), its slot, network and
// address, its entry and its agent connection. The next request of any
// kind restores it in place from the image (rest.hold), with the same id,
// token, address, processes and open files, and the image is deleted. A
// wake the node's budget refuses answers 503 and leaves it hibernated.
//
// The record names the image (store.Sandbox.Hibernation), so that a
// restarted spaced finds a hibernated sandbox: no runtime sandbox, and its
// image there. A kill or timeout deletes the image with the sandbox.

// hibernation is the hibernator of one live entry.
type hibernation struct {
	s *Service
	e *entry
}

// hibernatorOf is e's hibernator, or nil when this node cannot hibernate.
func (s *Service) hibernatorOf(e *entry) hibernator {
	if _, ok := s.rt.(runtime.Checkpointer); !ok || s.cfg.Hibernation == nil || e.build != "" {
		return nil
	}
	return hibernation{s: s, e: e}
}

// idleHibernateOf is the delay after which rec's sandbox is hibernated (<=
// 0: never): its own, or the node's default. A sandbox that never rests
// is never hibernated.
func (s *Service) idleHibernateOf(rec *store.Sandbox) time.Duration {
	switch {
	case s.cfg.Hibernation == nil || s.idleFreezeOf(rec) <= 0 || rec.IdleHibernate < 0:
		return 0
	case rec.IdleHibernate > 0:
		return rec.IdleHibernate
	}
	return s.cfg.IdleHibernate
}

// hibernateIdle hibernates e's frozen sandbox once it has rested for its
// delay. A lifecycle call holding e's lock puts it off to the next tick.
func (s *Service) hibernateIdle(ctx context.Context, e *entry, r *rest, now time.Time) {
	delay := s.idleHibernateOf(e.record())
	if last, busy := r.idleSince(); delay <= 0 || busy || now.Sub(last) < delay {
		return
	}
	if !e.mu.TryLock() {
		return
	}
	defer e.mu.Unlock()
	if !e.mayRest() {
		return
	}
	if _, err := r.hibernateIfIdle(ctx, now, delay); err != nil {
		s.metrics.hibernateFailed("hibernate")
		s.log.Warn("hibernate idle sandbox; it goes on running", "sandbox", e.rec.ID, "err", err)
	}
}

// hibernateForRoom hibernates one sandbox frozen at rest, the one
// unreached the longest, when a start was refused for memory (after the
// idle pool sandboxes): the node gives back what waiting sandboxes hold
// before it turns work away. It reports whether it freed anything. Entries
// and rests busy with something else are passed over, never waited for.
func (s *Service) hibernateForRoom(ctx context.Context, ref *admission.Refusal) bool {
	if ref.Resource != admission.Memory || s.cfg.Hibernation == nil {
		return false
	}
	type candidate struct {
		e    *entry
		r    *rest
		last time.Time
	}
	var cands []candidate
	for _, e := range s.live.all() {
		r := e.rest()
		if r == nil || s.idleHibernateOf(e.record()) <= 0 {
			continue
		}
		// Never waits for a rest: the caller may be a wake holding one.
		if last, ok := r.hibernatable(); ok {
			cands = append(cands, candidate{e, r, last})
		}
	}
	slices.SortFunc(cands, func(a, b candidate) int { return a.last.Compare(b.last) })
	for _, c := range cands {
		if !c.e.mu.TryLock() {
			continue
		}
		did, err := false, error(nil)
		if c.e.mayRest() {
			did, err = c.r.hibernateEarly(ctx)
		}
		id := c.e.rec.ID
		c.e.mu.Unlock()
		if err != nil {
			s.metrics.hibernateFailed("hibernate")
			s.log.Warn("hibernate a resting sandbox to make room; it goes on running", "sandbox", id, "err", err)
		}
		if did {
			s.log.Info("hibernated a resting sandbox early: the node is short of memory", "sandbox", id, "requested_mib", ref.Requested, "used_mib", ref.Used, "budget_mib", ref.Budget)
			return true
		}
	}
	return false
}

// hibernate checkpoints the sandbox (thawed, its entry's lock held) into
// an image on the node's disk, removes its runtime sandbox and records the
// image. When anything fails after the checkpoint stopped the sandbox, it
// is restored at once from what was written.
func (h hibernation) hibernate(ctx context.Context) (string, error) {
	s, rec := h.s, h.e.rec
	ctx = context.WithoutCancel(ctx)
	start := time.Now()
	log := s.log.With("sandbox", rec.ID)
	cp, _ := s.rt.(runtime.Checkpointer)
	id := newArtifactID(rec.ID, "h")
	dir, err := s.ckpts.imageDir(id)
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	// runsc stops the sandbox only once its image is complete: a failed
	// checkpoint leaves it running.
	if err := cp.Checkpoint(ctx, rec.ID, dir, false); err != nil {
		return "", err
	}
	tImage := time.Now()
	m, secret, err := s.booter.manifestOf(rec, id, checkpoint.KindCheckpoint, map[string]string{metaContents: contentsMemory})
	if err == nil {
		err = s.cfg.Hibernation.Save(ctx, m, dir, secret)
	}
	if err != nil {
		return "", h.undo(ctx, fmt.Errorf("save the hibernation image: %w", err), func() error { return h.restore(ctx, dir) })
	}
	tSaved := time.Now()
	back := func() error { return h.revive(ctx, m.ID) }
	// Its runtime sandbox and its link go; its address and slot stay its
	// own (the record holds them).
	if err := s.booter.teardown(ctx, rec.ID, h.e.ep); err != nil {
		return "", h.undo(ctx, fmt.Errorf("remove the checkpointed sandbox: %w", err), back)
	}
	tDown := time.Now()
	updated := *rec
	updated.Hibernation = &store.CheckpointRef{ID: m.ID, CreatedAt: m.CreatedAt, Bytes: m.Bytes, Took: time.Since(start)}
	if err := s.store.UpdateSandbox(ctx, &updated, store.Was(rec)); err != nil {
		// Not recorded, a restart would not find it: back now.
		return "", h.undo(ctx, fmt.Errorf("record the hibernation: %w", err), back)
	}
	h.e.setRec(&updated)
	s.metrics.hibernated(time.Since(start), m.Bytes)
	log.Info("sandbox hibernated", "image", m.ID, "bytes", m.Bytes, "took_ms", time.Since(start).Milliseconds(),
		"checkpoint_ms", tImage.Sub(start).Milliseconds(), "save_ms", tSaved.Sub(tImage).Milliseconds(),
		"teardown_ms", tDown.Sub(tSaved).Milliseconds())
	return m.ID, nil
}

// undo brings the sandbox back after a hibernation failed at err; when
// that fails too the sandbox is lost (the reaper reports it so).
func (h hibernation) undo(ctx context.Context, err error, back func() error) error {
	if berr := back(); berr != nil {
		h.s.log.Error("a sandbox whose hibernation failed could not be restored", "sandbox", h.e.rec.ID, "err", err, "restore_err", berr)
		return errors.Join(err, berr)
	}
	return err
}

// restore restores the sandbox in place from the image in dir: on its
// address (its link made again: gVisor took the address off the old one),
// with its limits and volumes, and waits for its agent.
func (h hibernation) restore(ctx context.Context, dir string) error {
	s, rec := h.s, h.e.record()
	start := time.Now()
	// What the checkpoint left of the stopped sandbox, and its link.
	if err := s.booter.teardown(ctx, rec.ID, h.e.ep); err != nil {
		return fmt.Errorf("remove the checkpointed sandbox: %w", err)
	}
	tDown := time.Now()
	// The link's undo runs if the restore fails; a failure before it
	// leaves the link, which the next restore's teardown or the
	// sandbox's end removes.
	var undo cleanup
	if err := s.booter.attach(h.e.ep, &undo); err != nil {
		return err
	}
	tNet := time.Now()
	rootfs, err := s.booter.imageRoot(rec.Template, rec.Image)
	if err != nil {
		return err
	}
	mounts, err := s.booter.runtimeMounts(ctx, rec.Volumes)
	if err != nil {
		return err
	}
	limits := runtime.Limits{CPUs: rec.CPU, MemoryMB: rec.MemoryMB, DiskMB: rec.DiskMB, MaxProcs: rec.MaxProcs}
	// Whatever request woke it waits on the restore.
	agent, err := s.booter.restoreInto(ctx, rec.ID, rootfs, h.e.ep, limits, mounts, dir, rec.AccessToken, runtime.PriorityUrgent, &undo)
	if err != nil {
		undo.run(s.log.With("sandbox", rec.ID))
		return err
	}
	// The entry's own connection to the agent goes on: same address,
	// same token.
	agent.Close()
	s.log.Debug("hibernated sandbox restored", "sandbox", rec.ID, "teardown_ms", tDown.Sub(start).Milliseconds(),
		"network_ms", tNet.Sub(tDown).Milliseconds(), "restore_ms", time.Since(tNet).Milliseconds())
	return nil
}

// revive restores the sandbox from its hibernation image, if the node's
// budget has room for it, and deletes the image.
func (h hibernation) revive(ctx context.Context, image string) (err error) {
	s, rec := h.s, h.e.record()
	start := time.Now()
	defer func() {
		if err != nil {
			s.metrics.hibernateFailed("wake")
			s.log.Warn("wake of hibernated sandbox failed; it stays hibernated", "sandbox", rec.ID, "image", image, "err", err)
		}
	}()
	m, err := s.cfg.Hibernation.Get(ctx, image)
	if err != nil {
		return errdefs.Wrap(errdefs.ErrUnavailable, err, "the image of hibernated sandbox %s", rec.ID)
	}
	res, err := s.admits.admit(ctx, s.admits.need(rec.MemoryMB, m.Bytes, 0, false), "wake of hibernated sandbox "+rec.ID)
	if err != nil {
		return err
	}
	dir, err := s.ckpts.imageDir(image + "-wake")
	if err != nil {
		res.Cancel()
		return err
	}
	defer os.RemoveAll(dir)
	if _, _, err := s.cfg.Hibernation.Load(ctx, image, dir); err != nil {
		res.Cancel()
		return errdefs.Wrap(errdefs.ErrUnavailable, err, "could not read the image of hibernated sandbox %s", rec.ID)
	}
	tLoad := time.Now()
	if err := h.restore(ctx, dir); err != nil {
		res.Cancel()
		return errdefs.Wrap(errdefs.ErrUnavailable, err, "could not wake hibernated sandbox %s", rec.ID)
	}
	tRestored := time.Now()
	res.Done(ctx, rec.ID)
	// The sandbox has moved on from the image: it must never be restored
	// again. A failed delete leaves it to the next restart's sweep.
	if err := s.cfg.Hibernation.Delete(ctx, image); err != nil {
		s.log.Warn("delete the image of a woken sandbox", "sandbox", rec.ID, "image", image, "err", err)
	}
	s.metrics.revived(time.Since(start))
	s.log.Info("hibernated sandbox woken", "sandbox", rec.ID, "took_ms", time.Since(start).Milliseconds(),
		"load_ms", tLoad.Sub(start).Milliseconds(), "restore_ms", tRestored.Sub(tLoad).Milliseconds(), "delete_ms", time.Since(tRestored).Milliseconds())
	return nil
}

// retire marks e's sandbox as being ended (nothing wakes it again) and
// returns the image it is hibernated in, to delete after its teardown.
func (e *entry) retire() string {
	if r := e.rest(); r != nil {
		return r.retire()
	}
	return ""
}

// deleteHibernation deletes the image of an ended sandbox.
func (s *Service) deleteHibernation(ctx context.Context, id, image string) {
	if image == "" || s.cfg.Hibernation == nil {
		return
	}
	if err := s.cfg.Hibernation.Delete(ctx, image); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		s.log.Warn("delete the hibernation image of an ended sandbox", "sandbox", id, "image", image, "err", err)
	}
}

// hibernatedImage says whether rec, which has no runtime sandbox, is
// hibernated: the image its record names is on this node's disk.
func (s *Service) hibernatedImage(ctx context.Context, rec *store.Sandbox) string {
	if rec.Hibernation == nil || s.cfg.Hibernation == nil {
		return ""
	}
	if _, err := s.cfg.Hibernation.Get(ctx, rec.Hibernation.ID); err != nil {
		return ""
	}
	return rec.Hibernation.ID
}

// sweepHibernation deletes, at a start, the images no live sandbox is
// hibernated in (an end or a wake cut off by a crash) and those whose save
// never finished.
func (s *Service) sweepHibernation(ctx context.Context, keep map[string]bool) {
	if s.cfg.Hibernation == nil {
		return
	}
	if _, err := s.cfg.Hibernation.SweepIncomplete(ctx, 0); err != nil {
		s.log.Warn("sweep incomplete hibernation images", "err", err)
	}
	all, err := s.cfg.Hibernation.List(ctx)
	if err != nil {
		s.log.Warn("list hibernation images", "err", err)
		return
	}
	for _, m := range all {
		if !keep[m.ID] {
			s.log.Info("deleting a hibernation image no sandbox is in", "image", m.ID, "sandbox", m.SandboxID)
			s.deleteHibernation(ctx, m.SandboxID, m.ID)
		}
	}
}
