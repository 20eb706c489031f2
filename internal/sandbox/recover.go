package sandbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/network"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// Recover runs once at start, before the API serves: it re-attaches every
// sandbox that is still running, reaps those whose timeout passed while
// spaced was down, reports as lost those whose processes are gone, and
// removes host resources that no record owns (half-made creates, orphans).
func (s *Service) Recover(ctx context.Context) error {
	recs, err := s.store.LiveSandboxes(ctx)
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	owned := map[string]bool{}
	for _, rec := range recs {
		if !rec.Live() {
			continue
		}
		owned[rec.ID] = true
		if err := s.recoverOne(ctx, rec); err != nil {
			s.log.Error("recover sandbox", "sandbox", rec.ID, "err", err)
		}
	}
	s.removeOrphans(ctx, owned)
	s.sweepHibernation(ctx, s.hibernatedImages())
	// The egress gateway, watching since before, lets the re-attached
	// sandboxes out.
	s.egressChanged()
	return nil
}

func (s *Service) recoverOne(ctx context.Context, rec *store.Sandbox) error {
	log := s.log.With("sandbox", rec.ID)
	from := store.Was(rec) // each write below expects the record as read
	ep, err := s.cfg.Network.Endpoint(rec.ID, rec.Slot)
	if err != nil {
		return err
	}
	if rec.State == store.StateCreating || rec.State == store.StatePooled || rec.Build != "" {
		// A create that never answered, a pool sandbox, or a template
		// build's (the build failed with the restart): nobody holds it.
		log.Info("removing unclaimed sandbox", "state", rec.State)
		if err := s.booter.teardown(ctx, rec.ID, ep); err != nil {
			return err
		}
		return s.store.DeleteSandbox(ctx, rec.ID, from)
	}
	if rec.Ending != "" {
		// An end (kill, timeout, lost) cut off by a crash: finish it.
		log.Info("finishing an end cut off by a restart", "state", rec.Ending, "reason", rec.Reason)
		if err := s.booter.teardown(ctx, rec.ID, ep); err != nil {
			return err
		}
		rec.State, rec.EndedAt, rec.Ending = rec.Ending, time.Now().UTC(), ""
		s.metrics.ended(rec.State, rec.Reason)
		return s.store.UpdateSandbox(ctx, rec, from)
	}
	if rec.State == store.StateResuming {
		// A resume that never answered: its checkpoint is intact, so the
		// sandbox goes back to paused (a resume on another node made this
		// record from the checkpoint; paused it is resumable here).
		log.Info("undoing unfinished resume")
		if err := s.booter.teardown(ctx, rec.ID, ep); err != nil {
			return err
		}
		rec.State = store.StatePaused
		return s.store.UpdateSandbox(ctx, rec, from)
	}
	st, err := s.rt.State(ctx, rec.ID)
	if err != nil {
		return err
	}
	if st == runtime.StateUnknown {
		// No runtime sandbox: hibernated, if its image is here.
		if image := s.hibernatedImage(ctx, rec); image != "" {
			s.adopt(rec, ep, newAgentConn(ep.SandboxIP, rec.AccessToken), false, image)
			log.Info("sandbox re-attached", "hibernated", image)
			return nil
		}
	}
	if st == runtime.StatePaused {
		// Frozen by a pause that never finished: it was not recorded, so
		// the sandbox goes on running.
		log.Info("thawing sandbox left frozen by an unfinished pause")
		if cp, ok := s.rt.(runtime.Checkpointer); ok {
			if err := cp.Thaw(ctx, rec.ID); err != nil {
				log.Warn("thaw", "err", err)
			}
			st, err = s.rt.State(ctx, rec.ID)
			if err != nil {
				return err
			}
		}
	}
	agent := newAgentConn(ep.SandboxIP, rec.AccessToken)
	// A sandbox frozen at rest stays frozen: its agent cannot answer
	// until a request wakes it, and waking every one at a restart would
	// spend what resting saved. Its processes are there (the runtime
	// says running); the first request thaws it.
	frozen := false
	if fr, ok := s.rt.(runtime.IdleFreezer); ok && st == runtime.StateRunning {
		frozen, _ = fr.IdleFrozen(ctx, rec.ID)
	}
	if st == runtime.StateRunning && !frozen {
		hctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err = agent.waitHealthy(hctx, nil)
		cancel()
	}
	if st != runtime.StateRunning || err != nil {
		reason := fmt.Sprintf("sandbox was %s after a daemon restart", st)
		if err != nil {
			reason = "sandbox agent did not answer after a daemon restart"
		}
		log.Warn("sandbox lost", "reason", reason)
		if terr := s.booter.teardown(ctx, rec.ID, ep); terr != nil {
			log.Warn("teardown of lost sandbox", "err", terr)
		}
		rec.State, rec.Reason, rec.EndedAt = store.StateLost, reason, time.Now().UTC()
		s.metrics.ended(store.StateLost, reason)
		return s.store.UpdateSandbox(ctx, rec, from)
	}
	s.adopt(rec, ep, agent, frozen, "")
	log.Info("sandbox re-attached", "frozen", frozen)
	// Expired ones are reaped by the first pass of the reaper.
	return nil
}

