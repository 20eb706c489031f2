package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
		root, err := s.imageRoot(req.Template, snapImage)
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
	b, err := s.bootTurn(ctx, bootSpec{img: img, limits: req.limits(), diskImage: diskImage, state: store.StateCreating, volumes: mountRows(req.Volumes)})
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

// bootTurn boots spec once one of MaxBoots turns is free. Boots beyond it
// wait: on a busy machine, many boots at once each take longer than they
// would one after another, and all of them run into the agent's boot
// timeout.
func (s *Service) bootTurn(ctx context.Context, spec bootSpec) (*booted, error) {
	select {
	case s.boots <- struct{}{}:
	case <-ctx.Done():
		return nil, errdefs.Wrap(errdefs.ErrUnavailable, ctx.Err(), "waiting for a turn to boot a sandbox")
	}
	defer func() { <-s.boots }()
	return s.boot(ctx, spec)
}

// bootSpec is what boot makes.
type bootSpec struct {
	img    *Image
	limits runtime.Limits
	// diskImage, when set, is a disk snapshot the writable layer starts
	// from.
	diskImage string
	// state is the record's state while it boots: creating for a cold
	// create, pooled for the pool.
	state string
	// build marks a template build's sandbox: no egress CA in its trust
	// store (it would end up in the template's layers).
	build string
	// volumes are mounted into the sandbox: by name when boot is asked,
	// resolved (with their volume IDs) when bootAgent is.
	volumes []store.VolumeMount
}

// boot makes a sandbox of spec and waits for its agent: it boots the
// image, or restores the template's start checkpoint when it has one.
func (s *Service) boot(ctx context.Context, spec bootSpec) (_ *booted, err error) {
	start := time.Now()
	img := spec.img
	limits := spec.limits
	rec := &store.Sandbox{
		ID: newID(), Template: img.Template, Image: img.ID, State: spec.state, CreatedAt: time.Now().UTC(),
		CPU: limits.CPUs, MemoryMB: limits.MemoryMB, DiskMB: limits.DiskMB, MaxProcs: limits.MaxProcs,
		// The sandbox's own access token, given to the agent by boot's
		// Init and to the one caller that claims the sandbox.
		AccessToken: newToken(),
		Build:       spec.build,
		Volumes:     spec.volumes,
	}
	log := s.log.With("sandbox", rec.ID)
	var undo cleanup
	defer func() {
		if err != nil {
			undo.run(log)
		}
	}()

	// The record (with its network slot) comes first, so a crash at any
	// later step leaves something Recover finds and removes. Its volume
	// mounts are claimed as it is written.
	release, err := s.claimVolumes(ctx, rec)
	if err != nil {
		return nil, err
	}
	ep, err := s.recordAndAttach(ctx, rec, log)
	release()
	if err != nil {
		return nil, err
	}
	spec.volumes = rec.Volumes
	// rec is the record as stored until a claim makes it running (the
	// claim says so in it), and the delete expects it so.
	undo.add("delete record", func() error { return s.store.DeleteSandbox(context.Background(), rec.ID, store.Was(rec)) })
	undo.add("detach network", func() error { return s.cfg.Links.Detach(ep) })

	tNet := time.Now()
	var agent *AgentConn
	if img.Start != nil {
		agent, err = s.restoreInto(ctx, rec.ID, img.Root, ep, limits, nil, img.Start.Dir, img.Start.Token, runtime.PriorityNormal, &undo)
	} else {
		agent, err = s.bootAgent(ctx, rec.ID, img.Root, ep, spec, &undo)
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			agent.Close()
		}
	}()
	tHealthy := time.Now()
	// Everything that does not depend on the caller is set while booting,
	// off the claim's path: the sandbox's own access token (the boot token
	// stops working), the template's and the platform's env, the default
	// user and workdir, the resolver pointed at the gateway and the
	// gateway's CA installed.
	env := maps.Clone(img.Env)
	if spec.build == "" {
		if env == nil {
			env = map[string]string{}
		}
		for k, v := range s.platformEnv() {
			env[k] = v
		}
	}
	init := &agentv1.InitRequest{
		AccessToken: rec.AccessToken, EnvVars: env, DefaultUser: defaultUser(img), DefaultWorkdir: img.Workdir,
		Nameserver: ep.HostIP.String(),
	}
	if spec.build == "" {
		init.CaPem = string(s.cfg.Egress.CAPEM)
	}
	ictx, cancel := context.WithTimeout(ctx, s.cfg.AgentBootTimeout)
	defer cancel()
	if _, err := agent.Agent.Init(ictx, connect.NewRequest(init)); err != nil {
		if connect.CodeOf(err) == connect.CodeInvalidArgument {
			// The image's own config (a USER it does not have).
			return nil, errdefs.Wrap(errdefs.ErrInvalidArgument, err, "the template's config does not work in its image: %s", connectMessage(err))
		}
		return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "sandbox agent does not answer RPCs")
	}
	agent.setToken(rec.AccessToken)
	// Booted, it idles until claimed: give it the CPU share of any other
	// sandbox now, off the claim's path (writes to cpu.shares serialise in
	// the kernel: a burst of claims each writing one queued for ~150 ms).
	if p, ok := s.rt.(runtime.Prioritizer); ok && spec.state == store.StatePooled && img.Start == nil {
		if err := p.Foreground(ctx, rec.ID); err != nil {
			return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "could not raise the booted sandbox's CPU priority")
		}
	}
	log.Debug("sandbox booted", "state", spec.state, "restored", img.Start != nil, "prepare_ms", tNet.Sub(start).Milliseconds(),
		"agent_ms", tHealthy.Sub(tNet).Milliseconds(), "agent_init_ms", time.Since(tHealthy).Milliseconds())

	steps := undo
	undo = cleanup{} // handed to the caller
	return &booted{rec: rec, ep: ep, agent: agent, env: env, undo: func() { agent.Close(); steps.run(log) }}, nil
}

