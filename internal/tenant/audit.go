package tenant

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/store"
)

// Audit records every state-changing API call: a structured log line at
// once, and an entry in the store (written in batches, kept for its
// retention) that the admin API queries by time window.
type Audit struct {
	log       *slog.Logger
	store     store.Tenants
	retention time.Duration

	mu      sync.Mutex
	pending []store.AuditEntry
	kick    chan struct{}
}

// NewAudit returns an audit log kept for retention.
func NewAudit(st store.Tenants, retention time.Duration, log *slog.Logger) *Audit {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Audit{log: log, store: st, retention: retention, kick: make(chan struct{}, 1)}
}

// Run writes entries as they come and prunes old ones, until ctx ends
// (then it writes what is pending).
func (a *Audit) Run(ctx context.Context) {
	prune := time.NewTicker(time.Hour)
	defer prune.Stop()
	a.prune(ctx)
	for {
		select {
		case <-ctx.Done():
			a.flush(context.WithoutCancel(ctx))
			return
		case <-a.kick:
			a.flush(ctx)
		case <-prune.C:
			a.prune(ctx)
		}
	}
}

func (a *Audit) prune(ctx context.Context) {
	if n, err := a.store.PruneAudit(ctx, time.Now().Add(-a.retention)); err != nil {
		a.log.Warn("prune audit log", "err", err)
	} else if n > 0 {
		a.log.Debug("audit log pruned", "entries", n)
	}
}

func (a *Audit) flush(ctx context.Context) {
	a.mu.Lock()
	batch := a.pending
	a.pending = nil
	a.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	if err := a.store.AppendAudit(ctx, batch); err != nil {
		a.log.Error("write audit log", "entries", len(batch), "err", err)
	}
}

// Flush writes what is pending now (tests and queries read their writes).
func (a *Audit) Flush(ctx context.Context) { a.flush(ctx) }

// Add records one entry.
func (a *Audit) Add(e store.AuditEntry) {
	a.log.Info("audit", "tenant", e.Tenant, "key", e.Key, "method", e.Method, "route", e.Route,
		"object", e.Object, "created", e.Created, "status", e.Status, "remote", e.Remote)
	a.mu.Lock()
	a.pending = append(a.pending, e)
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// Query returns the entries in [from, to), oldest first, at most limit,
// of tenant only unless tenant is "".
func (a *Audit) Query(ctx context.Context, from, to time.Time, tenant string, limit int) ([]store.AuditEntry, error) {
	a.flush(ctx)
	var out []store.AuditEntry
	// Read in pages so a tenant filter still returns up to limit; each
	// page goes on after the last entry of the one before (by its cursor:
	// entries may share a time).
	q := store.AuditQuery{From: from, To: to, Limit: 1000}
	for len(out) < limit {
		page, err := a.store.Audit(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, e := range page {
			if tenant == "" || e.Tenant == tenant {
				out = append(out, e)
				if len(out) == limit {
					break
				}
			}
		}
		if len(page) < q.Limit {
			break
		}
		q.After = page[len(page)-1].Cursor
	}
	return out, nil
}

// objectParams are the path parameters that name the object of a call,
// in the order they are looked for.
var objectParams = []string{"id", "sandboxID", "snapshot", "volume", "volumeID", "backup", "name", "key", "tenant", "build", "hash", "a"}

// Middleware records every call of next whose method changes state. It
// goes inside authentication, which gives the request its principal.
func (a *Audit) Middleware(next http.Handler) http.Handler { return a.record(next, false) }

// Public records every state-changing call of next, a route that checks
// its caller its own way (a volume's token, a signed upload link): the
// handler names who the call runs as with RunsAs once it knows. A call it
// refused before that is recorded as key "anonymous" of no tenant.
func (a *Audit) Public(next http.Handler) http.Handler { return a.record(next, true) }

// Anonymous is the key audit lines name a public route's caller by when
// the handler named none.
const Anonymous = "anonymous"

// runsAs is where a public route's handler leaves who its call runs as.
type runsAs struct {
	mu  sync.Mutex
	p   Principal
	set bool
}

type runsAsKey struct{}

// RunsAs tells the audit log of a public route (Public) that the call of
// ctx runs as p. Elsewhere it does nothing.
func RunsAs(ctx context.Context, p Principal) {
	if ra, ok := ctx.Value(runsAsKey{}).(*runsAs); ok {
		ra.mu.Lock()
		ra.p, ra.set = p, true
		ra.mu.Unlock()
	}
}

func (a *Audit) record(next http.Handler, public bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			next.ServeHTTP(w, r)
			return
		}
		var ra *runsAs
		if public {
			ra = &runsAs{}
			r = r.WithContext(context.WithValue(r.Context(), runsAsKey{}, ra))
		}
		rec := &auditRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		p := FromContext(r.Context())
		if ra != nil {
			ra.mu.Lock()
			p = ra.p
			if !ra.set {
				p = Principal{Key: Anonymous}
			}
			ra.mu.Unlock()
		}
		e := store.AuditEntry{Time: time.Now().UTC(), Tenant: p.Tenant, Key: p.Key, Method: r.Method,
			Route: r.Pattern, Status: rec.status, Created: rec.createdID()}
		if e.Status == 0 {
			e.Status = http.StatusOK
		}
		if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			e.Remote = host
		}
		for _, name := range objectParams {
			if v := r.PathValue(name); v != "" {
				e.Object = v
				break
			}
		}
		a.Add(e)
	})
}

// auditRecorder keeps the status and the start of a JSON answer, where a
// create's new ID is.
type auditRecorder struct {
	http.ResponseWriter
	status int
	head   []byte
}

func (r *auditRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *auditRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if len(r.head) < 4096 {
		r.head = append(r.head, b[:min(len(b), 4096-len(r.head))]...)
	}
	return r.ResponseWriter.Write(b)
}

func (r *auditRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *auditRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// createdID is the "id" (or E2B's "sandboxID", ...) of a JSON object
// answered with 200 or 201.
func (r *auditRecorder) createdID() string {
	if r.status != http.StatusOK && r.status != http.StatusCreated {
		return ""
	}
	head := bytes.TrimSpace(r.head)
	if len(head) == 0 || head[0] != '{' {
		return ""
	}
	var v map[string]any
	if json.Unmarshal(head, &v) != nil {
		return ""
	}
	for _, k := range []string{"id", "sandboxID", "templateID", "snapshotID", "volumeID", "buildID"} {
		if s, ok := v[k].(string); ok {
			return s
		}
	}
	return ""
}
