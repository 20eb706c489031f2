package console

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"
)

// AuditLog is a slog.Handler in front of another that also keeps the last
// records with chosen messages ("egress denied", the egress gateway's audit
// line) for the console's platform page. Everything still reaches the
// handler behind it as before.
type AuditLog struct {
	next  slog.Handler
	ring  *auditRing
	attrs []slog.Attr
	group string
}

type auditRing struct {
	messages []string
	max      int

	mu      sync.Mutex
	entries []AuditEntry // oldest first
}

// AuditEntry is one kept record.
type AuditEntry struct {
	Time    time.Time         `json:"time"`
	Level   string            `json:"level"`
	Message string            `json:"message"`
	Attrs   map[string]string `json:"attrs"`
}

// NewAuditLog keeps the last max records whose message is one of messages
// (at warning level or above), and passes every record on to next.
func NewAuditLog(next slog.Handler, max int, messages ...string) *AuditLog {
	return &AuditLog{next: next, ring: &auditRing{messages: messages, max: max}}
}

// Enabled: warnings are always read (to be kept), the rest as next says.
func (a *AuditLog) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || a.next.Enabled(ctx, l)
}

// Handle keeps r if it is an audit line and passes it on if next wants it.
func (a *AuditLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn && slices.Contains(a.ring.messages, r.Message) {
		e := AuditEntry{Time: r.Time, Level: r.Level.String(), Message: r.Message, Attrs: map[string]string{}}
		add := func(at slog.Attr) bool {
			k := at.Key
			if a.group != "" {
				k = a.group + "." + k
			}
			e.Attrs[k] = at.Value.String()
			return true
		}
		for _, at := range a.attrs {
			add(at)
		}
		r.Attrs(add)
		a.ring.add(e)
	}
	if a.next.Enabled(ctx, r.Level) {
		return a.next.Handle(ctx, r)
	}
	return nil
}

// WithAttrs is next's, keeping the ring.
func (a *AuditLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &AuditLog{next: a.next.WithAttrs(attrs), ring: a.ring, attrs: append(slices.Clip(a.attrs), attrs...), group: a.group}
}

// WithGroup is next's, keeping the ring.
func (a *AuditLog) WithGroup(name string) slog.Handler {
	g := name
	if a.group != "" {
		g = a.group + "." + name
	}
	return &AuditLog{next: a.next.WithGroup(name), ring: a.ring, attrs: a.attrs, group: g}
}

// Entries returns the kept records, newest first.
func (a *AuditLog) Entries() []AuditEntry {
	a.ring.mu.Lock()
	defer a.ring.mu.Unlock()
	out := slices.Clone(a.ring.entries)
	slices.Reverse(out)
	return out
}

func (r *auditRing) add(e AuditEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.entries) >= r.max {
		r.entries = slices.Delete(r.entries, 0, len(r.entries)-r.max+1)
	}
	r.entries = append(r.entries, e)
}

// audit answers the kept audit lines, newest first: every tenant's to the
// admin key's session, the session's tenant's alone to any other (a line
// names its tenant; one that names none is the default tenant's).
func (c *Console) audit(w http.ResponseWriter, r *http.Request, s *session) {
	entries := []AuditEntry{}
	if c.opts.Audit != nil {
		for _, e := range c.opts.Audit.Entries() {
			owner := e.Attrs["tenant"]
			if owner == "" {
				owner = c.opts.DefaultTenant
			}
			if s.who.Owns(owner) {
				entries = append(entries, e)
			}
		}
	}
	writeJSON(w, http.StatusOK, struct {
		Entries []AuditEntry `json:"entries"`
		// Kept says how many are kept at most (since spaced started).
		Kept int `json:"kept"`
	}{entries, c.keptAudit()})
}

func (c *Console) keptAudit() int {
	if c.opts.Audit == nil {
		return 0
	}
	return c.opts.Audit.ring.max
}
