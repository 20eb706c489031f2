package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/spacesandbox/space/api/native"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/tenant"
)

// sandboxEvents streams sandbox changes as SSE: `reset` first (and again
// whenever changes were missed: the client lists the sandboxes then),
// `sandbox` with a sandbox as GET returns it, `removed` with {"id"}. Every
// event's id is the change's sequence number, so a client that reconnects
// with Last-Event-ID gets what it missed, or a reset when that is no
// longer kept. A tenant's key gets its own tenant's sandboxes only. With
// ?metrics=true, `metrics` events carry the running sandboxes' samples
// too (metricsEvents), so that a list of sandboxes can show their use
// without asking for it.
func (s *Server) SandboxEvents(w http.ResponseWriter, r *http.Request, params native.SandboxEventsParams) {
	after, err := changesAfter(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	metrics := false
	if v := r.URL.Query().Get("metrics"); v != "" {
		if metrics, err = strconv.ParseBool(v); err != nil {
			writeError(w, r, errdefs.New(errdefs.ErrInvalidArgument, "metrics %q is neither true nor false", v))
			return
		}
	}
	if metrics && s.telemetry == nil {
		writeError(w, r, errdefs.New(errdefs.ErrUnavailable, "this spaced keeps no sandbox metrics"))
		return
	}
	now, err := s.changes.ChangesNow()
	if err != nil {
		writeError(w, r, err)
		return
	}
	sse := newSSE(w)
	defer sse.Close()
	// The samples' goroutine ends the stream when it must end (the client
	// fell behind), and is done before the handler returns.
	ctx, cancel := context.WithCancel(r.Context())
	var samplesDone chan struct{}
	defer func() {
		cancel()
		if samplesDone != nil {
			<-samplesDone
		}
	}()
	reset := after == 0
	seq := after
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
		if metrics && samplesDone == nil {
			// After the first reset, which stays the stream's first event.
			done := make(chan struct{})
			samplesDone = done
			go func() {
				defer close(done)
				defer cancel()
				s.metricsEvents(ctx, sse, p)
			}()
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

// metricsEvents sends, as `metrics` events, the newest sample of each
// running sandbox p owns, then each of its samples as spaced takes it,
// until ctx ends or a write fails. They carry no id: samples are not
// replayed, and a client that reconnects gets the newest ones again (and
// Last-Event-ID stays the last change's). A client so slow that samples
// piled up is cut off rather than sent a series with holes: it reconnects.
func (s *Server) metricsEvents(ctx context.Context, sse *sseWriter, p tenant.Principal) {
	now, next, cancel := s.telemetry.FollowMetrics()
	defer cancel()
	send := func(m sandbox.SandboxSample) bool {
		if !p.Owns(m.Tenant) {
			return true
		}
		return sse.Event(0, "metrics", mustJSON(metricsEventJSON{ID: m.Sandbox, sampleJSON: toSampleJSON(m.MetricSample)})) == nil
	}
	for _, m := range now {
		if !send(m) {
			return
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-next:
			if !ok || !send(m) {
				return
			}
		}
	}
}

// metricsEventJSON is a `metrics` event: a sample and its sandbox's id.
type metricsEventJSON struct {
	ID string `json:"id"`
	sampleJSON
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
