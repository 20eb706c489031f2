package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/spacesandbox/space/api/agent/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/network"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/store"
)

// A create is two named steps: boot makes a running sandbox whose agent
// answers (with a boot token only spaced knows), and claim makes a booted
// sandbox the caller's. A cold create runs both; a warm pool runs boot
// ahead of demand and claim on demand.

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
	if err := s.validate(&req); err != nil {
		return nil, err
	}
	var diskImage, image string
	if req.Snapshot != "" {
		dir, img, err := s.loadSnapshot(ctx, req.Snapshot, &req)
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		diskImage, image = dir, img
	}
	if p := s.poolFor(req); p != nil {
		for b := p.take(); b != nil; b = p.take() {
			sb, err := s.claim(ctx, b, req)
			if err == nil {
				s.metrics.created(time.Since(start), true)
				return sb, nil
			}
			// A pooled sandbox that cannot be claimed (its agent died, say)
			// is never handed out: tear it down and try the next.
			slog.Warn("discarding pooled sandbox", "sandbox", b.rec.ID, "err", err)
			b.undo()
		}
	}
	// Boots beyond MaxBoots wait: on a busy machine, many boots at once
	// each take longer than they would one after another, and all of them
	// run into the agent's boot timeout.
	select {
	case s.boots <- struct{}{}:
	case <-ctx.Done():
		return nil, errdefs.Wrap(errdefs.ErrUnavailable, ctx.Err(), "waiting for a turn to boot a sandbox")
	}
	b, err := s.boot(ctx, req.Template, image, runtime.Limits{CPUs: req.CPU, MemoryMB: req.MemoryMB, DiskMB: req.DiskMB, MaxProcs: req.MaxProcs}, diskImage, store.StateCreating)
	<-s.boots
	if err != nil {
		s.metrics.createFailed()
		return nil, err
	}
	sb, err := s.claim(ctx, b, req)
	if err != nil {
		b.undo()
		s.metrics.createFailed()
		return nil, err
	}
	s.metrics.created(time.Since(start), false)
	return sb, nil
}

// boot makes a sandbox of template with limits, recorded in state (creating
// for a cold create, pooled for the pool), and waits for its agent. A
// non-empty diskImage is a disk snapshot its writable layer starts from,
// and a non-empty image the template image to use instead of the current.
func (s *Service) boot(ctx context.Context, template, image string, limits runtime.Limits, diskImage, state string) (_ *booted, err error) {
	start := time.Now()
	rootfs, err := s.imageRoot(template, image)
	if err != nil {
		return nil, err
	}
	rec := &store.Sandbox{
		ID: newID(), Template: template, Image: filepath.Base(rootfs), State: state, CreatedAt: time.Now().UTC(),
		CPU: limits.CPUs, MemoryMB: limits.MemoryMB, DiskMB: limits.DiskMB, MaxProcs: limits.MaxProcs,
		// The sandbox's own access token, given to the agent by boot's
		// Init and to the one caller that claims the sandbox.
		AccessToken: newToken(),
	}
	// The boot token opens the agent only until boot's Init: it is in the
	// agent's environment (readable inside the sandbox as /proc/1/environ),
	// so it must never be the token a caller is given. A crash before the
	// Init leaves a record Recover tears down, so it is never stored.
	bootToken := newToken()
	log := slog.With("sandbox", rec.ID)
	var undo cleanup
	defer func() {
		if err != nil {
			undo.run(log)
		}
	}()

	// The record (with its network slot) comes first, so a crash at any
	// later step leaves something Recover finds and removes.
	ep, err := s.recordAndAttach(ctx, rec, log)
	if err != nil {
		return nil, err
	}
	undo.add("delete record", func() error { return s.store.DeleteSandbox(context.Background(), rec.ID) })
	undo.add("detach network", func() error { return network.Detach(ep) })

	spec := runtime.Spec{
		ID: rec.ID, RootFS: rootfs, Netns: ep.NetnsPath,
		Args:      []string{"/usr/local/bin/space-agent"},
		Env:       []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SPACE_AGENT_TOKEN=" + bootToken},
		Limits:    limits,
		DiskImage: diskImage,
		// Nobody waits for a pool sandbox: it boots on the CPU that claimed
		// sandboxes leave idle.
		Background: state == store.StatePooled,
	}
	tNet := time.Now()
	if err := s.rt.Create(ctx, spec); err != nil {
		return nil, err
	}
	tCreate := time.Now()
	undo.add("destroy runtime", func() error { return s.rt.Destroy(context.Background(), rec.ID) })
	if err := s.rt.Start(ctx, rec.ID); err != nil {
		return nil, err
	}

	tStart := time.Now()
	agent := newAgentConn(ep.SandboxIP, bootToken)
	defer func() {
		if err != nil {
			agent.Close()
		}
	}()
	bootCtx, cancel := context.WithTimeout(ctx, s.cfg.AgentBootTimeout)
	defer cancel()
	alive := func() bool {
		st, err := s.rt.State(ctx, rec.ID)
		return err != nil || st == runtime.StateRunning
	}
	if err := agent.waitHealthy(bootCtx, alive); err != nil {
		return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "sandbox agent did not start")
	}
	tHealthy := time.Now()
	// Everything that does not depend on the caller is set while booting,
	// off the claim's path: the sandbox's own access token (the boot token
	// stops working), the platform's env, the default user, the resolver
	// pointed at the gateway and the gateway's CA installed.
	env := s.platformEnv()
	if _, err := agent.Agent.Init(bootCtx, connect.NewRequest(&agentv1.InitRequest{
		AccessToken: rec.AccessToken, EnvVars: env, DefaultUser: "user", Nameserver: ep.HostIP.String(), CaPem: string(s.cfg.Egress.CAPEM),
	})); err != nil {
		return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "sandbox agent does not answer RPCs")
	}
	agent.setToken(rec.AccessToken)
	// Booted, it idles until claimed: give it the CPU share of any other
	// sandbox now, off the claim's path (writes to cpu.shares serialise in
	// the kernel: a burst of claims each writing one queued for ~150 ms).
	if p, ok := s.rt.(runtime.Prioritizer); ok && spec.Background {
		if err := p.Foreground(ctx, rec.ID); err != nil {
			return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "could not raise the booted sandbox's CPU priority")
		}
	}
	log.Debug("sandbox booted", "state", state, "prepare_ms", tNet.Sub(start).Milliseconds(),
		"runsc_create_ms", tCreate.Sub(tNet).Milliseconds(), "runsc_start_ms", tStart.Sub(tCreate).Milliseconds(),
		"agent_health_ms", tHealthy.Sub(tStart).Milliseconds(), "agent_init_ms", time.Since(tHealthy).Milliseconds())

	steps := undo
	undo = cleanup{} // handed to the caller
	return &booted{rec: rec, ep: ep, agent: agent, env: env, undo: func() { agent.Close(); steps.run(log) }}, nil
}

