package daemon

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// background holds the daemon's long-lived goroutines, each named by the
// part it belongs to, so that stop joins them all and says which part held
// it up.
type background struct {
	wg      sync.WaitGroup
	mu      sync.Mutex
	running map[string]int // part -> goroutines of it still running
}

// Go runs fn in a goroutine of part.
func (b *background) Go(part string, fn func()) {
	b.mu.Lock()
	if b.running == nil {
		b.running = map[string]int{}
	}
	b.running[part]++
	b.mu.Unlock()
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer b.done(part)
		fn()
	}()
}

func (b *background) done(part string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running[part]--; b.running[part] == 0 {
		delete(b.running, part)
	}
}

// Wait waits for every goroutine (their contexts cancelled by the caller)
// for up to timeout; past it, it answers an error naming the parts whose
// goroutines still run.
func (b *background) Wait(timeout time.Duration) error {
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	parts := slices.Sorted(maps.Keys(b.running))
	return fmt.Errorf("still running after %s: %s", timeout, strings.Join(parts, ", "))
}
