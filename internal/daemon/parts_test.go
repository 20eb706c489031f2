package daemon

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestParts: parts start in order and stop in reverse; a failed start
// stops the ones started before it and not itself or later ones; a stop
// that fails or takes too long is named and the others still stop.
func TestParts(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name      string
		failStart string // this part's start fails
		failStop  string // this part's stop fails
		stuck     string // this part's stop never returns
		wantLog   []string
		wantStart string // in the start error
		wantStop  []string
	}{
		{name: "in order, stopped in reverse",
			wantLog: []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}},
		{name: "a failed start stops the started ones", failStart: "b",
			wantLog: []string{"start a", "start b", "stop a"}, wantStart: "start b: boom"},
		{name: "a failed stop is named, the rest stop", failStop: "b",
			wantLog: []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}, wantStop: []string{"stop b: boom"}},
		{name: "a stuck stop is named, the rest stop", stuck: "b",
			wantLog: []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}, wantStop: []string{"b held shutdown up"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu  sync.Mutex
				log []string
			)
			logged := func(l string) { mu.Lock(); log = append(log, l); mu.Unlock() }
			release := make(chan struct{})
			defer close(release)
			mk := func(name string) part {
				return part{name: name,
					start: func(context.Context) error {
						logged("start " + name)
						if name == tc.failStart {
							return boom
						}
						return nil
					},
					stop: func(ctx context.Context) error {
						logged("stop " + name)
						if name == tc.stuck {
							<-release
						}
						if name == tc.failStop {
							return boom
						}
						return nil
					}}
			}
			ps := &parts{log: slog.New(slog.DiscardHandler), stopWithin: 50 * time.Millisecond}
			var startErr error
			for _, name := range []string{"a", "b", "c"} {
				if startErr = ps.start(context.Background(), mk(name)); startErr != nil {
					break
				}
			}
			if tc.wantStart == "" && startErr != nil || tc.wantStart != "" && (startErr == nil || !strings.Contains(startErr.Error(), tc.wantStart)) {
				t.Fatalf("start: %v, want %q", startErr, tc.wantStart)
			}
			stopErr := ps.stop()
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(log, tc.wantLog) {
				t.Errorf("calls %v, want %v", log, tc.wantLog)
			}
			for _, want := range tc.wantStop {
				if stopErr == nil || !strings.Contains(stopErr.Error(), want) {
					t.Errorf("stop: %v, want it to say %q", stopErr, want)
				}
			}
			if len(tc.wantStop) == 0 && stopErr != nil {
				t.Errorf("stop: %v", stopErr)
			}
			for _, other := range []string{"a", "c"} {
				if stopErr != nil && strings.Contains(stopErr.Error(), other+" ") {
					t.Errorf("stop named %s, which stopped: %v", other, stopErr)
				}
			}
		})
	}
}

// TestWithLoops: a part's loops run from its start, outlive the start's
// context, and are joined before its own stop runs.
func TestWithLoops(t *testing.T) {
	var order []string
	running := make(chan struct{})
	ended := make(chan struct{})
	p := withLoops(part{name: "p",
		start: func(context.Context) error { order = append(order, "start"); return nil },
		stop: func(context.Context) error {
			select {
			case <-ended:
				order = append(order, "stop after the loop")
			default:
				order = append(order, "stop with the loop running")
			}
			return nil
		},
	}, func(ctx context.Context) {
		close(running)
		<-ctx.Done()
		close(ended)
	})
	ctx, cancel := context.WithCancel(context.Background())
	if err := p.start(ctx); err != nil {
		t.Fatal(err)
	}
	<-running
	cancel() // the daemon's context ends: the loop works on
	select {
	case <-ended:
		t.Fatal("the loop ended with the start's context, before its part's stop")
	case <-time.After(20 * time.Millisecond):
	}
	if err := p.stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"start", "stop after the loop"}; !slices.Equal(order, want) {
		t.Fatalf("%v, want %v", order, want)
	}
}
