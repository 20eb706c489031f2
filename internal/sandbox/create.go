package sandbox

import (
	"context"
	"fmt"
	"maps"
	"os"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/spacesandbox/space/api/agent/v1"
	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/network"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// A create is two named steps: boot (the booter's, boot.go) makes a running
// sandbox whose agent answers (with a boot token only spaced knows), and
// claim makes a booted sandbox the caller's. A cold create runs both; a
// warm pool runs boot ahead of demand and claim on demand.

// booted is a sandbox that boot made and nobody has claimed.
type booted struct {
	rec   *store.Sandbox
	ep    network.Endpoint
	agent *AgentConn
	// env is what boot's Init gave the agent (the platform's env).
	env map[string]string
	// undo tears the sandbox down and removes its record.
	undo func()
}

// Create makes a sandbox and answers once its agent can run a command. It
// takes a sandbox from the template's warm pool when the request fits one,
// else it boots one. On any failure every step done so far is undone.
func (s *Service) Create(ctx context.Context, req CreateRequest) (*Sandbox, error) {
	start := time.Now()
	if err := s.refuseIfDraining(); err != nil {
		return nil, err
	}
	if err := qualifyNames(ctx, &req); err != nil {
		return nil, err
	}
	var snap *checkpoint.Manifest
	if req.Snapshot != "" {
		m, err := s.snaps.snapshotManifest(ctx, req.Snapshot)
		if err != nil {
			return nil, err
		}
		if req.Template == "" {
			req.Template = m.Template
		}
		if hasMemory(m) {
			return s.snaps.createFromImage(ctx, req, m)
		}
		snap, req.Snapshot = m, m.ID
	}
	img, err := s.validate(ctx, &req)
	if err != nil {
		return nil, err
	}
	if req.reserved, err = s.live.reserve(ctx, usageOf(req.CPU, req.MemoryMB)); err != nil {
		return nil, err
	}
	defer s.live.release(req.reserved)
	var diskImage string
	if snap != nil {
		dir, snapImage, err := s.snaps.loadSnapshot(ctx, snap, &req)
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		// The snapshot's files go onto the image it was taken on, and its
		// processes start afresh (no start checkpoint).
		root, err := s.booter.imageRoot(req.Template, snapImage)
		if err != nil {
			return nil, err
		}
		onSnap := *img
		onSnap.ID, onSnap.Root, onSnap.Start = snapImage, root, nil
		img, diskImage = &onSnap, dir
	}
	if p := s.pools.poolFor(req, img); p != nil {
		for b := p.take(img.ID); b != nil; b = p.take(img.ID) {
			sb, err := s.claim(ctx, b, req)
			if err == nil {
				s.metrics.created(time.Since(start), true)
				return sb, nil
			}
			// A pooled sandbox that cannot be claimed (its agent died, say)
			// is never handed out: tear it down and try the next.
			s.log.Warn("discarding pooled sandbox", "sandbox", b.rec.ID, "err", err)
			b.undo()
		}
	}
	// A boot takes the node's memory and disk: admitted first, before
	// anything of it is made. A template with a start command restores
	// its checkpoint, whose memory image says what it will take.
	var startImage, diskBytes int64
	if img.Start != nil {
		startImage = imageBytes(img.Start.Dir)
	}
	if diskImage != "" {
		diskBytes = imageBytes(diskImage)
	}
	r, err := s.admits.admit(ctx, s.admits.need(req.MemoryMB, startImage, diskBytes, img.Start == nil && diskImage == ""), "create")
	if err != nil {
		return nil, err
	}
	b, err := s.booter.bootTurn(ctx, bootSpec{img: img, limits: req.limits(), diskImage: diskImage, state: store.StateCreating, volumes: mountRows(req.Volumes)})
	if err != nil {
		r.Cancel()
		s.metrics.createFailed()
		return nil, err
	}
	sb, err := s.claim(ctx, b, req)
	if err != nil {
		b.undo()
		r.Cancel()
		s.metrics.createFailed()
		return nil, err
	}
	r.Done(ctx, sb.ID)
	s.metrics.created(time.Since(start), false)
	return sb, nil
}

// recordLimits are the limits rec's sandbox was made with.
func recordLimits(rec *store.Sandbox) runtime.Limits {
	return runtime.Limits{CPUs: rec.CPU, MemoryMB: rec.MemoryMB, DiskMB: rec.DiskMB, MaxProcs: rec.MaxProcs}
}

// claim makes a booted sandbox the caller's: its env vars, metadata, timeout
// and policy, then the record says running and the sandbox is live. The
// sandbox's access token was made for it at boot and is given to this
// caller only (a pooled sandbox is claimed once). The agent is told only
// what depends on the caller, its env vars, and that runs while the record
// is written; a create without env vars of its own talks to the agent not
// at all.
func (s *Service) claim(ctx context.Context, b *booted, req CreateRequest) (*Sandbox, error) {
	start := time.Now()
	// A pooled sandbox may have died while it waited (its sandbox
	// process killed, out of memory): never hand it out.
	if st, err := s.rt.State(ctx, b.rec.ID); err != nil || st != runtime.StateRunning {
		return nil, errdefs.New(errdefs.ErrUnavailable, "sandbox %s is not running (state %v, %v)", b.rec.ID, st, err)
	}
	// A pooled sandbox booted with the template's limits gets the
	// caller's (poolFor took it only if the runtime can give them).
	limits := req.limits()
	if booted := recordLimits(b.rec); limits != booted {
		rs, ok := s.rt.(runtime.Resizer)
		if !ok || !rs.Resizable(booted, limits) {
			return nil, errdefs.New(errdefs.ErrUnavailable, "sandbox %s was booted with other limits", b.rec.ID)
		}
		if err := rs.Resize(ctx, b.rec.ID, limits); err != nil {
			return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "could not give sandbox %s its limits", b.rec.ID)
		}
	}
	tChecked := time.Now()
	initDone := make(chan error, 1)
	if !maps.Equal(req.Env, b.env) {
		go func() {
			ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := b.agent.Agent.Init(ictx, connect.NewRequest(&agentv1.InitRequest{
				// No default user: the one boot set (the template's) stays.
				AccessToken: b.rec.AccessToken, EnvVars: req.Env,
			}))
			initDone <- err
		}()
	} else {
		initDone <- nil
	}
	now := time.Now().UTC()
	rec := *b.rec
	rec.Tenant = tenant.FromContext(ctx).Tenant
	rec.State = store.StateRunning
	rec.CPU, rec.MemoryMB, rec.DiskMB, rec.MaxProcs = limits.CPUs, limits.MemoryMB, limits.DiskMB, limits.MaxProcs
	rec.CreatedAt, rec.ExpiresAt = now, now.Add(req.Timeout)
	rec.Env, rec.Metadata = req.Env, req.Metadata
	rec.AutoPause, rec.AutoResume, rec.KeyID = req.AutoPause, req.AutoResume, req.KeyID
	rec.AutoPauseDiskOnly = req.AutoPauseDiskOnly
	rec.SnapshotEvery, rec.SnapshotKeep = req.SnapshotEvery, req.SnapshotKeep
	rec.IdleFreeze, rec.IdleHibernate = req.IdleFreeze, req.IdleHibernate
	rec.OpenAccess, rec.Network, rec.Secrets = req.OpenAccess, NetworkRow(req.Network), req.placeholders
	storeErr := s.store.UpdateSandbox(ctx, &rec, store.Was(b.rec))
	tRecord := time.Now()
	initErr := <-initDone // the init reads b.rec no more
	if storeErr == nil {
		*b.rec = rec // what the undo of the boot deletes, if the init failed
	}
	if err := initErr; err != nil {
		return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "sandbox agent init failed")
	}
	if storeErr != nil {
		return nil, fmt.Errorf("record running sandbox: %w", storeErr)
	}
	s.live.add(newLiveEntry(&rec, b.agent, b.ep), req.reserved, req.reserved.useOrZero())
	s.log.Info("sandbox created", "sandbox", rec.ID, "template", rec.Template)
	s.log.Debug("sandbox claimed", "sandbox", rec.ID, "check_ms", tChecked.Sub(start).Milliseconds(),
		"record_ms", tRecord.Sub(tChecked).Milliseconds(), "total_ms", time.Since(start).Milliseconds())
	out := fromRecord(&rec)
	out.AccessToken = rec.AccessToken
	return out, nil
}
