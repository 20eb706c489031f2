package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/tenant"
)

// sandboxEvents streams sandbox changes as SSE: `reset` first (and again
// whenever changes were missed: the client lists the sandboxes then),
// `sandbox` with a sandbox as GET returns it, `removed` with {"id"}. Every
// event's id is the change's sequence number, so a client that reconnects
// with Last-Event-ID gets what it missed, or a reset when that is no
// longer kept. A tenant's key gets its own tenant's sandboxes only.
func (s *Server) sandboxEvents(w http.ResponseWriter, r *http.Request) {
	after, err := changesAfter(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	now, err := s.changes.ChangesNow()
	if err != nil {
		writeError(w, r, err)
		return
	}
	sse := newSSE(w)
	defer sse.Close()
	reset := after == 0
	seq := after
	ctx := r.Context()
	p := tenant.FromContext(ctx)
	for {
		if reset {
			// now was read before the client lists: every change after it
			// comes as an event.
			if err := sse.Event(now, "reset", []byte("{}")); err != nil {
				return
			}
			seq = now
		}
		changes, next, gap, err := s.changes.Changes(ctx, seq)
		if err != nil {
			return // the client left
		}
		if gap {
			if now, err = s.changes.ChangesNow(); err != nil {
				return
			}
			reset = true
			continue
		}
		reset = false
		for _, c := range changes {
			if !p.Owns(c.Sandbox.Tenant) {
				continue
			}
			event, data := "sandbox", []byte(nil)
			if c.Removed {
				event, data = "removed", mustJSON(struct {
					ID string `json:"id"`
				}{c.Sandbox.ID})
			} else {
				data = mustJSON(toJSON(c.Sandbox))
			}
			if err := sse.Event(c.Seq, event, data); err != nil {
				return
			}
		}
		seq = next
	}
}

// changesAfter is the id of the last event the client has: Last-Event-ID,
// else ?after; 0 when it has none.
func changesAfter(r *http.Request) (uint64, error) {
	after, err := lastEventID(r)
	if err != nil || after > 0 {
		return after, err
	}
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, errdefs.New(errdefs.ErrInvalidArgument, "after %q is not a number", v)
		}
		return n, nil
	}
	return 0, nil
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
