package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/checkpoint"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/recipe"
	"github.com/spacesandbox/space/internal/runtime"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// A snapshot saves a running sandbox, which runs on, to object storage;
// any number of new sandboxes can start from it. A disk snapshot copies
// the writable layer: runsc stops the sandbox's processes only for the
// instant the layer is copied (fscheckpoint --leave-running), so it is
// point-in-time and crash-consistent: it holds every write that completed
// before that instant and none after, as after a power cut; data a process
// holds in its own buffers and has not written is not in it. A sandbox
// made from it boots afresh on that disk. A full snapshot is a checkpoint
// (runsc checkpoint --leave-running: memory, processes and disk, as a
// fork takes); a sandbox made from it goes on from them, with its own ID,
// address and token. A snapshot may be named name[:tag]: a later snapshot
// of the same name and tag replaces it, and creates find it by that name.

// Snapshot describes a stored snapshot.
type Snapshot struct {
	ID string
	// Tenant owns the snapshot (its sandbox's tenant).
	Tenant    string
	SandboxID string
	Template  string
	CreatedAt time.Time
	Bytes     int64
	Took      time.Duration
	KeyID     string
	// Memory: it holds memory and processes too, not the disk alone.
	Memory bool
	// Name and Tag, when it was named.
	Name, Tag string
}

// Ref is what names the snapshot: name:tag when it has a name, else its ID.
func (sn *Snapshot) Ref() string {
	if sn.Name != "" {
		return sn.Name + ":" + sn.Tag
	}
	return sn.ID
}

// Manifest Meta keys of a named snapshot.
const (
	metaName = "name"
	metaTag  = "tag"
	// metaTenant is the tenant of the sandbox a snapshot was taken of.
	metaTenant = "tenant"
)

// DefaultSnapshotTag is the tag of a snapshot named without one.
const DefaultSnapshotTag = "default"

func snapshotFrom(m *checkpoint.Manifest) *Snapshot {
	return &Snapshot{
		ID: m.ID, Tenant: tenant.Of(m.Meta[metaTenant]), SandboxID: m.SandboxID, Template: m.Template, CreatedAt: m.CreatedAt, Bytes: m.Bytes, Took: m.Took, KeyID: tenant.Bare(m.KeyID),
		Memory: hasMemory(m), Name: m.Meta[metaName], Tag: m.Meta[metaTag],
	}
}

const kindSnapshot = checkpoint.KindSnapshot

// SnapshotOptions say what a snapshot holds and what it is called.
type SnapshotOptions struct {
	// Memory takes memory and processes too (a full snapshot).
	Memory bool
	// Name is "name" or "name:tag" (tag "default"), in any case; empty
	// leaves the snapshot unnamed.
	Name string
}

// ParseSnapshotName splits a snapshot's name[:tag] (tag "default" when
// none), lower-cased, and checks it.
func ParseSnapshotName(s string) (name, tag string, err error) {
	s = strings.ToLower(s)
	if strings.Contains(s, "/") {
		return "", "", errdefs.New(errdefs.ErrInvalidArgument, "snapshot name %q has a namespace: names here have none (use name or name:tag)", s)
	}
	if !recipe.TemplateRef.MatchString(s) {
		return "", "", errdefs.New(errdefs.ErrInvalidArgument, "snapshot name %q is not valid: use name or name:tag, the name 1-63 of a-z 0-9 . _ - starting with a letter or digit", s)
	}
	name, tag, ok := strings.Cut(s, ":")
	if !ok {
		tag = DefaultSnapshotTag
	}
	return name, tag, nil
}

