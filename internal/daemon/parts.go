package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// part is one piece of spaced with a lifecycle. Its constructor (newX in
// this package) receives what it needs and opens what must exist for the
// parts made after it; start brings it into service, background loops
// included, and stop takes it out, joining those loops. Either may be nil.
type part struct {
	name  string
	start func(ctx context.Context) error
	stop  func(ctx context.Context) error
}

// loops are a part's goroutines. They run with a context that only their
// part's stop cancels (not the daemon's: a part works on until its turn
// to stop), and that stop joins them.
type loops struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newLoops() *loops {
	ctx, cancel := context.WithCancel(context.Background())
	return &loops{ctx: ctx, cancel: cancel}
}

// Go runs loop in a goroutine until stop.
func (l *loops) Go(loop func(ctx context.Context)) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		loop(l.ctx)
	}()
}

// stop cancels the loops' context and waits for them.
func (l *loops) stop() {
	l.cancel()
	l.wg.Wait()
}

// withLoops is p with loops of its own: started after p's start, joined
// before p's stop.
func withLoops(p part, fns ...func(ctx context.Context)) part {
	l := newLoops()
	start, stop := p.start, p.stop
	p.start = func(ctx context.Context) error {
		if start != nil {
			if err := start(ctx); err != nil {
				return err
			}
		}
		for _, fn := range fns {
			l.Go(fn)
		}
		return nil
	}
	p.stop = func(ctx context.Context) error {
		l.stop()
		if stop != nil {
			return stop(ctx)
		}
		return nil
	}
	return p
}

// loop is a part that is one goroutine.
func loop(name string, fn func(ctx context.Context)) part {
	return withLoops(part{name: name}, fn)
}

// parts starts the daemon's parts one by one, in the order of their
// dependencies, and stops the started ones in reverse: at shutdown, or
// when a later one fails to start or to be made.
type parts struct {
	log *slog.Logger
	// stopWithin is how long each part's stop may take; one that takes
	// longer is named and left behind, and the next one stops.
	stopWithin time.Duration
	started    []part
}

// start starts p now; a failure is answered naming it, and p is not
// stopped (what it had started it undoes itself).
func (ps *parts) start(ctx context.Context, p part) error {
	if p.start != nil {
		if err := p.start(ctx); err != nil {
			return fmt.Errorf("start %s: %w", p.name, err)
		}
	}
	ps.started = append(ps.started, p)
	ps.log.Debug("part started", "part", p.name)
	return nil
}

// stop stops the started parts in reverse order of their start. It answers
// an error naming each part that failed to stop or held shutdown up past
// stopWithin.
func (ps *parts) stop() error {
	var errs []error
	for i := len(ps.started) - 1; i >= 0; i-- {
		if err := ps.stopOne(ps.started[i]); err != nil {
			errs = append(errs, err)
		}
	}
	ps.started = nil
	return errors.Join(errs...)
}

func (ps *parts) stopOne(p part) error {
	if p.stop == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), ps.stopWithin)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- p.stop(ctx) }()
	select {
	case err := <-done:
		ps.log.Debug("part stopped", "part", p.name, "ms", time.Since(start).Milliseconds())
		if err != nil {
			return fmt.Errorf("stop %s: %w", p.name, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s held shutdown up: not stopped within %s", p.name, ps.stopWithin)
	}
}
