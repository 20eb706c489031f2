package jupyter

import (
	"context"
	"sync"
	"time"
)

// Route receives the messages answering one request, in the order each
// channel delivered them, in a queue without bound (its filter is what
// keeps it small).
type Route struct {
	c      *Client
	id     string
	filter Filter
	q      queue
}

// ID is the request's msg_id.
func (r *Route) ID() string { return r.id }

// Filter runs on a reader goroutine for each message of a Route before it
// is queued, and queues what it keeps with push: none, m, a changed copy,
// or more. It must be quick.
type Filter func(m *Message, push func(*Message))

// Forward hands m to r, through r's filter, as if it answered r's
// request: for a follow-up request whose answers belong to an earlier one
// (a filter of the follow-up's Route calls it).
func (r *Route) Forward(m *Message) { r.deliver(m) }

func (r *Route) deliver(m *Message) {
	if r.filter != nil {
		r.filter(m, r.q.push)
		return
	}
	r.q.push(m)
}

// Recv returns the next message. It returns nil, nil when d (if positive)
// passes with none, ctx's error when ctx ends, and the client's close
// cause once the client is closed and the queue is empty.
func (r *Route) Recv(ctx context.Context, d time.Duration) (*Message, error) {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	for {
		if m := r.q.pop(); m != nil {
			return m, nil
		}
		select {
		case <-r.c.done:
			if m := r.q.pop(); m != nil {
				return m, nil
			}
			r.c.mu.Lock()
			err := r.c.err
			r.c.mu.Unlock()
			return nil, err
		default:
		}
		select {
		case <-r.q.signal:
		case <-r.c.done:
		case <-timeout:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close stops the routing of the request's answers; later ones are
// dropped.
func (r *Route) Close() {
	r.c.mu.Lock()
	if r.c.routes[r.id] == r {
		delete(r.c.routes, r.id)
	}
	r.c.mu.Unlock()
}

type queue struct {
	mu     sync.Mutex
	items  []*Message
	signal chan struct{} // capacity 1: "there may be something"
}

func (q *queue) push(m *Message) {
	q.mu.Lock()
	q.items = append(q.items, m)
	q.mu.Unlock()
	q.wake()
}

func (q *queue) wake() {
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

func (q *queue) pop() *Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return nil
	}
	m := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	return m
}
