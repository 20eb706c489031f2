package interpreter

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/interpreter/jupyter"
)

// Resumable executions (/executions, a SPACE extension; see doc.go): a
// cell that runs on whether or not a client follows it, its lines kept in
// an execLog for the clients that come back.

// execRecord is one resumable execution.
type execRecord struct {
	id        string
	contextID string
	started   time.Time
	log       *execLog
	interrupt context.CancelFunc // the run's context: ending it interrupts the cell
}

// execSummary is an execution as GET /executions lists it.
type execSummary struct {
	ID        string     `json:"id"`
	ContextID string     `json:"context_id"`
	State     string     `json:"state"` // running | done
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at"` // null while running
}

func (e *execRecord) summary() execSummary {
	sum := execSummary{ID: e.id, ContextID: e.contextID, State: "running", StartedAt: e.started.UTC()}
	if ended, at := e.log.ended(); ended {
		at = at.UTC()
		sum.State, sum.EndedAt = "done", &at
	}
	return sum
}

// execTable holds the recent resumable executions: every running one, and
// finished ones until there are more than keep executions or their lines
// together pass keepBytes, the oldest going first.
type execTable struct {
	keep      int
	keepBytes int64

	mu   sync.Mutex
	all  []*execRecord // oldest first
	byID map[string]*execRecord
}

func newExecTable(keep int, keepBytes int64) *execTable {
	return &execTable{keep: keep, keepBytes: keepBytes, byID: map[string]*execRecord{}}
}

func (t *execTable) add(e *execRecord) {
	t.mu.Lock()
	t.all = append(t.all, e)
	t.byID[e.id] = e
	t.mu.Unlock()
	t.evict()
}

func (t *execTable) get(id string) *execRecord {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byID[id]
}

func (t *execTable) list() []execSummary {
	t.evict() // those that ended since the last start or end
	t.mu.Lock()
	all := append([]*execRecord(nil), t.all...)
	t.mu.Unlock()
	out := make([]execSummary, 0, len(all))
	for _, e := range all {
		out = append(out, e.summary())
	}
	return out
}

// evict forgets finished executions, oldest first, while there are too
// many or they hold too much. Running ones stay: their clients may be
// about to come back.
func (t *execTable) evict() {
	t.mu.Lock()
	defer t.mu.Unlock()
	var total int64
	for _, e := range t.all {
		total += e.log.size()
	}
	n := len(t.all)
	kept := t.all[:0]
	for _, e := range t.all {
		if ended, _ := e.log.ended(); ended && (n > t.keep || total > t.keepBytes) {
			delete(t.byID, e.id)
			n--
			total -= e.log.size()
			continue
		}
		kept = append(kept, e)
	}
	clear(t.all[len(kept):])
	t.all = kept
}

// interruptAll interrupts every running execution (the server closes).
func (t *execTable) interruptAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.all {
		e.interrupt()
	}
}

// startExecution runs ex on c in the background, as a resumable execution
// whose first line is its id.
func (s *Server) startExecution(c *kernelContext, ex execution) *execRecord {
	ctx, cancel := context.WithCancel(context.Background())
	e := &execRecord{id: jupyter.NewID(), contextID: c.ID, started: time.Now(),
		log: newExecLog(s.cfg.ExecutionLogBytes), interrupt: cancel}
	e.log.write(executionLine{Type: "execution", ID: e.id})
	s.execs.add(e)
	s.log.Debug("execution started", "execution", e.id, "context", c.ID)
	tk := c.turns.join() // now: executions on a context run in the order they were started
	go func() {
		defer cancel()
		s.run(ctx, c, tk, ex, e.log)
		if ended, _ := e.log.ended(); !ended {
			// Interrupted while it waited for the context's turn.
			e.log.write(errorLine{Type: "error", Name: "ExecutionInterrupted",
				Value: "the execution was interrupted before it started (the context was busy with an earlier one)"})
			e.log.write(markerLine{Type: "end_of_execution"})
		}
		s.log.Debug("execution done", "execution", e.id, "context", c.ID, "took", time.Since(e.started))
		s.execs.evict()
	}()
	return e
}

// HTTP handlers.

func (s *Server) createExecution(w http.ResponseWriter, r *http.Request) {
	c, ex, ok := s.parseExecution(w, r)
	if !ok {
		return
	}
	e := s.startExecution(c, ex)
	s.follow(w, r, e, 0)
}

func (s *Server) executionEvents(w http.ResponseWriter, r *http.Request) {
	var after int64
	if q := r.URL.Query().Get("after"); q != "" {
		n, err := strconv.ParseInt(q, 10, 64)
		if err != nil || n < 0 {
			http.Error(w, "after: want a seq (an integer, 0 or more)", http.StatusBadRequest)
			return
		}
		after = n
	}
	e := s.execution(w, r)
	if e == nil {
		return
	}
	s.follow(w, r, e, after)
}

func (s *Server) interruptExecution(w http.ResponseWriter, r *http.Request) {
	e := s.execution(w, r)
	if e == nil {
		return
	}
	e.interrupt()
	writeJSON(w, e.summary())
}

func (s *Server) listExecutions(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, s.execs.list())
}

// execution is the request's {id}, or nil once it answered 404.
func (s *Server) execution(w http.ResponseWriter, r *http.Request) *execRecord {
	e := s.execs.get(r.PathValue("id"))
	if e == nil {
		http.Error(w, fmt.Sprintf("Execution %s not found", r.PathValue("id")), http.StatusNotFound)
	}
	return e
}

// follow streams e's lines with seq > after, then the new ones as they
// come, until the end line or the client leaves (which leaves the cell
// running). A keepalive, with the seq reached, marks each quiet
// keepaliveEvery.
func (s *Server) follow(w http.ResponseWriter, r *http.Request, e *execRecord, after int64) {
	out := newLineWriter(w)
	quiet := time.NewTimer(keepaliveEvery)
	defer quiet.Stop()
	for !out.gone() {
		lines, last, done, wake := e.log.read(after)
		if len(lines) > 0 {
			out.writeRaw(lines...)
			after = last
			quiet.Reset(keepaliveEvery)
		}
		if done {
			return
		}
		if len(lines) > 0 {
			continue
		}
		select {
		case <-wake:
		case <-r.Context().Done():
			return
		case <-quiet.C:
			out.writeRaw(mustEncodeLine(keepaliveLine{Seq: after, Type: "keepalive"}))
			quiet.Reset(keepaliveEvery)
		}
	}
}

func (s *Server) authExecutions(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, _, err := s.checkToken(r, true); err != nil {
			s.refuse(w, err)
			return
		}
		h(w, r)
	}
}
