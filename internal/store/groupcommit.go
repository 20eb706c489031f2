package store

import (
	"fmt"
	"slices"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// groupCommit runs write functions in shared transactions: one commit runs
// at a time, and every function submitted while it runs goes into the next
// one. A lone write commits at once; a burst shares a few commits (and
// their fsyncs) instead of queueing for one each. bbolt's own Batch closes a
// batch every MaxBatchDelay even while a commit is still running, so with
// slow fsyncs (a disk busy with booting sandboxes) a burst of 100 creates
// still made one small commit per millisecond of it, one after another:
// 580 ms median for the claim's write.
type groupCommit struct {
	db *bolt.DB

	mu      sync.Mutex
	pending []groupCall
	running bool
	commits int // for tests
}

type groupCall struct {
	fn  func(*bolt.Tx) error
	err chan error
}

// do runs fn in a write transaction shared with concurrent callers and
// returns once that transaction committed (or fn failed). fn may run more
// than once (a transaction is retried without a function that failed), so
// it must be idempotent.
func (g *groupCommit) do(fn func(*bolt.Tx) error) error {
	c := groupCall{fn: fn, err: make(chan error, 1)}
	g.mu.Lock()
	g.pending = append(g.pending, c)
	lead := !g.running
	g.running = true
	g.mu.Unlock()
	if lead {
		g.commitPending()
	}
	return <-c.err
}

// commitPending commits everything pending, then hands the next commit (of
// what arrived meanwhile) to a new goroutine, so the caller that led this
// one answers as soon as its own write is durable.
func (g *groupCommit) commitPending() {
	g.mu.Lock()
	calls := g.pending
	g.pending = nil
	g.mu.Unlock()
	g.commit(calls)
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pending) == 0 {
		g.running = false
		return
	}
	go g.commitPending()
}

// commit runs calls in one transaction. A function that fails gets its own
// error and the transaction is retried without it: its failure rolled back
// the others' writes too.
func (g *groupCommit) commit(calls []groupCall) {
	for len(calls) > 0 {
		failed, failure := -1, error(nil)
		err := g.db.Update(func(tx *bolt.Tx) error {
			for i, c := range calls {
				if err := callSafely(c.fn, tx); err != nil {
					failed, failure = i, err
					return err
				}
			}
			return nil
		})
		g.mu.Lock()
		g.commits++
		g.mu.Unlock()
		if failed >= 0 {
			calls[failed].err <- failure
			calls = slices.Delete(calls, failed, failed+1)
			continue
		}
		for _, c := range calls {
			c.err <- err // nil, or why the commit failed (a full disk, say)
		}
		return
	}
}

// callSafely turns a panic in fn into an error, so one bad write cannot
// stop every later one from committing.
func callSafely(fn func(*bolt.Tx) error, tx *bolt.Tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("store write panicked: %v", p)
		}
	}()
	return fn(tx)
}
