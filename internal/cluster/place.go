package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// Placement. A create goes to a node with a ready warm sandbox of its
// template if there is one, else to the least loaded node; a node that
// refuses it for capacity (or because it is draining) passes it to the
// next. Creates that carry the same Idempotency-Key (from the same
// credential, on the same route) make one sandbox: the first runs, the
// others get its answer.

// Idempotency is what the keys need of the catalog (store.Postgres).
type Idempotency interface {
	ClaimIdempotency(ctx context.Context, scope string) (bool, *store.Stored, error)
	FinishIdempotency(ctx context.Context, scope string, s *store.Stored) error
}

// maxCreateBody bounds the create body placement reads (a create is a
// small JSON object; a larger one is served here as it is).
const maxCreateBody = 1 << 20

// idempotencyWait bounds the wait for the create that holds a key.
const idempotencyWait = 2 * time.Minute

// memberCache keeps the catalog's node list for a second: placement reads
// it on every create.
type memberCache struct {
	mu      sync.Mutex
	members []store.Member
	at      time.Time
}

func (f *Forwarder) members(ctx context.Context) ([]store.Member, error) {
	f.cache.mu.Lock()
	defer f.cache.mu.Unlock()
	if time.Since(f.cache.at) < time.Second {
		return f.cache.members, nil
	}
	ms, err := f.router.src.Members(ctx)
	if err != nil {
		return nil, err
	}
	f.cache.members, f.cache.at = ms, time.Now()
	return ms, nil
}

