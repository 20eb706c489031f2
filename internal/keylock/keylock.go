// Package keylock is a mutex per key (a paused sandbox's id, an image
// being made): unused keys are forgotten.
package keylock

import "sync"

// Map is a mutex per key. The zero value is ready.
type Map struct {
	mu    sync.Mutex
	locks map[string]*entry
}

type entry struct {
	mu   sync.Mutex
	refs int
}

// Lock locks key and returns its unlock.
func (k *Map) Lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*entry{}
	}
	l := k.locks[key]
	if l == nil {
		l = &entry{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
