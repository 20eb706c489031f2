package webhook

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"slices"
	"time"

	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/tenant"
)

// Payload is the body of a delivery: E2B's sandbox event, version v2.
type Payload struct {
	Version            string         `json:"version"`
	ID                 string         `json:"id"`
	Type               string         `json:"type"`
	EventData          map[string]any `json:"eventData,omitempty"`
	SandboxBuildID     string         `json:"sandboxBuildId"`
	SandboxExecutionID string         `json:"sandboxExecutionId"`
	SandboxID          string         `json:"sandboxId"`
	SandboxTeamID      string         `json:"sandboxTeamId"`
	SandboxTemplateID  string         `json:"sandboxTemplateId"`
	Timestamp          time.Time      `json:"timestamp"`
}

// seen is what the event deriver remembers of a sandbox between two
// writes of its record.
type seen struct {
	state     string
	expires   time.Time
	network   string
	created   bool // a created event was derived (or the sandbox ran before)
	execution string
	started   time.Time
}

// deriver turns the sandbox record writes of one node, in order, into
// lifecycle events.
type deriver struct {
	sandboxes map[string]*seen
	now       func() time.Time
}

func newDeriver() *deriver {
	return &deriver{sandboxes: map[string]*seen{}, now: time.Now}
}

// seed remembers a record found at start (a restart): its later writes
// are compared with it.
func (d *deriver) seed(rec *store.Sandbox) {
	d.sandboxes[rec.ID] = &seen{state: rec.State, expires: rec.ExpiresAt, network: networkOf(rec), created: true,
		execution: newExecution(), started: rec.CreatedAt}
}

// next derives the events of one write of rec (deleted: its removal).
func (d *deriver) next(rec *store.Sandbox, deleted bool) []*Payload {
	if rec.State == store.StatePooled || rec.Build != "" {
		return nil // not a caller's sandbox (yet)
	}
	prev := d.sandboxes[rec.ID]
	if prev == nil {
		prev = &seen{state: store.StateCreating, execution: newExecution(), started: rec.CreatedAt}
		// Resumed on this node after a pause on another (cluster), or
		// first seen as running after a restart that did not seed it.
		if rec.Checkpoint != nil && (rec.State == store.StateRunning || rec.State == store.StateResuming) {
			prev.state, prev.created = store.StatePaused, true
		}
		d.sandboxes[rec.ID] = prev
	}
	var out []*Payload
	emit := func(typ string, data map[string]any) {
		out = append(out, d.payload(rec, prev, typ, data))
	}
	state := rec.State
	if deleted {
		state = store.StateKilled
	}
	switch {
	case state == store.StateKilled || state == store.StateLost:
		if prev.state != store.StateKilled && prev.state != store.StateLost && prev.created {
			emit(Killed, map[string]any{"execution": d.execution(rec, prev)})
		}
		delete(d.sandboxes, rec.ID)
		return out
	case state == store.StateRunning && (prev.state == store.StateCreating || prev.state == store.StatePooled):
		prev.created, prev.started = true, d.now()
		emit(Created, nil)
	case state == store.StateRunning && (prev.state == store.StatePaused || prev.state == store.StateResuming):
		prev.execution, prev.started = newExecution(), d.now()
		emit(Resumed, nil)
	case state == store.StatePaused && prev.state == store.StateRunning:
		emit(Paused, map[string]any{"execution": d.execution(rec, prev)})
	case state == store.StateRunning && prev.state == store.StateRunning && rec.Ending == "":
		data := map[string]any{}
		if !rec.ExpiresAt.Equal(prev.expires) {
			data["set_timeout"] = rec.ExpiresAt.UTC().Format(time.RFC3339)
		}
		if n := networkOf(rec); n != prev.network {
			data["network_egress"] = networkData(rec)
		}
		if len(data) > 0 {
			emit(Updated, data)
		}
	}
	prev.state, prev.expires, prev.network = state, rec.ExpiresAt, networkOf(rec)
	return out
}

func (d *deriver) payload(rec *store.Sandbox, prev *seen, typ string, data map[string]any) *Payload {
	if data == nil {
		data = map[string]any{}
	}
	if len(rec.Metadata) > 0 {
		data["sandbox_metadata"] = rec.Metadata
	}
	return &Payload{
		Version: "v2", ID: newEventID(), Type: typ, EventData: data,
		SandboxBuildID: rec.Image, SandboxExecutionID: prev.execution, SandboxID: rec.ID,
		SandboxTeamID: tenant.Of(rec.Tenant), SandboxTemplateID: rec.Template, Timestamp: d.now().UTC(),
	}
}

// execution is E2B's eventData.execution of a killed or paused event.
func (d *deriver) execution(rec *store.Sandbox, prev *seen) map[string]any {
	started := prev.started
	if started.IsZero() {
		started = rec.CreatedAt
	}
	return map[string]any{
		"started_at":     started.UTC().Format(time.RFC3339),
		"vcpu_count":     rec.CPU,
		"memory_mb":      rec.MemoryMB,
		"execution_time": d.now().Sub(started).Milliseconds(),
	}
}

// networkOf is a comparable form of the record's egress rules.
func networkOf(rec *store.Sandbox) string {
	b, _ := json.Marshal(networkData(rec))
	return string(b)
}

func networkData(rec *store.Sandbox) map[string]any {
	allow, deny := []string{}, []string{}
	if n := rec.Network; n != nil {
		allow, deny = slices.Clone(n.AllowOut), slices.Clone(n.DenyOut)
	}
	return map[string]any{"allowed_cidrs": allow, "denied_cidrs": deny}
}

func newExecution() string { return newEventID() }

// newEventID is a random UUID (version 4), as E2B's event ids are.
func newEventID() string {
	b := make([]byte, 16)
	rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