// candidates orders the nodes a create of template may go to.
func (f *Forwarder) candidates(ctx context.Context, template string) []store.Member {
	ms, err := f.members(ctx)
	if err != nil {
		return nil
	}
	var out []store.Member
	for _, m := range ms {
		if m.Alive && !m.Draining {
			out = append(out, m)
		}
	}
	// Load in tenths of capacity (or pairs of sandboxes where a node
	// says no capacity): nodes within one step are equally loaded, and
	// the create stays here rather than pay a hop for a sandbox or two.
	load := func(m store.Member) int {
		if m.Info.Capacity > 0 {
			return 10 * m.Info.Sandboxes / m.Info.Capacity
		}
		return m.Info.Sandboxes / 2
	}
	slices.SortStableFunc(out, func(a, b store.Member) int {
		pa, pb := a.Info.Pools[template], b.Info.Pools[template]
		switch {
		case (pa > 0) != (pb > 0):
			if pa > 0 {
				return -1
			}
			return 1
		case load(a) != load(b):
			return load(a) - load(b)
		case (a.ID == f.self) != (b.ID == f.self):
			if a.ID == f.self { // no hop on a tie
				return -1
			}
			return 1
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// answer is a buffered response.
type answer struct {
	status int
	header http.Header
	body   bytes.Buffer
}

func (a *answer) Header() http.Header { return a.header }
func (a *answer) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return a.body.Write(b)
}
func (a *answer) WriteHeader(code int) {
	if a.status == 0 {
		a.status = code
	}
}

func (a *answer) writeTo(w http.ResponseWriter) {
	for k, v := range a.header {
		w.Header()[k] = v
	}
	w.WriteHeader(a.status)
	w.Write(a.body.Bytes())
}

// refused: the node would not take the create (full or draining); the
// next may.
func (a *answer) refused() bool {
	return a.status == http.StatusServiceUnavailable &&
		(bytes.Contains(a.body.Bytes(), []byte("node_at_capacity")) || bytes.Contains(a.body.Bytes(), []byte("draining")))
}

func (f *Forwarder) serveCreate(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxCreateBody+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_argument", "could not read the request body: "+err.Error())
		return
	}
	if len(body) > maxCreateBody {
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
		f.next.ServeHTTP(w, r)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if len(key) > 255 {
		writeError(w, http.StatusBadRequest, "invalid_argument", "Idempotency-Key must be at most 255 characters")
		return
	}
	var scope string
	if key != "" && f.idem != nil {
		h := sha256.New()
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s", r.Header.Get("Authorization"), r.Header.Get("X-API-Key"), r.URL.Path, key)
		scope = hex.EncodeToString(h.Sum(nil))
		if done := f.awaitKey(w, r, scope); done {
			return
		}
	}
	a := f.place(r, body, f.templateOf(r, body))
	if scope != "" {
		var s *store.Stored
		if a.status/100 == 2 {
			s = &store.Stored{Status: a.status, ContentType: a.header.Get("Content-Type"), Body: a.body.Bytes()}
		}
		f.finishKey(context.WithoutCancel(r.Context()), scope, s)
	}
	a.writeTo(w)
}

// finishKey stores the answer of the create that claimed scope (or
// releases it), and keeps trying in the background while the catalog
// will not take it: creates sent again with the key wait for the answer
// meanwhile, as long as this node holds the claim (when it goes away,
// its claims lapse with its lease and the next create takes over).
func (f *Forwarder) finishKey(ctx context.Context, scope string, s *store.Stored) {
	err := f.idem.FinishIdempotency(ctx, scope, s)
	if err == nil {
		return
	}
	if errdefs.Class(err) == errdefs.ErrFailedPrecondition {
		f.log.Warn("an idempotent create's claim was taken over meanwhile", "err", err)
		return
	}
	f.log.Warn("store an idempotent create's answer; retrying", "err", err)
	go func() {
		wait := f.finishRetry
		for deadline := time.Now().Add(idempotencyKept); time.Now().Before(deadline); {
			time.Sleep(wait)
			err := f.idem.FinishIdempotency(ctx, scope, s)
			if err == nil || errdefs.Class(err) == errdefs.ErrFailedPrecondition {
				f.log.Info("an idempotent create's answer stored after retries", "err", err)
				return
			}
			wait = min(2*wait, 30*time.Second)
		}
	}()
}

// awaitKey claims scope for this create, or answers with what the create
// that holds it answered (waiting while it runs); done says it answered.
func (f *Forwarder) awaitKey(w http.ResponseWriter, r *http.Request, scope string) (done bool) {
	deadline := time.Now().Add(idempotencyWait)
	for {
		claimed, stored, err := f.idem.ClaimIdempotency(r.Context(), scope)
		switch {
		case err != nil:
			writeError(w, http.StatusServiceUnavailable, "unavailable", "the cluster catalog is unavailable, so the Idempotency-Key cannot be checked: retry")
			return true
		case claimed:
			return false
		case stored != nil:
			w.Header().Set("Content-Type", stored.ContentType)
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(stored.Status)
			w.Write(stored.Body)
			return true
		case time.Now().After(deadline):
			writeError(w, http.StatusConflict, "failed_precondition", "a create with this Idempotency-Key is still running: retry later")
			return true
		}
		select {
		case <-r.Context().Done():
			return true
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// place runs the create on the first candidate that takes it.
func (f *Forwarder) place(r *http.Request, body []byte, template string) *answer {
	cands := f.candidates(r.Context(), template)
	if len(cands) == 0 {
		cands = []store.Member{{ID: f.self}} // the catalog is away: here
	}
	var a *answer
	for _, m := range cands {
		a = &answer{header: http.Header{}}
		if m.ID == f.self {
			req := r.Clone(r.Context())
			req.Body = io.NopCloser(bytes.NewReader(body))
			req.ContentLength = int64(len(body))
			f.next.ServeHTTP(a, req)
		} else if err := f.send(r, body, m, a); err != nil {
			f.log.Warn("place a create on another node", "node", m.ID, "err", err)
			continue
		}
		if !a.refused() {
			return a
		}
		f.log.Info("node refused a create; trying the next", "node", m.ID)
	}
	if a == nil || a.status == 0 {
		a = &answer{header: http.Header{}}
		writeError(a, http.StatusServiceUnavailable, "unavailable", "no node could take the sandbox: retry")
	}
	return a
}

// send runs the create on node m, signed as forwarded by this node.
func (f *Forwarder) send(r *http.Request, body []byte, m store.Member, a *answer) error {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, strings.TrimSuffix(m.Address, "/")+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range r.Header {
		req.Header[k] = v
	}
	req.Host = r.Host
	f.signOut(req)
	resp, err := f.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	a.status = resp.StatusCode
	for k, v := range resp.Header {
		a.header[k] = v
	}
	_, err = io.Copy(&a.body, resp.Body)
	return err
}