// Snapshots takes snapshots of running sandboxes, which run on (when asked,
// or on a sandbox's schedule, keeping its newest few), keeps them listed
// and named per tenant, and makes sandboxes from them (a create from a
// snapshot). It stands on Checkpoints for the images (taken, uploaded,
// downloaded and restored as a checkpoint's are) and, like it, on the
// service, which makes it and hands it out (Service.Snapshots) with the
// booter, the live sandboxes, the admission of starts and the stored
// quotas.
type Snapshots struct {
	svc *Service
	// booter takes the turn a create from a snapshot starts its sandbox
	// in, and checks that this node can restore a snapshot.
	booter *booter
	// live is the live sandboxes, and the tenants' quotas a create from a
	// snapshot reserves to become one.
	live *liveSet
	// admits admits a create from a snapshot against the node's budgets.
	admits *admitter
	// stored reserves what a snapshot will keep of its tenant's quotas.
	stored *storedQuotas
	ckpts  *Checkpoints
}

// TakeSnapshot snapshots running sandbox id; it runs on.
func (s *Snapshots) TakeSnapshot(ctx context.Context, id string, opts SnapshotOptions) (_ *Snapshot, err error) {
	meta := map[string]string{metaContents: contentsDisk}
	if opts.Memory {
		meta[metaContents] = contentsMemory
	}
	if opts.Name != "" {
		name, tag, err := ParseSnapshotName(opts.Name)
		if err != nil {
			return nil, err
		}
		meta[metaName], meta[metaTag] = name, tag
	}
	cp, err := s.ckpts.checkpointer()
	if err != nil {
		return nil, err
	}
	e, ok := s.live.entry(id)
	if !ok {
		return nil, s.svc.notRunning(id)
	}
	release, err := s.stored.reserve(ctx, tenant.Usage{Snapshots: 1, SnapshotMB: s.stored.estimate(id, opts.Memory)})
	if err != nil {
		return nil, err
	}
	defer release()
	ctx = context.WithoutCancel(ctx)
	defer func() {
		if err != nil {
			s.svc.metrics.checkpointFailed("snapshot")
		}
	}()
	start := time.Now()
	snapID := newArtifactID(id, "s")
	dir, err := s.ckpts.imageDir(snapID)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// The entry lock only for the copy: a kill or pause waits for runsc,
	// not for the upload.
	e.mu.Lock()
	rec := *e.rec
	meta[metaTenant] = tenant.Of(rec.Tenant)
	werr := e.wake(ctx) // a sandbox frozen at rest is thawed for the copy
	switch {
	case rec.State != store.StateRunning:
		err = errdefs.New(errdefs.ErrNotFound, "sandbox %q is %s", id, rec.State)
	case werr != nil:
		err = werr
	case opts.Memory:
		err = cp.Checkpoint(ctx, id, dir, true)
	default:
		err = cp.SnapshotDisk(ctx, id, dir)
	}
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	tImage := time.Now()
	m, err := s.ckpts.saveCheckpoint(ctx, &rec, snapID, kindSnapshot, dir, meta)
	if err != nil {
		return nil, err
	}
	s.svc.metrics.checkpointed("snapshot", m.Bytes, tImage.Sub(start), time.Since(tImage))
	s.svc.log.Info("snapshot taken", "sandbox", id, "snapshot", m.ID, "contents", meta[metaContents], "name", meta[metaName], "tag", meta[metaTag],
		"bytes", m.Bytes, "took_ms", time.Since(start).Milliseconds())
	sn := snapshotFrom(m)
	if sn.Name != "" {
		s.supersede(ctx, sn)
	}
	return sn, nil
}

// supersede deletes the snapshots of sn's name and tag older than sn: the
// name now means sn. Sandboxes made from them keep running.
func (s *Snapshots) supersede(ctx context.Context, sn *Snapshot) {
	older, err := s.Snapshots(ctx, SnapshotFilter{Ref: sn.Ref(), Tenant: sn.Tenant})
	if err != nil {
		s.svc.log.Warn("list snapshots to replace", "snapshot", sn.ID, "err", err)
		return
	}
	for _, o := range older {
		if o.ID != sn.ID && o.CreatedAt.Before(sn.CreatedAt) {
			if err := s.svc.cfg.Checkpoints.Delete(ctx, o.ID); err != nil {
				s.svc.log.Warn("delete replaced snapshot", "snapshot", o.ID, "by", sn.ID, "err", err)
			}
		}
	}
}