// adopt makes running sandbox rec live again after a restart: frozen at
// rest, hibernated in image, or awake.
func (s *Service) adopt(rec *store.Sandbox, ep network.Endpoint, agent *AgentConn, frozen bool, image string) {
	e := (&entry{rec: rec, agent: agent, ep: ep}).published()
	if rec.State != store.StatePooled && rec.Build == "" {
		e.owner, e.use = tenant.Of(rec.Tenant), usageOf(rec.CPU, rec.MemoryMB)
	}
	s.live.adopt(e, frozen, image)
}

// hibernatedImages are the images live sandboxes are hibernated in.
func (s *Service) hibernatedImages() map[string]bool {
	keep := map[string]bool{}
	for _, e := range s.live.all() {
		if r := e.rest(); r != nil {
			r.mu.Lock()
			if r.hibernated {
				keep[r.image] = true
			}
			r.mu.Unlock()
		}
	}
	return keep
}

func (s *Service) removeOrphans(ctx context.Context, owned map[string]bool) {
	ids, err := s.rt.List(ctx)
	if err != nil {
		s.log.Error("list runtime sandboxes", "err", err)
	}
	for _, id := range ids {
		if !owned[id] {
			s.log.Warn("destroying orphaned sandbox", "sandbox", id)
			if err := s.booter.teardown(ctx, id, network.Names(id)); err != nil {
				s.log.Error("destroy orphan", "sandbox", id, "err", err)
			}
		}
	}
}

// pruneEvery is how often ended records older than KeepEnded are
// forgotten: it reads the whole store, too much for every reaper tick.
const pruneEvery = time.Minute

// RunReaper kills sandboxes whose timeout passed, every interval, and
// forgets ended records older than KeepEnded, every pruneEvery, until ctx
// ends.
func (s *Service) RunReaper(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var pruned time.Time
	last := time.Now()
	for {
		// Timeouts are wall-clock times (they must survive a restart). A
		// step of the wall clock (an NTP correction, a suspended VM, an
		// operator's date -s) would expire every sandbox at once or keep
		// them long past their time: the reaper sees the step as the wall
		// clock moving apart from the monotonic one, and moves every live
		// sandbox's expiry with it, so each keeps the lifetime it had left.
		now := time.Now()
		if step := now.Round(0).Sub(last.Round(0)) - now.Sub(last); step > clockStep || step < -clockStep {
			s.followClockStep(ctx, step)
		}
		last = now
		s.reap(ctx)
		if time.Since(pruned) >= pruneEvery {
			s.prune(ctx)
			pruned = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Service) reap(ctx context.Context) {
	now := time.Now()
	// Entry locks only after the listing: end holds an entry's lock while
	// it drops the entry from the live set (liveSet).
	entries := s.live.byID()
	s.snaps.runSnapshotSchedules(ctx, entries)
	var expired []string
	for id, e := range entries {
		e.mu.Lock()
		if now.After(e.rec.ExpiresAt) {
			expired = append(expired, id)
		}
		e.mu.Unlock()
	}
	// A sandbox can die under us (out of memory, killed on the host):
	// report it lost rather than running.
	for id := range entries {
		if slices.Contains(expired, id) {
			continue
		}
		if s.stoppedUnexpectedly(ctx, entries[id]) {
			reason := "sandbox stopped unexpectedly"
			if er, ok := s.rt.(runtime.ExitReasoner); ok {
				if why := er.ExitReason(ctx, id); why != "" {
					reason = why
				}
			}
			// A kill racing this check has already ended it: not an error.
			if err := s.end(ctx, id, store.StateLost, reason); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				s.log.Error("end lost sandbox", "sandbox", id, "err", err)
			}
		}
	}
	for _, id := range expired {
		if s.ckpts.autoPause(ctx, id, entries[id]) {
			continue
		}
		// A kill racing the expiry has already ended it: not an error.
		if err := s.end(ctx, id, store.StateKilled, "timeout"); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			s.log.Error("reap sandbox", "sandbox", id, "err", err)
		}
	}
}

