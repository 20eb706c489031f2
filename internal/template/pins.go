package template

import "sync"

// pins are what builds and resolves in progress use, by the names the
// collector removes them under: images (i-<id>), base images
// (rootfs-...) and object store artifacts (layer-, start-, files-<key>).
// A build pins a step's layer and image before it asks whether they are
// cached, so the collector, which removes only what is not pinned and
// checks that under the same lock as the removal, can never take a cached
// layer from under a build that decided to reuse it.
//
// A pin released while a collection runs is held until that collection
// ends: the collection chose what to keep before the build finished and
// moved its tags, so it would not know that the tagged build needs them.
type pins struct {
	mu         sync.Mutex
	held       map[string]int
	collecting bool
	retired    []string // released during the collection, held until it ends
}

// pin holds names until release is called (once).
func (p *pins) pin(names ...string) (release func()) {
	p.mu.Lock()
	if p.held == nil {
		p.held = map[string]int{}
	}
	for _, n := range names {
		p.held[n]++
	}
	p.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { p.release(names) }) }
}

func (p *pins) release(names []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.collecting {
		p.retired = append(p.retired, names...)
		return
	}
	p.drop(names)
}

func (p *pins) drop(names []string) {
	for _, n := range names {
		if p.held[n]--; p.held[n] <= 0 {
			delete(p.held, n)
		}
	}
}

// collect marks a collection running until done is called; one runs at
// a time.
func (p *pins) collect() (done func()) {
	p.mu.Lock()
	p.collecting = true
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.collecting = false
		p.drop(p.retired)
		p.retired = nil
	}
}

// unlessPinned runs remove for name unless it is pinned, holding the pins
// so that nothing pins it meanwhile; it reports whether remove ran.
func (p *pins) unlessPinned(name string, remove func() error) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held[name] > 0 {
		return false, nil
	}
	return true, remove()
}