// recordAndAttach writes the record with a free slot and sets up the
// sandbox's network on it. A slot whose range turns out to be in use on the
// host is quarantined and the next one tried, a few times.
func (s *Service) recordAndAttach(ctx context.Context, rec *store.Sandbox, log *slog.Logger) (network.Endpoint, error) {
	for attempt := 1; ; attempt++ {
		if err := s.store.CreateSandbox(ctx, rec, s.cfg.Network.Slots(), s.avoidSlot); err != nil {
			return network.Endpoint{}, fmt.Errorf("record sandbox: %w", err)
		}
		ep, err := s.cfg.Network.Endpoint(rec.ID, rec.Slot)
		if err == nil {
			err = network.Attach(ep)
		}
		if err == nil {
			return ep, nil
		}
		if derr := s.store.DeleteSandbox(context.Background(), rec.ID); derr != nil {
			log.Warn("delete record after failed attach", "err", derr)
		}
		if !errors.Is(err, network.ErrRangeInUse) || attempt == 3 {
			return network.Endpoint{}, errdefs.Wrap(errdefs.ErrUnavailable, err, "could not set up the sandbox network")
		}
		log.Warn("sandbox address range in use on the host; quarantining the slot", "slot", rec.Slot, "err", err)
		s.quarantineSlot(rec.Slot)
	}
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
	tChecked := time.Now()
	initDone := make(chan error, 1)
	if !maps.Equal(req.Env, b.env) {
		go func() {
			ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := b.agent.Agent.Init(ictx, connect.NewRequest(&agentv1.InitRequest{
				AccessToken: b.rec.AccessToken, EnvVars: req.Env, DefaultUser: "user",
			}))
			initDone <- err
		}()
	} else {
		initDone <- nil
	}
	now := time.Now().UTC()
	rec := *b.rec
	rec.State = store.StateRunning
	rec.CreatedAt, rec.ExpiresAt = now, now.Add(req.Timeout)
	rec.Env, rec.Metadata = req.Env, req.Metadata
	rec.AutoPause, rec.AutoResume, rec.KeyID = req.AutoPause, req.AutoResume, req.KeyID
	rec.SnapshotEvery, rec.SnapshotKeep = req.SnapshotEvery, req.SnapshotKeep
	rec.OpenAccess, rec.Network, rec.Secrets = req.OpenAccess, cloneNetwork(req.Network), req.placeholders
	storeErr := s.store.UpdateSandbox(ctx, &rec)
	tRecord := time.Now()
	if err := <-initDone; err != nil {
		return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "sandbox agent init failed")
	}
	if storeErr != nil {
		return nil, fmt.Errorf("record running sandbox: %w", storeErr)
	}
	s.mu.Lock()
	s.live[rec.ID] = &entry{rec: &rec, agent: b.agent, ep: b.ep}
	s.mu.Unlock()
	s.egressChanged()
	slog.Info("sandbox created", "sandbox", rec.ID, "template", rec.Template)
	slog.Debug("sandbox claimed", "sandbox", rec.ID, "check_ms", tChecked.Sub(start).Milliseconds(),
		"record_ms", tRecord.Sub(tChecked).Milliseconds(), "total_ms", time.Since(start).Milliseconds())
	out := fromRecord(&rec)
	out.AccessToken = rec.AccessToken
	return out, nil
}
