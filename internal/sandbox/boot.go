package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/spacesandbox/space/api/agent/v1"
	"github.com/spacesandbox/space/internal/admission"
	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/network"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// booter boots and restores sandboxes on this host, and tears them down:
// the record with its network slot and volume claims, the network, the
// runtime's sandbox and the wait for its agent, and the manifest a
// checkpoint needs to be restored here again. Every start stands on it (a
// create's boot, a pool refill, a build's sandbox, a resume, a fork, a
// create from a snapshot, a wake from hibernation), and every end. It
// keeps no state of its own but the turns that bound how many sandboxes
// start at once, so the parts that start sandboxes share one.
type booter struct {
	log   *slog.Logger
	store store.Sandboxes
	rt    runtime.Runtime
	// templates gives the image a sandbox runs on, and the default user
	// and workdir of one booted again on its saved disk.
	templates Templates
	// plan and links are the network slots' addresses and the host's
	// networking that makes and removes a sandbox's namespace and veth.
	plan  network.Plan
	links Network
	// slots are the network slots held back from allocation.
	slots *slots
	// volumes is the volume service (nil: no volumes on this node).
	volumes Volumes
	// adm forgets what it measured of a sandbox once it is gone (nil: no
	// budgets).
	adm *admission.Controller
	// caPEM is the egress gateway's CA, installed in every sandbox's
	// trust store (build sandboxes' excepted).
	caPEM            []byte
	agentBootTimeout time.Duration
	// turns holds a token per sandbox starting now (MaxBoots).
	turns chan struct{}
}

// newBooter returns the booter of a service of cfg (its defaults filled in).
func newBooter(cfg Config, st store.Sandboxes, rt runtime.Runtime, sl *slots, adm *admission.Controller) *booter {
	return &booter{
		log: cfg.Logger, store: st, rt: rt, templates: cfg.Templates,
		plan: cfg.Network, links: cfg.Links, slots: sl, volumes: cfg.Volumes, adm: adm,
		caPEM: cfg.Egress.CAPEM, agentBootTimeout: cfg.AgentBootTimeout,
		turns: make(chan struct{}, cfg.MaxBoots),
	}
}

// bootTurn boots spec once one of MaxBoots turns is free. Boots beyond it
// wait: on a busy machine, many boots at once each take longer than they
// would one after another, and all of them run into the agent's boot
// timeout.
func (b *booter) bootTurn(ctx context.Context, spec bootSpec) (*booted, error) {
	done, err := b.turn(ctx, "boot")
	if err != nil {
		return nil, err
	}
	defer done()
	return b.boot(ctx, spec)
}