// SnapshotFilter selects snapshots; empty fields match all.
type SnapshotFilter struct {
	SandboxID string
	// Ref is a snapshot ID, a name (any tag) or name:tag.
	Ref string
	// Tenant selects one tenant's snapshots. A caller that is not the
	// admin sees its own tenant's only, whatever this says.
	Tenant string
}

func (f SnapshotFilter) match(m *checkpoint.Manifest) bool {
	if m.Kind != kindSnapshot || f.SandboxID != "" && m.SandboxID != f.SandboxID {
		return false
	}
	if f.Tenant != "" && tenant.Of(m.Meta[metaTenant]) != f.Tenant {
		return false
	}
	if f.Ref == "" || m.ID == f.Ref {
		return true
	}
	name, tag, tagged := strings.Cut(strings.ToLower(f.Ref), ":")
	if name == "" || m.Meta[metaName] != name {
		return false
	}
	return !tagged || m.Meta[metaTag] == tag
}

// Snapshots lists the snapshots f selects, newest first.
func (s *Snapshots) Snapshots(ctx context.Context, f SnapshotFilter) ([]*Snapshot, error) {
	if s.svc.cfg.Checkpoints == nil {
		return nil, nil
	}
	var all []*checkpoint.Manifest
	var err error
	if f.SandboxID != "" {
		all, err = s.svc.cfg.Checkpoints.ListOf(ctx, f.SandboxID)
	} else {
		all, err = s.svc.cfg.Checkpoints.List(ctx)
	}
	if err != nil {
		return nil, err
	}
	if p := tenant.FromContext(ctx); !p.Admin {
		f.Tenant = p.Tenant
	}
	var out []*Snapshot
	for _, m := range all {
		if f.match(m) {
			out = append(out, snapshotFrom(m))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// GetSnapshot returns the snapshot ref names: an ID, or name[:tag] (the
// newest of that name and tag; no tag means "default").
func (s *Snapshots) GetSnapshot(ctx context.Context, ref string) (*Snapshot, error) {
	m, err := s.snapshotManifest(ctx, ref)
	if err != nil {
		return nil, err
	}
	return snapshotFrom(m), nil
}

// snapshotManifest resolves ref as GetSnapshot does.
func (s *Snapshots) snapshotManifest(ctx context.Context, ref string) (*checkpoint.Manifest, error) {
	if _, err := s.ckpts.checkpointer(); err != nil {
		return nil, err
	}
	if !strings.Contains(ref, ":") {
		m, err := s.svc.cfg.Checkpoints.Get(ctx, ref)
		switch {
		case err == nil && m.Kind == kindSnapshot && tenant.FromContext(ctx).Owns(m.Meta[metaTenant]):
			return m, nil
		case err != nil && !errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, errdefs.ErrInvalidArgument):
			return nil, err
		}
	}
	name, tag, err := ParseSnapshotName(ref)
	if err != nil {
		return nil, errdefs.New(errdefs.ErrNotFound, "snapshot %q not found", ref)
	}
	found, err := s.Snapshots(ctx, SnapshotFilter{Ref: name + ":" + tag})
	if err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, errdefs.New(errdefs.ErrNotFound, "snapshot %q not found", ref)
	}
	return s.svc.cfg.Checkpoints.Get(ctx, found[0].ID)
}

// DeleteSnapshot deletes the snapshot ref names: an ID, a name (every tag)
// or name:tag. It returns how many it deleted; none is NotFound.
func (s *Snapshots) DeleteSnapshot(ctx context.Context, ref string) (int, error) {
	found, err := s.Snapshots(ctx, SnapshotFilter{Ref: ref})
	if err != nil {
		return 0, err
	}
	if len(found) == 0 {
		return 0, errdefs.New(errdefs.ErrNotFound, "snapshot %q not found", ref)
	}
	for _, sn := range found {
		if err := s.svc.cfg.Checkpoints.Delete(ctx, sn.ID); err != nil {
			return 0, err
		}
		s.svc.log.Info("snapshot deleted", "snapshot", sn.ID, "name", sn.Name, "tag", sn.Tag)
	}
	return len(found), nil
}

// loadSnapshot fetches disk snapshot m into a local directory for a
// create, and names the template image it was taken on; the caller removes
// the directory.
func (s *Snapshots) loadSnapshot(ctx context.Context, m *checkpoint.Manifest, req *CreateRequest) (dir, image string, err error) {
	if req.Template != m.Template {
		return "", "", errdefs.New(errdefs.ErrInvalidArgument, "snapshot %s is of template %q, not %q", m.ID, m.Template, req.Template)
	}
	dir, err = s.ckpts.imageDir(newArtifactID("create", "l"))
	if err != nil {
		return "", "", err
	}
	m, _, err = s.svc.cfg.Checkpoints.Load(ctx, m.ID, dir)
	if err == nil {
		_, err = s.booter.checkRestorable(m)
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", "", err
	}
	return dir, m.Meta[metaTemplateImage], nil
}

// createFromImage makes a sandbox that goes on from full snapshot m: its
// memory, processes and disk, with a new ID and token, and the request's
// timeout, metadata, env (over the snapshot's), policy and lifecycle. Its
// limits are the snapshot's.
func (s *Snapshots) createFromImage(ctx context.Context, req CreateRequest, m *checkpoint.Manifest) (_ *Sandbox, err error) {
	start := time.Now()
	if req.Template != m.Template {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "snapshot %s is of template %q, not %q", m.ID, m.Template, req.Template)
	}
	if req.Timeout == 0 {
		req.Timeout = s.svc.cfg.DefaultTimeout
	}
	if err := s.svc.checkTimeout(req.Timeout); err != nil {
		return nil, err
	}
	snap := runtime.Limits{CPUs: m.Limits.CPU, MemoryMB: m.Limits.MemoryMB, DiskMB: m.Limits.DiskMB, MaxProcs: m.Limits.MaxProcesses}
	if err := s.svc.checkRequest(&req, &Image{Template: m.Template, ID: m.Meta[metaTemplateImage], Limits: snap}); err != nil {
		return nil, err
	}
	if len(req.Volumes) > 0 {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "snapshot %s holds a running sandbox, which mounts the volumes it was taken with: leave volumes out", m.ID)
	}
	if req.limits() != snap {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "snapshot %s holds a running sandbox of cpu %d, memory_mb %d, disk_mb %d, max_processes %d: create from it with those limits (or leave them out)",
			m.ID, snap.CPUs, snap.MemoryMB, snap.DiskMB, snap.MaxProcs)
	}
	defer func() {
		if err != nil {
			s.svc.metrics.createFailed()
		}
	}()
	q, err := s.live.reserve(ctx, usageOf(snap.CPUs, snap.MemoryMB))
	if err != nil {
		return nil, err
	}
	defer s.live.release(q)
	// It restores the snapshot's memory image: admitted before the wait
	// for a turn and the download.
	r, err := s.admits.admit(ctx, s.admits.need(snap.MemoryMB, m.Bytes, 0, false), "create")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			r.Cancel()
		}
	}()
	done, err := s.booter.turn(ctx, "start")
	if err != nil {
		return nil, err
	}
	defer done()
	dir, err := s.ckpts.imageDir(newArtifactID("create", "l"))
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	m, secret, err := s.svc.cfg.Checkpoints.Load(ctx, m.ID, dir)
	if err != nil {
		return nil, err
	}
	var st sealedState
	if err := json.Unmarshal(secret, &st); err != nil {
		return nil, fmt.Errorf("decode sealed state of %s: %w", m.ID, err)
	}
	rootfs, err := s.booter.checkRestorable(m)
	if err != nil {
		return nil, err
	}
	env := maps.Clone(st.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, req.Env)
	placeholders := maps.Clone(st.Secrets)
	if placeholders == nil && len(req.placeholders) > 0 {
		placeholders = map[string]string{}
	}
	maps.Copy(placeholders, req.placeholders)
	keyID := req.KeyID
	if keyID == "" {
		keyID = m.KeyID
	}
	tmpl := &store.Sandbox{
		Tenant:   tenant.FromContext(ctx).Tenant,
		Template: m.Template, Image: m.Meta[metaTemplateImage],
		CPU: snap.CPUs, MemoryMB: snap.MemoryMB, DiskMB: snap.DiskMB, MaxProcs: snap.MaxProcs,
		AccessToken: st.AccessToken, KeyID: keyID,
		Env: env, Metadata: req.Metadata, OpenAccess: req.OpenAccess, Network: NetworkRow(req.Network), Secrets: placeholders,
		AutoPause: req.AutoPause, AutoResume: req.AutoResume, AutoPauseDiskOnly: req.AutoPauseDiskOnly,
		SnapshotEvery: req.SnapshotEvery, SnapshotKeep: req.SnapshotKeep, IdleFreeze: req.IdleFreeze,
	}
	if tmpl.Volumes, err = manifestVolumes(m); err != nil {
		return nil, err
	}
	sb, err := s.ckpts.forkOne(ctx, tmpl, rootfs, dir, req.Timeout, m.ID, r, q)
	if err != nil {
		return nil, err
	}
	s.svc.metrics.created(time.Since(start), false)
	return sb, nil
}

