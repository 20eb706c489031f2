package sandbox

import (
	"sync"
	"time"
)

// slots are the network slots the store must not give out for now, though
// no record holds them: those whose address range was found in use on the
// host (quarantined for a while), and those whose network is still being
// torn down after the store freed them (draining: a pause records the
// sandbox paused first). Its allocation filter is avoid.
type slots struct {
	mu sync.Mutex
	// quarantined holds when each slot was found in use on the host.
	quarantined map[int]time.Time
	// draining counts the teardowns still running on each slot.
	draining map[int]int
}

func newSlots() *slots {
	return &slots{quarantined: map[int]time.Time{}, draining: map[int]int{}}
}

// quarantineTime is how long a slot found in use on the host is avoided
// before it is tried again.
const quarantineTime = time.Minute

// quarantine keeps slot, found in use on the host, from being given out
// for quarantineTime.
func (sl *slots) quarantine(slot int) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	sl.quarantined[slot] = time.Now()
}

// drain keeps slot from being given out until release is called: its
// network is still on the host though its record no longer holds it.
func (sl *slots) drain(slot int) (release func()) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	sl.draining[slot]++
	return sync.OnceFunc(func() {
		sl.mu.Lock()
		defer sl.mu.Unlock()
		if sl.draining[slot]--; sl.draining[slot] <= 0 {
			delete(sl.draining, slot)
		}
	})
}

// avoid is the store's allocation filter.
func (sl *slots) avoid(slot int) bool {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.draining[slot] > 0 {
		return true
	}
	at, ok := sl.quarantined[slot]
	if ok && time.Since(at) > quarantineTime {
		delete(sl.quarantined, slot)
		return false
	}
	return ok
}