// turn waits for one of MaxBoots turns to start a sandbox (what names the
// start in the error of a wait the caller gave up); done gives it back.
func (b *booter) turn(ctx context.Context, what string) (done func(), err error) {
	select {
	case b.turns <- struct{}{}:
		return func() { <-b.turns }, nil
	case <-ctx.Done():
		return nil, errdefs.Wrap(errdefs.ErrUnavailable, ctx.Err(), "waiting for a turn to %s a sandbox", what)
	}
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
func (b *booter) boot(ctx context.Context, spec bootSpec) (_ *booted, err error) {
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
	log := b.log.With("sandbox", rec.ID)
	var undo cleanup
	defer func() {
		if err != nil {
			undo.run(log)
		}
	}()

	// The record (with its network slot) comes first, so a crash at any
	// later step leaves something Recover finds and removes. rec is the
	// record as stored until a claim makes it running (the claim says so
	// in it), and the undo's delete expects it so.
	ep, err := b.recordAndAttach(ctx, rec, log, &undo)
	if err != nil {
		return nil, err
	}
	spec.volumes = rec.Volumes

	tNet := time.Now()
	var agent *AgentConn
	if img.Start != nil {
		agent, err = b.restoreInto(ctx, rec.ID, img.Root, ep, limits, nil, img.Start.Dir, img.Start.Token, runtime.PriorityNormal, &undo)
	} else {
		agent, err = b.bootAgent(ctx, rec.ID, img.Root, ep, spec, &undo)
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
		for k, v := range platformEnv(b.caPEM) {
			env[k] = v
		}
	}
	init := &agentv1.InitRequest{
		AccessToken: rec.AccessToken, EnvVars: env, DefaultUser: defaultUser(img), DefaultWorkdir: img.Workdir,
		Nameserver: ep.HostIP.String(),
	}
	if spec.build == "" {
		init.CaPem = string(b.caPEM)
	}
	ictx, cancel := context.WithTimeout(ctx, b.agentBootTimeout)
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
	if p, ok := b.rt.(runtime.Prioritizer); ok && spec.state == store.StatePooled && img.Start == nil {
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
func (b *booter) bootAgent(ctx context.Context, id, rootfs string, ep network.Endpoint, spec bootSpec, undo *cleanup) (*AgentConn, error) {
	// The boot token opens the agent only until boot's Init: it is in the
	// agent's environment (readable inside the sandbox as /proc/1/environ),
	// so it must never be the token a caller is given. A crash before the
	// Init leaves a record Recover tears down, so it is never stored.
	bootToken := newToken()
	mounts, err := b.runtimeMounts(ctx, spec.volumes)
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
	if err := b.rt.Run(ctx, rspec); err != nil {
		return nil, err
	}
	undo.add("destroy runtime", func() error { return b.destroy(context.Background(), id) })
	running := time.Now()
	agent, err := b.awaitAgent(ctx, id, newAgentConn(ep.SandboxIP, bootToken), "sandbox agent did not start")
	if err == nil {
		b.log.Debug("sandbox agent answered", "sandbox", id, "run_ms", running.Sub(start).Milliseconds(), "wait_ms", time.Since(running).Milliseconds())
	}
	return agent, err
}

// bootOnDisk boots a fresh sandbox rec on the disk image in dir (a pause
// that kept no memory) and gives its agent what a create's boot and claim
// would: token, env, the template's user and workdir, resolver and CA. It
// pushes its undo steps.
func (b *booter) bootOnDisk(ctx context.Context, rec *store.Sandbox, token, rootfs string, ep network.Endpoint, limits runtime.Limits, dir string, undo *cleanup) (*AgentConn, error) {
	agent, err := b.bootAgent(ctx, rec.ID, rootfs, ep, bootSpec{limits: limits, diskImage: dir, state: rec.State, volumes: rec.Volumes}, undo)
	if err != nil {
		return nil, err
	}
	// The user and workdir are the template's, as at the sandbox's create
	// (the agent's own state is not on its disk: /run is a tmpfs).
	user, workdir := "user", ""
	if img, err := b.templates.Resolve(ctx, rec.Template); err == nil {
		user, workdir = defaultUser(img), img.Workdir
	} else {
		b.log.Warn("template of a sandbox rebooted on its disk not found; default user and workdir", "sandbox", rec.ID, "template", rec.Template, "err", err)
	}
	ictx, cancel := context.WithTimeout(ctx, b.agentBootTimeout)
	defer cancel()
	if _, err := agent.Agent.Init(ictx, connect.NewRequest(&agentv1.InitRequest{
		AccessToken: token, EnvVars: rec.Env, DefaultUser: user, DefaultWorkdir: workdir,
		Nameserver: ep.HostIP.String(), CaPem: string(b.caPEM),
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
func (b *booter) awaitAgent(ctx context.Context, id string, agent *AgentConn, notAnswered string) (*AgentConn, error) {
	bootCtx, cancel := context.WithTimeout(ctx, b.agentBootTimeout)
	defer cancel()
	alive := func() bool {
		st, err := b.rt.State(ctx, id)
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
func (b *booter) restoreInto(ctx context.Context, id, rootfs string, ep network.Endpoint, limits runtime.Limits, mounts []runtime.Mount, dir, token string, prio runtime.Priority, undo *cleanup) (*AgentConn, error) {
	cp, _ := b.rt.(runtime.Checkpointer)
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
	undo.add("destroy runtime", func() error { return b.destroy(context.Background(), id) })
	restored := time.Now()
	// A pause checkpoints a frozen sandbox, and it comes back frozen.
	if st, err := b.rt.State(ctx, id); err == nil && st == runtime.StatePaused {
		if err := cp.Thaw(ctx, id); err != nil {
			return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "could not start the restored sandbox")
		}
	}
	agent, err := b.awaitAgent(ctx, id, newAgentConn(ep.SandboxIP, token), "restored sandbox agent did not answer")
	if err != nil {
		return nil, err
	}
	b.log.Debug("restored sandbox agent answered", "sandbox", id, "restore_ms", restored.Sub(start).Milliseconds(), "wait_ms", time.Since(restored).Milliseconds())
	if p, ok := b.rt.(runtime.Prioritizer); ok && prio != runtime.PriorityNormal {
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
func (b *booter) startRestored(ctx context.Context, st restoredStart, undo *cleanup) (*AgentConn, error) {
	mounts, err := b.runtimeMounts(ctx, st.volumes)
	if err != nil {
		return nil, err
	}
	agent, err := b.restoreInto(ctx, st.id, st.rootfs, st.ep, st.limits, mounts, st.dir, st.held, runtime.PriorityUrgent, undo)
	if err != nil {
		return nil, err
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := agent.Agent.Init(ictx, connect.NewRequest(&agentv1.InitRequest{
		// No default user or workdir: the restored agent keeps its own.
		AccessToken: st.token, EnvVars: st.env,
		Nameserver: st.ep.HostIP.String(), CaPem: string(b.caPEM),
	})); err != nil {
		agent.Close()
		return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "restored sandbox agent init failed")
	}
	agent.setToken(st.token)
	return agent, nil
}

// recordAndAttach writes the record with a free slot, its volume mounts
// claimed as it is written, and sets up the sandbox's network on it. It
// pushes its undo steps; the record's delete expects it as rec says when
// the undo runs, so a caller that writes the record again changes rec only
// once the write succeeded.
func (b *booter) recordAndAttach(ctx context.Context, rec *store.Sandbox, log *slog.Logger, undo *cleanup) (network.Endpoint, error) {
	release, err := b.claimVolumes(ctx, rec)
	if err != nil {
		return network.Endpoint{}, err
	}
	ep, err := b.recordOnFreeSlot(ctx, rec, log)
	release()
	if err != nil {
		return network.Endpoint{}, err
	}
	undo.add("delete record", func() error { return b.store.DeleteSandbox(context.Background(), rec.ID, store.Was(rec)) })
	undo.add("detach network", func() error { return b.links.Detach(ep) })
	return ep, nil
}

// recordOnFreeSlot writes the record with a free slot and sets up the
// sandbox's network on it. A slot whose range turns out to be in use on the
// host is quarantined and the next one tried, a few times.
func (b *booter) recordOnFreeSlot(ctx context.Context, rec *store.Sandbox, log *slog.Logger) (network.Endpoint, error) {
	for attempt := 1; ; attempt++ {
		if err := b.store.CreateSandbox(ctx, rec, b.plan.Slots(), b.slots.avoid); err != nil {
			return network.Endpoint{}, fmt.Errorf("record sandbox: %w", err)
		}
		ep, err := b.plan.Endpoint(rec.ID, rec.Slot)
		if err == nil {
			err = b.links.Attach(ep)
		}
		if err == nil {
			return ep, nil
		}
		if derr := b.store.DeleteSandbox(context.Background(), rec.ID, store.Was(rec)); derr != nil {
			log.Warn("delete record after failed attach", "err", derr)
		}
		if !errors.Is(err, network.ErrRangeInUse) || attempt == 3 {
			return network.Endpoint{}, errdefs.Wrap(errdefs.ErrUnavailable, err, "could not set up the sandbox network")
		}
		log.Warn("sandbox address range in use on the host; quarantining the slot", "slot", rec.Slot, "err", err)
		b.slots.quarantine(rec.Slot)
	}
}

// attachAgain sets up again the network of sandbox id, which its pause
// tore down, on slot: what a failed teardown left under its names goes
// first (the caller holds the paused sandbox: nothing else has them). It
// pushes its undo step.
func (b *booter) attachAgain(id string, slot int, log *slog.Logger, undo *cleanup) (network.Endpoint, error) {
	ep, err := b.plan.Endpoint(id, slot)
	if err != nil {
		return network.Endpoint{}, errdefs.Wrap(errdefs.ErrUnavailable, err, "could not set up the sandbox network")
	}
	if err := b.links.Detach(ep); err != nil {
		log.Warn("remove the paused sandbox's leftover network", "err", err)
	}
	if err := b.attach(ep, undo); err != nil {
		return network.Endpoint{}, err
	}
	return ep, nil
}

// attach sets up the network on ep, and pushes its removal.
func (b *booter) attach(ep network.Endpoint, undo *cleanup) error {
	if err := b.links.Attach(ep); err != nil {
		return errdefs.Wrap(errdefs.ErrUnavailable, err, "could not set up the sandbox network")
	}
	undo.add("detach network", func() error { return b.links.Detach(ep) })
	return nil
}

// teardown removes sandbox id from this host: its runtime sandbox (and
// what admission counted of it) and its network on ep.
func (b *booter) teardown(ctx context.Context, id string, ep network.Endpoint) error {
	var errs []error
	if err := b.destroy(ctx, id); err != nil {
		errs = append(errs, err)
	}
	if err := b.links.Detach(ep); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("tear down sandbox %s: %w", id, err)
	}
	return nil
}

// destroy removes the runtime's sandbox id, and with it what admission
// counted of it (a teardown's first half, and an undo step of its own).
func (b *booter) destroy(ctx context.Context, id string) error {
	if err := b.rt.Destroy(ctx, id); err != nil {
		return err
	}
	b.adm.Forget(id)
	return nil
}

// imageRoot is the directory of image of template.
func (b *booter) imageRoot(template, image string) (string, error) {
	return b.templates.ImageRoot(template, image)
}

// claimVolumes resolves rec.Volumes and claims them for rec; the caller
// writes rec, then calls release. Without mounts it does nothing.
func (b *booter) claimVolumes(ctx context.Context, rec *store.Sandbox) (release func(), err error) {
	if len(rec.Volumes) == 0 {
		return func() {}, nil
	}
	vs, err := nodeVolumes(b.volumes)
	if err != nil {
		return nil, err
	}
	resolved, release, err := vs.Claim(ctx, rec.ID, rec.Volumes)
	if err != nil {
		return nil, err
	}
	rec.Volumes = resolved
	return release, nil
}

// runtimeMounts are the runtime's mounts of resolved volume mounts.
func (b *booter) runtimeMounts(ctx context.Context, vols []store.VolumeMount) ([]runtime.Mount, error) {
	if len(vols) == 0 {
		return nil, nil
	}
	vs, err := nodeVolumes(b.volumes)
	if err != nil {
		return nil, err
	}
	out := make([]runtime.Mount, 0, len(vols))
	for _, v := range vols {
		src, err := vs.Source(ctx, v.VolumeID)
		if err != nil {
			return nil, err
		}
		out = append(out, runtime.Mount{Source: src, Destination: v.Path, ReadOnly: v.ReadOnly})
	}
	return out, nil
}

// manifestOf is the manifest of artifact id of rec, and the state to seal
// in it; meta is added to the manifest's Meta. It names what a restore
// needs to find again (the runtime's version, the image, the limits and
// the volumes), which checkRestorable checks.
func (b *booter) manifestOf(rec *store.Sandbox, id, kind string, meta map[string]string) (*checkpoint.Manifest, []byte, error) {
	image, err := b.imageRoot(rec.Template, rec.Image)
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
	cp, _ := b.rt.(runtime.Checkpointer)
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

// checkRestorable refuses a checkpoint this node cannot restore, and says
// why; it returns the template image to restore over.
func (b *booter) checkRestorable(m *checkpoint.Manifest) (string, error) {
	cp, _ := b.rt.(runtime.Checkpointer)
	if m.RuntimeVersion != cp.Version() {
		return "", errdefs.New(errdefs.ErrFailedPrecondition, "checkpoint %s was taken by %q and this node runs %q", m.ID, m.RuntimeVersion, cp.Version())
	}
	// The image the sandbox ran on, not the template's current one: a
	// restored process maps its binaries again by path.
	return b.imageRoot(m.Template, m.Meta[metaTemplateImage])
}
