package files

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"

	"github.com/fsnotify/fsnotify"

	"github.com/spacesandbox/space/api/envd/filesystem"
)

// watcher turns fsnotify events under root into FilesystemEvents with names
// relative to root.
type watcher struct {
	fsw          *fsnotify.Watcher
	root         string
	shown        string // the path the client asked for, for entry paths
	recursive    bool
	includeEntry bool
	emit         func(*filesystem.FilesystemEvent)
	done         chan struct{}
	closeOnce    sync.Once
}

var opTypes = []struct {
	op fsnotify.Op
	t  filesystem.EventType
}{
	{fsnotify.Create, filesystem.EventType_EVENT_TYPE_CREATE},
	{fsnotify.Write, filesystem.EventType_EVENT_TYPE_WRITE},
	{fsnotify.Remove, filesystem.EventType_EVENT_TYPE_REMOVE},
	{fsnotify.Rename, filesystem.EventType_EVENT_TYPE_RENAME},
	{fsnotify.Chmod, filesystem.EventType_EVENT_TYPE_CHMOD},
}

func newWatcher(root, shown string, recursive, includeEntry bool, emit func(*filesystem.FilesystemEvent)) (*watcher, error) {
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("create watcher: %w", err)
	}
	w := &watcher{fsw: fsw, root: root, shown: shown, recursive: recursive, includeEntry: includeEntry, emit: emit, done: make(chan struct{})}
	if err := w.add(root); err != nil {
		fsw.Close()
		return nil, err
	}
	go w.loop()
	return w, nil
}

// add watches dir, and with recursive every directory below it.
func (w *watcher) add(dir string) error {
	if !w.recursive {
		if err := w.fsw.Add(dir); err != nil {
			return fmt.Errorf("watch %s: %w", dir, err)
		}
		return nil
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return err
			}
			return nil // vanished meanwhile
		}
		if !d.IsDir() {
			return nil
		}
		if err := w.fsw.Add(p); err != nil && p == dir {
			return fmt.Errorf("watch %s: %w", p, err)
		}
		return nil
	})
}

func (w *watcher) loop() {
	defer close(w.done)
	for {
		select {
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			w.handle(ev)
		case _, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
		}
	}
}

func (w *watcher) handle(ev fsnotify.Event) {
	rel, err := filepath.Rel(w.root, ev.Name)
	if err != nil || rel == "." {
		return
	}
	created := w.recursive && ev.Has(fsnotify.Create)
	if created {
		_ = w.add(ev.Name) // only directories are added; files fail quietly
	}
	for _, ot := range opTypes {
		if ev.Has(ot.op) {
			w.emitEvent(ev.Name, rel, ot.op, ot.t)
		}
	}
	if created {
		w.emitExisting(ev.Name)
	}
}

// emitExisting reports what a new directory already holds once its watch
// is in place: entries made in it before (a file written right after its
// directory was made, a tree moved in) have no events of their own. A file
// that already has content was written too: it gets a WRITE after its
// CREATE, which is what a client waiting for a file's content looks for
// (E2B's SDK tests wait for the WRITE of a file in a new subdirectory). An
// entry made just after the watch may be reported twice; none is missed.
func (w *watcher) emitExisting(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil
		}
		rel, err := filepath.Rel(w.root, p)
		if err != nil {
			return nil
		}
		w.emitEvent(p, rel, fsnotify.Create, filesystem.EventType_EVENT_TYPE_CREATE)
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil && info.Size() > 0 {
				w.emitEvent(p, rel, fsnotify.Write, filesystem.EventType_EVENT_TYPE_WRITE)
			}
		}
		return nil
	})
}

func (w *watcher) emitEvent(path, rel string, op fsnotify.Op, t filesystem.EventType) {
	fe := &filesystem.FilesystemEvent{Name: rel, Type: t}
	if w.includeEntry && (op == fsnotify.Create || op == fsnotify.Write || op == fsnotify.Chmod) {
		if e, err := entryInfo(path, filepath.Join(w.shown, rel)); err == nil {
			fe.Entry = e
		}
	}
	w.emit(fe)
}

func (w *watcher) Close() {
	w.closeOnce.Do(func() {
		_ = w.fsw.Close()
		<-w.done
	})
}

// pollWatcher collects events for the non-streaming watcher API.
type pollWatcher struct {
	w      *watcher
	mu     sync.Mutex
	events []*filesystem.FilesystemEvent
}

// maxPolledEvents bounds what an unread poll watcher holds; oldest go first.
const maxPolledEvents = 10000

func (p *pollWatcher) push(ev *filesystem.FilesystemEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.events) >= maxPolledEvents {
		p.events = p.events[1:]
	}
	p.events = append(p.events, ev)
}

func (p *pollWatcher) take() []*filesystem.FilesystemEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	evs := p.events
	p.events = nil
	return evs
}
