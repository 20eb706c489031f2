package sandbox

import (
	"maps"
	"slices"

	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// This file is the one place where the catalog's rows become what the
// package hands its callers: a change of the stored schema ends here.

// fromRecord is what callers see of a stored sandbox.
func fromRecord(r *store.Sandbox) *Sandbox {
	return &Sandbox{
		ID: r.ID, Template: r.Template, State: stateOf(r.State), Reason: r.Reason,
		CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt,
		CPU: r.CPU, MemoryMB: r.MemoryMB, DiskMB: r.DiskMB, MaxProcs: r.MaxProcs,
		Metadata:   maps.Clone(r.Metadata),
		OpenAccess: r.OpenAccess, Network: NetworkOf(r.Network),
		Checkpoint: checkpointOf(r.Checkpoint), PausedAt: r.PausedAt, AutoPause: r.AutoPause, AutoResume: r.AutoResume, KeyID: tenant.Bare(r.KeyID),
		AutoPauseDiskOnly: r.AutoPauseDiskOnly,
		SnapshotEvery:     r.SnapshotEvery, SnapshotKeep: r.SnapshotKeep, IdleFreeze: r.IdleFreeze, IdleHibernate: r.IdleHibernate,
		Volumes: mountsOf(r.Volumes), Tenant: tenant.Of(r.Tenant), Node: r.Node,
	}
}

// stateOf is a stored state as callers see it. The catalog spells the
// states as the API does (storemap_test holds the two together).
func stateOf(s string) State { return State(s) }

func checkpointOf(c *store.CheckpointRef) *CheckpointInfo {
	if c == nil {
		return nil
	}
	return &CheckpointInfo{ID: c.ID, CreatedAt: c.CreatedAt, Bytes: c.Bytes, Took: c.Took, DiskOnly: c.DiskOnly}
}

// query is the catalog's query for f, up to limit records (0: all).
func (f ListFilter) query(limit int) store.Query {
	q := store.Query{Metadata: f.Metadata, Limit: limit}
	for _, s := range f.States {
		q.States = append(q.States, string(s))
	}
	return q
}

// NetworkOf is a stored egress policy (a sandbox's or a build's) as
// callers see it (a deep copy). Every field is mapped here and in
// NetworkRow; storemap_test fails on a field either one forgets. The
// template package stores builds' policies through both.
func NetworkOf(p *store.NetworkPolicy) *NetworkPolicy {
	if p == nil {
		return nil
	}
	return &NetworkPolicy{
		AllowInternet: clonePtr(p.AllowInternet), AllowOut: slices.Clone(p.AllowOut), DenyOut: slices.Clone(p.DenyOut),
		AllowPublicTraffic: clonePtr(p.AllowPublicTraffic), AllowFirst: p.AllowFirst,
		Headers: cloneHeaders(p.Headers), Extra: slices.Clone(p.Extra),
	}
}

// NetworkRow is the stored form of a caller's egress policy (a deep copy).
func NetworkRow(p *NetworkPolicy) *store.NetworkPolicy {
	if p == nil {
		return nil
	}
	return &store.NetworkPolicy{
		AllowInternet: clonePtr(p.AllowInternet), AllowOut: slices.Clone(p.AllowOut), DenyOut: slices.Clone(p.DenyOut),
		AllowPublicTraffic: clonePtr(p.AllowPublicTraffic), AllowFirst: p.AllowFirst,
		Headers: cloneHeaders(p.Headers), Extra: slices.Clone(p.Extra),
	}
}

// cloneNetworkRow is a deep copy of a stored egress policy.
func cloneNetworkRow(p *store.NetworkPolicy) *store.NetworkPolicy {
	return NetworkRow(NetworkOf(p))
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func cloneHeaders(in map[string]map[string]string) map[string]map[string]string {
	if in == nil {
		return nil
	}
	out := make(map[string]map[string]string, len(in))
	for host, hs := range in {
		out[host] = maps.Clone(hs)
	}
	return out
}

// mountsOf are stored volume mounts as callers see them.
func mountsOf(in []store.VolumeMount) []VolumeMount {
	if in == nil {
		return nil
	}
	out := make([]VolumeMount, len(in))
	for i, m := range in {
		out[i] = VolumeMount{VolumeID: m.VolumeID, Name: m.Name, Path: m.Path, ReadOnly: m.ReadOnly}
	}
	return out
}

// mountRows are the stored form of a caller's volume mounts.
func mountRows(in []VolumeMount) []store.VolumeMount {
	if in == nil {
		return nil
	}
	out := make([]store.VolumeMount, len(in))
	for i, m := range in {
		out[i] = store.VolumeMount{VolumeID: m.VolumeID, Name: m.Name, Path: m.Path, ReadOnly: m.ReadOnly}
	}
	return out
}
