package console

import (
	"net/http"
	"slices"
	"sync"
	"time"
)

// AuditLog keeps the last audit events (the egress gateway's denials,
// fed to Add as they happen) for the console's platform page.
type AuditLog struct {
	max int

	mu      sync.Mutex
	entries []AuditEntry // oldest first
}

// AuditEntry is one kept event.
type AuditEntry struct {
	Time    time.Time         `json:"time"`
	Level   string            `json:"level"`
	Message string            `json:"message"`
	Attrs   map[string]string `json:"attrs"`
}

// NewAuditLog keeps the last max events.
func NewAuditLog(max int) *AuditLog {
	return &AuditLog{max: max}
}

// Add keeps e, dropping the oldest past max.
func (a *AuditLog) Add(e AuditEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.entries) >= a.max {
		a.entries = slices.Delete(a.entries, 0, len(a.entries)-a.max+1)
	}
	a.entries = append(a.entries, e)
}

// Entries returns the kept events, newest first.
func (a *AuditLog) Entries() []AuditEntry {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := slices.Clone(a.entries)
	slices.Reverse(out)
	return out
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
	return c.opts.Audit.max
}
