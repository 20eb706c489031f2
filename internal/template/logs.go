package template

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// LogEntry is one line of a build's log. Step is 0 for the source (FROM),
// 1..n for the steps and n+1 for the start command and the end.
type LogEntry struct {
	Seq     int       `json:"seq"`
	Time    time.Time `json:"time"`
	Level   string    `json:"level"` // debug, info, warn, error
	Step    int       `json:"step"`
	Message string    `json:"message"`
	// Cached is set on the line that starts a step found in the cache
	// (the step is not run; its message ends in "(cached)").
	Cached bool `json:"cached,omitempty"`
}

// Limits of a build's log: a step that prints without end cannot fill the
// node's disk or memory. What goes past them is counted, not kept.
const (
	maxLogEntries = 100_000
	maxLogLine    = 4096
)

// buildLog is a build's log: appended while the build runs, written
// through to a file (so a finished build's log survives restarts), read
// by offset, and followed by waiting for the next entry.
type buildLog struct {
	path string

	mu      sync.Mutex
	entries []LogEntry
	dropped int
	done    bool
	changed chan struct{} // closed and replaced at every append
	file    *os.File
}

func openLog(path string) (*buildLog, error) {
	l := &buildLog{path: path, changed: make(chan struct{})}
	if f, err := os.Open(path); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var e LogEntry
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				l.entries = append(l.entries, e)
			}
		}
		f.Close()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("build log: %w", err)
	}
	return l, nil
}

// add appends an entry; it never fails the build (a log that cannot be
// written to disk is still kept in memory).
func (l *buildLog) add(level string, step int, format string, args ...any) {
	l.append(LogEntry{Level: level, Step: step, Message: fmt.Sprintf(format, args...)})
}

// cached appends the line of a step found in the cache.
func (l *buildLog) cached(step int, format string, args ...any) {
	l.append(LogEntry{Level: "info", Step: step, Message: fmt.Sprintf(format, args...), Cached: true})
}

func (l *buildLog) append(e LogEntry) {
	msg := e.Message
	if len(msg) > maxLogLine {
		msg = msg[:maxLogLine] + " [line cut]"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	if len(l.entries) >= maxLogEntries {
		l.dropped++
		return
	}
	e.Seq, e.Time, e.Message = len(l.entries), time.Now().UTC(), msg
	l.entries = append(l.entries, e)
	if l.file == nil {
		if err := os.MkdirAll(filepath.Dir(l.path), 0o700); err == nil {
			l.file, _ = os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		}
	}
	if l.file != nil {
		b, _ := json.Marshal(e)
		l.file.Write(append(b, '\n'))
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// finish says the log is complete (after a last note of what was
// dropped); followers see the end.
func (l *buildLog) finish() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dropped > 0 {
		l.entries = append(l.entries, LogEntry{Seq: len(l.entries), Time: time.Now().UTC(), Level: "warn", Message: fmt.Sprintf("%d more log lines were dropped", l.dropped)})
	}
	l.done = true
	if l.file != nil {
		l.file.Close()
		l.file = nil
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// read returns up to limit entries from offset, whether the log is
// complete, and a channel closed at the next change.
func (l *buildLog) read(offset, limit int) ([]LogEntry, bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if offset < 0 {
		offset = 0
	}
	if offset > len(l.entries) {
		offset = len(l.entries)
	}
	end := len(l.entries)
	if limit > 0 && offset+limit < end {
		end = offset + limit
	}
	return append([]LogEntry(nil), l.entries[offset:end]...), l.done, l.changed
}

// tail is the last n messages of step (for a failure's report).
func (l *buildLog) tail(step, n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for i := len(l.entries) - 1; i >= 0 && len(out) < n; i-- {
		if l.entries[i].Step == step {
			out = append([]string{l.entries[i].Message}, out...)
		}
	}
	return out
}
