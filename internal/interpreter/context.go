package interpreter

import (
	"context"
	"errors"
	"sync"
)

// kernelContext is one E2B code context: a language, a working directory
// and the kernel that runs its cells, one at a time.
type kernelContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`

	kind   kernelKind
	launch *launcher
	// anonymous: made by a request to /contexts without a token, which
	// only the published SDKs' context calls on a public sandbox are
	// (see doc.go). Only such contexts are listed to, restarted and
	// deleted by anonymous requests.
	anonymous bool
	// turns is the right to use the kernel: executions, the env sync and
	// restarts take it in the order they arrived, and a waiting request
	// whose client leaves gives up its place.
	turns turns

	mu      sync.Mutex
	k       *kernel // nil: not started, or killed for a restart
	removed bool

	envVersion uint64 // the agent state version whose env vars the kernel has; held with the turn
}

// endReason says why a kernel was killed on purpose, for the execution
// that was running on it.
type endReason int32

const (
	endNone endReason = iota
	endRestart
	endDelete
)

var errRemoved = errors.New("context was deleted")

func newKernelContext(id, language string, kind kernelKind, cwd string, l *launcher) *kernelContext {
	return &kernelContext{ID: id, Language: language, Cwd: cwd, kind: kind, launch: l}
}

// acquire waits for the context's turn, or for ctx; the caller ends the
// turn with the ticket's done.
func (c *kernelContext) acquire(ctx context.Context) (*ticket, error) {
	tk := c.turns.join()
	if err := tk.wait(ctx); err != nil {
		return nil, err
	}
	return tk, nil
}

// kernel returns a running kernel, starting one if there is none or the
// last one died. The caller holds the turn.
func (c *kernelContext) kernel(ctx context.Context) (*kernel, error) {
	c.mu.Lock()
	k, removed := c.k, c.removed
	c.mu.Unlock()
	if removed {
		return nil, errRemoved
	}
	if k != nil && k.alive() {
		return k, nil
	}
	if k != nil {
		c.launch.log.Warn("kernel died; starting a new one", "context", c.ID, "status", k.exitStatus(), "out_of_memory", k.outOfMemory())
		k.kill()
	}
	k, err := c.launch.start(ctx, c.ID, c.Cwd, c.kind)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		k.kill()
		return nil, errRemoved
	}
	c.k = k
	c.envVersion = 0 // a new process has only its launch environment
	return k, nil
}

// stop kills the kernel at once (a running cell sees why), and forgets it.
func (c *kernelContext) stop(why endReason) {
	c.mu.Lock()
	k := c.k
	c.k = nil
	if why == endDelete {
		c.removed = true
	}
	c.mu.Unlock()
	if k != nil {
		k.ended.Store(int32(why))
		k.kill()
	}
}

// restart replaces the kernel with a new one in the same directory.
func (c *kernelContext) restart(ctx context.Context) error {
	c.stop(endRestart)
	tk, err := c.acquire(ctx)
	if err != nil {
		return err
	}
	defer tk.done()
	_, err = c.kernel(ctx)
	return err
}