// recordLimits are the limits rec's sandbox was made with.
func recordLimits(rec *store.Sandbox) runtime.Limits {
	return runtime.Limits{CPUs: rec.CPU, MemoryMB: rec.MemoryMB, DiskMB: rec.DiskMB, MaxProcs: rec.MaxProcs}
}

func connectMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// defaultUser is who runs a sandbox's commands unless they say: the
// template's USER, else "user" (the account every E2B-style image has).
func defaultUser(img *Image) string {
	if img.User != "" {
		return img.User
	}
	return "user"
}

// bootAgent creates and starts the sandbox with the agent as init (holding
// a one-time boot token) and waits for it to answer.
func (s *Service) bootAgent(ctx context.Context, id, rootfs string, ep network.Endpoint, spec bootSpec, undo *cleanup) (*AgentConn, error) {
	// The boot token opens the agent only until boot's Init: it is in the
	// agent's environment (readable inside the sandbox as /proc/1/environ),
	// so it must never be the token a caller is given. A crash before the
	// Init leaves a record Recover tears down, so it is never stored.
	bootToken := newToken()
	mounts, err := s.runtimeMounts(ctx, spec.volumes)
	if err != nil {
		return nil, err
	}
	rspec := runtime.Spec{
		ID: id, RootFS: rootfs, Netns: ep.NetnsPath,
		Args:      []string{"/usr/local/bin/space-agent"},
		Env:       []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SPACE_AGENT_TOKEN=" + bootToken},
		Limits:    spec.limits,
		DiskImage: spec.diskImage,
		Priority:  bootPriority(spec.state),
		Mounts:    mounts,
	}
	start := time.Now()
	if err := s.rt.Run(ctx, rspec); err != nil {
		return nil, err
	}
	undo.add("destroy runtime", func() error { return s.destroy(id) })
	running := time.Now()
	agent, err := s.awaitAgent(ctx, id, newAgentConn(ep.SandboxIP, bootToken), "sandbox agent did not start")
	if err == nil {
		s.log.Debug("sandbox agent answered", "sandbox", id, "run_ms", running.Sub(start).Milliseconds(), "wait_ms", time.Since(running).Milliseconds())
	}
	return agent, err
}

