package sandbox

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/spacesandbox/space/internal/admission"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

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
	e, ok := c.live.entry(id)
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
	q, err := c.live.reserve(ctx, tenant.Usage{Sandboxes: req.Count, VCPU: req.Count * cpu, MemoryMB: req.Count * memoryMB})
	if err != nil {
		return nil, err
	}
	defer c.live.release(q)
	for range req.Count {
		r, err := c.admits.admit(ctx, c.admits.need(memoryMB, c.admits.measured(id).Memory, 0, false), "fork")
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
	rootfs, err := c.booter.imageRoot(parent.Template, parent.Image)
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
	ep, err := c.booter.recordAndAttach(ctx, rec, log, &undo)
	if err != nil {
		return nil, err
	}
	// The new agent still answers to the old token: it is given its own,
	// its env, and its resolver is pointed at its own gateway address.
	token := newToken()
	agent, err := c.booter.startRestored(ctx, restoredStart{
		id: rec.ID, rootfs: rootfs, dir: dir, ep: ep, limits: recordLimits(tmpl), volumes: rec.Volumes,
		held: tmpl.AccessToken, token: token, env: tmpl.Env,
	}, &undo)
	if err != nil {
		return nil, err
	}
	// rec stays the record as created, which the undo's delete expects,
	// until the running one is written.
	now := time.Now().UTC()
	running := *rec
	running.State, running.AccessToken = store.StateRunning, token
	running.CreatedAt, running.ExpiresAt = now, now.Add(timeout)
	running.Env, running.Metadata = maps.Clone(tmpl.Env), maps.Clone(tmpl.Metadata)
	running.OpenAccess, running.Network, running.Secrets = tmpl.OpenAccess, cloneNetworkRow(tmpl.Network), maps.Clone(tmpl.Secrets)
	running.AutoPause, running.AutoResume, running.AutoPauseDiskOnly = tmpl.AutoPause, tmpl.AutoResume, tmpl.AutoPauseDiskOnly
	running.SnapshotEvery, running.SnapshotKeep = tmpl.SnapshotEvery, tmpl.SnapshotKeep
	if err := c.svc.store.UpdateSandbox(ctx, &running, store.Was(rec)); err != nil {
		agent.Close()
		return nil, fmt.Errorf("record new sandbox: %w", err)
	}
	c.live.add(newLiveEntry(&running, agent, ep), q, usageOf(running.CPU, running.MemoryMB))
	r.Done(ctx, running.ID)
	log.Info("sandbox restored from a running sandbox's image")
	out := fromRecord(&running)
	out.AccessToken = token
	return out, nil
}
