package sandbox

import (
	"context"
	"log/slog"

	"github.com/spacesandbox/space/internal/admission"
)

// admitter admits each start a caller asks for (a create that boots, a
// resume, a fork, a create from a snapshot, a wake, a template build's
// sandbox) against the node's budgets, and makes room first when the
// node is at one. The service runs the controller itself (its samples,
// what a destroyed sandbox no longer holds); a pool's refill asks the
// controller directly, since it makes no room for itself.
type admitter struct {
	adm *admission.Controller // nil: every start admitted
	log *slog.Logger
	// makeRoom frees something for a start that ref refused (an idle
	// pool sandbox given up, a resting one hibernated) and says whether
	// it did.
	makeRoom func(ctx context.Context, ref *admission.Refusal) bool
}

// need is what a start of a sandbox with memory limit memoryMB is
// reserved: what boots are measured at, or (restores) the size of the
// memory image it restores, at most its limit; plus a disk image it
// starts from.
func (a *admitter) need(memoryMB int, imageBytes, diskBytes int64, fresh bool) admission.Need {
	limit := int64(memoryMB) << 20
	n := admission.Need{Usage: a.adm.Estimate(limit), Fresh: fresh}
	if imageBytes > n.Memory {
		n.Memory = imageBytes
		if limit > 0 {
			n.Memory = min(n.Memory, limit)
		}
	}
	n.Disk += diskBytes
	return n
}

// measured is what running sandbox id was last measured at.
func (a *admitter) measured(id string) admission.Usage { return a.adm.Usage(id) }

// admit reserves need for a start the caller asked for. When the node is
// at a budget, idle pool sandboxes are given up first, one at a time,
// then resting sandboxes hibernated, until the start fits; only then is
// it refused (503, saying which budget).
func (a *admitter) admit(ctx context.Context, need admission.Need, what string) (*admission.Reservation, error) {
	r, ref := a.adm.Admit(need)
	for ref != nil && a.makeRoom(ctx, ref) {
		r, ref = a.adm.Admit(need)
	}
	if ref != nil {
		a.adm.Refused(ref)
		a.log.Warn("start refused: node at capacity", "start", what, "resource", ref.Resource, "scope", ref.Scope,
			"budget", ref.Budget, "used", ref.Used, "requested", ref.Requested, "unit", ref.Unit)
		return nil, ref.Err()
	}
	return r, nil
}