// stoppedUnexpectedly says whether e's sandbox is no longer running on its
// own (out of memory, killed on the host); a frozen one is looked at only
// every frozenLookEvery (rest.lookIfDue). Paused means frozen for a pause
// or snapshot in progress: alive. A hibernated one has no runtime sandbox
// by design, and none is made or removed while this looks.
func (s *Service) stoppedUnexpectedly(ctx context.Context, e *entry) bool {
	stopped := false
	look := func() {
		st, err := s.rt.State(ctx, e.record().ID)
		stopped = err == nil && st != runtime.StateRunning && st != runtime.StatePaused
	}
	if r := e.rest(); r != nil {
		r.lookIfDue(time.Now(), look)
	} else {
		look()
	}
	return stopped
}

// clockStep is the smallest difference between wall and monotonic time
// between two reaper ticks that counts as the wall clock being stepped.
const clockStep = 2 * time.Second

// followClockStep moves the expiry of every live sandbox by step.
func (s *Service) followClockStep(ctx context.Context, step time.Duration) {
	s.log.Warn("the wall clock was stepped; moving sandbox expiries with it", "step", step.String())
	for id := range s.live.byID() {
		_, err := s.updateRunning(ctx, id, "expiry after a clock step", func(rec *store.Sandbox) bool {
			rec.ExpiresAt = rec.ExpiresAt.Add(step)
			return true
		})
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			s.log.Error("move expiry after a clock step", "sandbox", id, "err", err)
		}
	}
}

// incompleteAfter is how old artifacts without a manifest must be before
// they are swept: an upload in progress (here or on another node sharing
// the store) is much younger.
const incompleteAfter = time.Hour

// prune forgets records of sandboxes that ended more than KeepEnded ago,
// deletes paused sandboxes kept longer than PausedRetention, and sweeps
// artifacts of checkpoints that never completed.
func (s *Service) prune(ctx context.Context) {
	if s.cfg.Checkpoints != nil {
		if n, err := s.cfg.Checkpoints.SweepIncomplete(ctx, incompleteAfter); err != nil {
			s.log.Warn("sweep incomplete checkpoints", "err", err)
		} else if n > 0 {
			s.log.Info("swept incomplete checkpoints", "count", n)
		}
	}
	now := time.Now()
	recs, err := s.store.StaleSandboxes(ctx, now.Add(-s.cfg.KeepEnded), now.Add(-s.cfg.PausedRetention))
	if err != nil {
		s.log.Error("prune ended sandboxes", "err", err)
		return
	}
	for _, r := range recs {
		if r.State == store.StatePaused && now.Sub(r.PausedAt) > s.cfg.PausedRetention {
			if err := s.ckpts.deletePausedLocked(ctx, r.ID, "paused longer than the retention period"); err != nil {
				s.log.Error("delete expired paused sandbox", "sandbox", r.ID, "err", err)
			}
			continue
		}
		if !r.Live() && !r.EndedAt.IsZero() && now.Sub(r.EndedAt) > s.cfg.KeepEnded {
			// Its last checkpoint goes with it: one left behind would
			// resume a sandbox the catalog has forgotten.
			if r.Checkpoint != nil && s.cfg.Checkpoints != nil {
				if err := s.cfg.Checkpoints.Delete(ctx, r.Checkpoint.ID); err != nil {
					s.log.Error("delete the checkpoint of an ended sandbox", "sandbox", r.ID, "checkpoint", r.Checkpoint.ID, "err", err)
					continue
				}
			}
			if err := s.store.DeleteSandbox(ctx, r.ID, store.Was(r)); err != nil {
				s.log.Error("prune ended sandbox", "sandbox", r.ID, "err", err)
			}
		}
	}
}