// bootOnDisk boots a fresh sandbox rec on the disk image in dir (a pause
// that kept no memory) and gives its agent what a create's boot and claim
// would: token, env, the template's user and workdir, resolver and CA. It
// pushes its undo steps.
func (s *Service) bootOnDisk(ctx context.Context, rec *store.Sandbox, token, rootfs string, ep network.Endpoint, limits runtime.Limits, dir string, undo *cleanup) (*AgentConn, error) {
	agent, err := s.bootAgent(ctx, rec.ID, rootfs, ep, bootSpec{limits: limits, diskImage: dir, state: rec.State, volumes: rec.Volumes}, undo)
	if err != nil {
		return nil, err
	}
	// The user and workdir are the template's, as at the sandbox's create
	// (the agent's own state is not on its disk: /run is a tmpfs).
	user, workdir := "user", ""
	if img, err := s.cfg.Templates.Resolve(ctx, rec.Template); err == nil {
		user, workdir = defaultUser(img), img.Workdir
	} else {
		s.log.Warn("template of a sandbox rebooted on its disk not found; default user and workdir", "sandbox", rec.ID, "template", rec.Template, "err", err)
	}
	ictx, cancel := context.WithTimeout(ctx, s.cfg.AgentBootTimeout)
	defer cancel()
	if _, err := agent.Agent.Init(ictx, connect.NewRequest(&agentv1.InitRequest{
		AccessToken: token, EnvVars: rec.Env, DefaultUser: user, DefaultWorkdir: workdir,
		Nameserver: ep.HostIP.String(), CaPem: string(s.cfg.Egress.CAPEM),
	})); err != nil {
		agent.Close()
		return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "the sandbox booted on its saved disk, but its agent init failed")
	}
	agent.setToken(token)
	return agent, nil
}

// awaitAgent waits, within the agent boot timeout, until the agent of
// sandbox id answers, or the sandbox is seen to stop; it closes agent
// and fails with notAnswered if it does not.
func (s *Service) awaitAgent(ctx context.Context, id string, agent *AgentConn, notAnswered string) (*AgentConn, error) {
	bootCtx, cancel := context.WithTimeout(ctx, s.cfg.AgentBootTimeout)
	defer cancel()
	alive := func() bool {
		st, err := s.rt.State(ctx, id)
		return err != nil || st == runtime.StateRunning
	}
	if err := agent.waitHealthy(bootCtx, alive); err != nil {
		agent.Close()
		return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "%s", notAnswered)
	}
	return agent, nil
}

// bootPriority is the CPU priority a sandbox boots at: nobody waits for a
// pool sandbox, so it boots on the CPU that claimed sandboxes leave idle.
func bootPriority(state string) runtime.Priority {
	if state == store.StatePooled {
		return runtime.PriorityBackground
	}
	return runtime.PriorityNormal
}