// runSnapshotSchedules snapshots every running sandbox whose schedule is
// due, in the background, one at a time per sandbox, and keeps the newest
// SnapshotKeep of its snapshots.
func (s *Snapshots) runSnapshotSchedules(ctx context.Context, entries map[string]*entry) {
	now := time.Now()
	for id, e := range entries {
		e.mu.Lock()
		due := e.rec.State == store.StateRunning && e.rec.SnapshotEvery > 0 && !e.snapshotting &&
			now.Sub(maxTime(e.lastSnapshot, e.rec.CreatedAt)) >= e.rec.SnapshotEvery
		keep := e.rec.SnapshotKeep
		if r := e.rest(); due && r != nil {
			// A resting sandbox's disk has not changed since it went to
			// rest: one snapshot taken since then is its last state (and
			// taking another would wake it for nothing).
			if since, resting := r.restingSince(); resting && e.lastSnapshot.After(since) {
				due = false
			}
		}
		if due {
			e.snapshotting = true
		}
		e.mu.Unlock()
		if !due {
			continue
		}
		go func() {
			_, err := s.TakeSnapshot(ctx, id, SnapshotOptions{})
			e.mu.Lock()
			e.snapshotting, e.lastSnapshot = false, time.Now()
			e.mu.Unlock()
			if err != nil {
				if !errors.Is(err, errdefs.ErrNotFound) {
					s.svc.log.Error("scheduled disk snapshot", "sandbox", id, "err", err)
				}
				return
			}
			s.trimSnapshots(ctx, id, keep)
		}()
	}
}

func (s *Snapshots) trimSnapshots(ctx context.Context, id string, keep int) {
	if keep <= 0 {
		return
	}
	all, err := s.Snapshots(ctx, SnapshotFilter{SandboxID: id})
	if err != nil {
		s.svc.log.Warn("list snapshots to trim", "sandbox", id, "err", err)
		return
	}
	// The schedule's own: unnamed disk snapshots (a named or full one was
	// asked for and stays until deleted).
	var snaps []*Snapshot
	for _, sn := range all {
		if sn.Name == "" && !sn.Memory {
			snaps = append(snaps, sn)
		}
	}
	for _, old := range snaps[min(keep, len(snaps)):] {
		if err := s.svc.cfg.Checkpoints.Delete(ctx, old.ID); err != nil {
			s.svc.log.Warn("delete old snapshot", "sandbox", id, "snapshot", old.ID, "err", err)
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
