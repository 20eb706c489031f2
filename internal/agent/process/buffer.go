package process

import (
	"sort"
	"sync"

	"github.com/spacesandbox/space/api/envd/process"
)

// Event is one numbered process event. Seq starts at 1 and only goes up;
// keepalives carry Seq 0. Dropped counts the events that fell out of the
// buffer between the previous event a reader got and this one.
type Event struct {
	Seq     uint64
	Event   *process.ProcessEvent
	Dropped uint64
}

// buffer holds a process's events: the start event and the end event are
// always kept, data events are dropped oldest first once their bytes exceed
// limit. Writers never block on readers; readers wait on wake.
type buffer struct {
	mu    sync.Mutex
	limit int
	next  uint64
	start *Event
	data  []Event // data[head:] are live
	sizes []int
	head  int
	bytes int
	end   *Event
	wake  chan struct{}
}

func newBuffer(limit int) *buffer {
	return &buffer{limit: limit, next: 1, wake: make(chan struct{})}
}

func (b *buffer) add(ev *process.ProcessEvent, size int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.end != nil {
		return // nothing follows the end event
	}
	e := Event{Seq: b.next, Event: ev}
	b.next++
	switch ev.GetEvent().(type) {
	case *process.ProcessEvent_Start:
		b.start = &e
	case *process.ProcessEvent_End:
		b.end = &e
	default:
		b.data = append(b.data, e)
		b.sizes = append(b.sizes, size)
		b.bytes += size
		for b.bytes > b.limit && b.head < len(b.data) {
			b.bytes -= b.sizes[b.head]
			b.data[b.head] = Event{}
			b.head++
		}
		if b.head > 64 && b.head > len(b.data)/2 {
			n := copy(b.data, b.data[b.head:])
			copy(b.sizes, b.sizes[b.head:])
			b.data, b.sizes, b.head = b.data[:n], b.sizes[:n], 0
		}
	}
	close(b.wake)
	b.wake = make(chan struct{})
}

// since returns the buffered events with Seq > after, whether the process has
// ended (so nothing more will come), and a channel closed when more events
// arrive.
func (b *buffer) since(after uint64) (evs []Event, ended bool, wake <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.start != nil && b.start.Seq > after {
		evs = append(evs, *b.start)
	}
	live := b.data[b.head:]
	i := sort.Search(len(live), func(i int) bool { return live[i].Seq > after })
	evs = append(evs, live[i:]...)
	if b.end != nil && b.end.Seq > after {
		evs = append(evs, *b.end)
	}
	return evs, b.end != nil, b.wake
}

// ended reports whether the end event has been added.
func (b *buffer) ended() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.end != nil
}

// dataBytes is the size of the data events still held.
func (b *buffer) dataBytes() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bytes
}