// restoreInto restores the image in dir as sandbox id on ep at CPU
// priority prio, and waits for its agent, which still holds token; a
// sandbox restored at another priority than the normal one has the normal
// one once its agent answers. It pushes its undo steps.
func (s *Service) restoreInto(ctx context.Context, id, rootfs string, ep network.Endpoint, limits runtime.Limits, mounts []runtime.Mount, dir, token string, prio runtime.Priority, undo *cleanup) (*AgentConn, error) {
	cp, _ := s.rt.(runtime.Checkpointer)
	spec := runtime.Spec{
		ID: id, RootFS: rootfs, Netns: ep.NetnsPath,
		Args:   []string{"/usr/local/bin/space-agent"},
		Env:    []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Limits: limits,
		// The checkpointed sandbox's volumes, at the same paths.
		Mounts:   mounts,
		Priority: prio,
	}
	start := time.Now()
	if err := cp.Restore(ctx, spec, dir); err != nil {
		return nil, restoreError(err, mounts)
	}
	undo.add("destroy runtime", func() error { return s.destroy(id) })
	restored := time.Now()
	// A pause checkpoints a frozen sandbox, and it comes back frozen.
	if st, err := s.rt.State(ctx, id); err == nil && st == runtime.StatePaused {
		if err := cp.Thaw(ctx, id); err != nil {
			return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "could not start the restored sandbox")
		}
	}
	agent, err := s.awaitAgent(ctx, id, newAgentConn(ep.SandboxIP, token), "restored sandbox agent did not answer")
	if err != nil {
		return nil, err
	}
	s.log.Debug("restored sandbox agent answered", "sandbox", id, "restore_ms", restored.Sub(start).Milliseconds(), "wait_ms", time.Since(restored).Milliseconds())
	if p, ok := s.rt.(runtime.Prioritizer); ok && prio != runtime.PriorityNormal {
		if err := p.Foreground(ctx, id); err != nil {
			agent.Close()
			return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "could not give the restored sandbox the normal CPU priority")
		}
	}
	return agent, nil
}

// restoredStart is a sandbox started from the image of a running one (a
// resume, a fork, a create from a full snapshot): restored as id on ep
// with limits and the volume mounts the image was taken with.
type restoredStart struct {
	id, rootfs, dir string
	ep              network.Endpoint
	limits          runtime.Limits
	volumes         []store.VolumeMount
	// held is the token the image's agent answers to; token the one it is
	// given (held again for a resume), with env.
	held, token string
	env         map[string]string
}

// startRestored restores st at the urgent CPU share (someone waits for
// it), then sends its agent Init: st.token and st.env, and its resolver
// and trust store pointed at this node's egress gateway on the sandbox's
// (new) address. It pushes its undo steps.
func (s *Service) startRestored(ctx context.Context, st restoredStart, undo *cleanup) (*AgentConn, error) {
	mounts, err := s.runtimeMounts(ctx, st.volumes)
	if err != nil {
		return nil, err
	}
	agent, err := s.restoreInto(ctx, st.id, st.rootfs, st.ep, st.limits, mounts, st.dir, st.held, runtime.PriorityUrgent, undo)
	if err != nil {
		return nil, err
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := agent.Agent.Init(ictx, connect.NewRequest(&agentv1.InitRequest{
		// No default user or workdir: the restored agent keeps its own.
		AccessToken: st.token, EnvVars: st.env,
		Nameserver: st.ep.HostIP.String(), CaPem: string(s.cfg.Egress.CAPEM),
	})); err != nil {
		agent.Close()
		return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "restored sandbox agent init failed")
	}
	agent.setToken(st.token)
	return agent, nil
}

// recordAndAttach writes the record with a free slot and sets up the
// sandbox's network on it. A slot whose range turns out to be in use on the
// host is quarantined and the next one tried, a few times.
func (s *Service) recordAndAttach(ctx context.Context, rec *store.Sandbox, log *slog.Logger) (network.Endpoint, error) {
	for attempt := 1; ; attempt++ {
		if err := s.store.CreateSandbox(ctx, rec, s.cfg.Network.Slots(), s.slots.avoid); err != nil {
			return network.Endpoint{}, fmt.Errorf("record sandbox: %w", err)
		}
		ep, err := s.cfg.Network.Endpoint(rec.ID, rec.Slot)
		if err == nil {
			err = s.cfg.Links.Attach(ep)
		}
		if err == nil {
			return ep, nil
		}
		if derr := s.store.DeleteSandbox(context.Background(), rec.ID, store.Was(rec)); derr != nil {
			log.Warn("delete record after failed attach", "err", derr)
		}
		if !errors.Is(err, network.ErrRangeInUse) || attempt == 3 {
			return network.Endpoint{}, errdefs.Wrap(errdefs.ErrUnavailable, err, "could not set up the sandbox network")
		}
		log.Warn("sandbox address range in use on the host; quarantining the slot", "slot", rec.Slot, "err", err)
		s.slots.quarantine(rec.Slot)
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
