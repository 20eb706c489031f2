package interpreter

import (
	"context"
	"sync"
)

// turns is the right to use a context's kernel, one holder at a time,
// given in the order the requests joined: an execution started after
// another on the same context runs after it, however the goroutines that
// wait for it are scheduled. A waiter whose client leaves gives up its
// place.
type turns struct {
	mu    sync.Mutex
	held  bool
	queue []*ticket // waiting, in the order they joined
}

// ticket is one place in a context's queue.
type ticket struct {
	q     *turns
	ready chan struct{} // closed when the ticket holds the turn
}

// join takes a place in the queue at once; the ticket's ready channel is
// closed when its turn comes. Every ticket ends with done (after its turn)
// or leave (giving up its place or its turn).
func (q *turns) join() *ticket {
	q.mu.Lock()
	defer q.mu.Unlock()
	tk := &ticket{q: q, ready: make(chan struct{})}
	if !q.held && len(q.queue) == 0 {
		q.held = true
		close(tk.ready)
	} else {
		q.queue = append(q.queue, tk)
	}
	return tk
}

// wait blocks until the ticket's turn or ctx ends; on ctx's end the ticket
// has left the queue.
func (tk *ticket) wait(ctx context.Context) error {
	select {
	case <-tk.ready:
		return nil
	case <-ctx.Done():
		tk.leave()
		return ctx.Err()
	}
}

// leave gives up the ticket's place, or its turn if it got it meanwhile.
func (tk *ticket) leave() {
	q := tk.q
	q.mu.Lock()
	for i, w := range q.queue {
		if w == tk {
			q.queue = append(q.queue[:i], q.queue[i+1:]...)
			q.mu.Unlock()
			return
		}
	}
	q.mu.Unlock()
	tk.done() // it holds the turn: pass it on
}

// done passes the turn its ticket holds to the next in the queue.
func (tk *ticket) done() {
	q := tk.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queue) == 0 {
		q.held = false
		return
	}
	next := q.queue[0]
	q.queue = q.queue[1:]
	close(next.ready)
}
