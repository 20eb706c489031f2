package sandbox

import "sync"

// feedBuffer is how far a subscriber of a feed may fall behind before it is
// cut off.
const feedBuffer = 1024

// feed hands what Telemetry records (samples, log lines) to subscribers as
// it is recorded, without ever waiting for one: the sampler and the
// journal must not stall on a slow client. A subscriber that falls
// feedBuffer values behind is cut off (its channel closed), so it never
// misses a value unknowingly: it subscribes again and starts afresh.
type feed[T any] struct {
	mu   sync.Mutex
	subs map[*feedSub[T]]struct{}
}

type feedSub[T any] struct {
	key string // "": every key's values
	ch  chan T
}

// subscribe returns a channel of the values published under key ("": all)
// from now on, and cancel, which closes it if it is still open.
func (f *feed[T]) subscribe(key string) (<-chan T, func()) {
	s := &feedSub[T]{key: key, ch: make(chan T, feedBuffer)}
	f.mu.Lock()
	if f.subs == nil {
		f.subs = map[*feedSub[T]]struct{}{}
	}
	f.subs[s] = struct{}{}
	f.mu.Unlock()
	return s.ch, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.subs[s]; ok {
			delete(f.subs, s)
			close(s.ch)
		}
	}
}

// publish hands v, recorded under key, to its subscribers.
func (f *feed[T]) publish(key string, v T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range f.subs {
		if s.key != "" && s.key != key {
			continue
		}
		select {
		case s.ch <- v:
		default:
			delete(f.subs, s)
			close(s.ch)
		}
	}
}

// end closes the channels of key's subscribers: there will be no more.
func (f *feed[T]) end(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range f.subs {
		if s.key == key {
			delete(f.subs, s)
			close(s.ch)
		}
	}
}
