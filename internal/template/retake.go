package template

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/recipe"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// A start checkpoint restores only into the runtime build (runsc version)
// and agent that took it, and both are part of its key. A node that runs
// another (runsc or spaced upgraded since the build, or a cluster node of
// another version) does not restore the build's checkpoint: it takes the
// start again on the build's own image, once, under the key of its own
// runtime and agent, and its sandboxes restore that one. Another node of
// the same versions finds it in the object store and takes nothing.

// startKey is the key of the start checkpoint of build b that this node
// restores: the build's own when this node took it or could have, else
// the one of this node's runtime and agent, taken now on img (the build's
// image here) unless it is stored already. Callers waiting for the same
// take share it; one that gives up leaves it running for the others.
func (s *Service) startKey(ctx context.Context, b *store.Build, img imageRef) (string, error) {
	res := b.Result
	key, spec := s.ownStart(res)
	if key == res.Start {
		return key, nil
	}
	s.mu.Lock()
	failed := s.retakeFailed[key]
	s.mu.Unlock()
	if failed.err != nil && time.Since(failed.at) < retakeBackoff {
		return "", failed.err
	}
	taken := s.retakes.DoChan(key, func() (any, error) {
		err := s.retakeStart(b, img, *spec, key)
		s.mu.Lock()
		if err != nil {
			s.retakeFailed[key] = retakeFailure{err: err, at: time.Now()}
		} else {
			delete(s.retakeFailed, key)
		}
		s.mu.Unlock()
		return nil, err
	})
	select {
	case r := <-taken:
		return key, r.Err
	case <-ctx.Done():
		return "", context.Cause(ctx)
	}
}

// retakeBackoff is how long a failed take is the answer before the next
// resolve tries again (a start that fails would otherwise run once per
// create).
const retakeBackoff = time.Minute

type retakeFailure struct {
	err error
	at  time.Time
}

// ownStart is the key the start checkpoint of build result res has when
// this node's runtime and agent take it, and the start command it takes:
// the result's own key, and no command, for a build made before the start
// command was recorded with it (trusted as it is).
func (s *Service) ownStart(res *store.BuildImage) (string, *recipe.Start) {
	var spec recipe.Start
	if len(res.StartSpec) == 0 || json.Unmarshal(res.StartSpec, &spec) != nil {
		return res.Start, nil
	}
	return recipe.StartKey(res.Key, spec, s.im.agent.digest, s.cfg.Engine), &spec
}

// retakeStart takes the start of build b again on img under key, as the
// build's own start step does (in a build sandbox of the build's limits
// and network, within the build timeout, in a build slot). The start
// command's output goes to a log of its own beside the builds' logs.
func (s *Service) retakeStart(b *store.Build, img imageRef, spec recipe.Start, key string) error {
	logPath := filepath.Join(s.cfg.LogDir, "start-"+key[:12]+".log")
	l := &buildLog{path: logPath, changed: make(chan struct{})}
	defer l.finish()
	// It runs as a build does: stopped by the service's Close, which
	// waits for it.
	ctx, cancel := context.WithCancelCause(tenant.NewContext(context.Background(), tenant.Principal{Tenant: tenant.Of(b.Tenant)}))
	defer cancel(nil)
	id := "start-" + key[:12]
	if !s.track(id, &active{cancel: cancel, log: l}) {
		return errdefs.New(errdefs.ErrUnavailable, "spaced is shutting down")
	}
	defer func() {
		s.mu.Lock()
		delete(s.active, id)
		s.mu.Unlock()
		s.wg.Done()
	}()
	ctx, stop := context.WithTimeout(ctx, s.cfg.BuildTimeout)
	defer stop()
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return errdefs.New(errdefs.ErrUnavailable, "template %s: no build slot within %s to take its start again for this node's runtime", b.Template, s.cfg.BuildTimeout)
	}
	defer func() { <-s.slots }()
	var rec recipe.Recipe
	_ = json.Unmarshal(b.Recipe, &rec) // for the step number in the log
	r := &run{svc: s, b: *b, rec: &rec, log: l, key: b.Result.Key, config: decodeConfig(b.Result.Config),
		limits: s.buildLimits(b)}
	defer r.unpin()
	log := s.log.With("template", b.Template, "build", b.ID, "start", key[:12], "engine", s.cfg.Engine)
	log.Info("taking a template's start again: its checkpoint was taken by another runtime or agent than this node's", "was", b.Result.Start[:12])
	began := time.Now()
	got, err := r.started(ctx, img, spec)
	if err == nil && got != key {
		err = fmt.Errorf("the start was taken under key %s, want %s", got[:12], key[:12])
	}
	if err != nil {
		log.Warn("taking a template's start again failed", "err", err, "log", logPath)
		return errdefs.Wrap(errdefs.ErrUnavailable, err, "template %s: its started checkpoint was taken by another runtime than this node's, and taking it again failed: %s", b.Template, errdefs.PublicMessage(err))
	}
	log.Info("template's start taken again", "took_ms", time.Since(began).Milliseconds())
	return nil
}
