package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// journalSize is how many of its own log lines the agent keeps (envd's are
// shipped to a collector; these are read by spaced, GET /logs).
const journalSize = 1000

// LogLine is one line of the agent's journal, the sandbox's own log: the
// agent's start, Init, each process started and ended (envd's texts),
// warnings and errors. Debug lines are not kept.
type LogLine struct {
	Seq     uint64            `json:"seq"`
	Time    time.Time         `json:"timestamp"`
	Level   string            `json:"level"`
	Message string            `json:"message"`
	Fields  map[string]string `json:"fields,omitempty"`
}

// Logs is the body of GET /logs.
type Logs struct {
	// Boot changes when the agent starts afresh (a new sandbox, or one
	// booted on a saved disk); a restored checkpoint keeps it, and its
	// journal with it.
	Boot string    `json:"boot"`
	Logs []LogLine `json:"logs"`
}

// journal is a ring of the last journalSize lines.
type journal struct {
	boot  string
	mu    sync.Mutex
	seq   uint64
	lines []LogLine // oldest first
}

func newJournal() *journal {
	b := make([]byte, 8)
	rand.Read(b)
	return &journal{boot: hex.EncodeToString(b)}
}

func (j *journal) add(l LogLine) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.seq++
	l.Seq = j.seq
	if len(j.lines) == journalSize {
		copy(j.lines, j.lines[1:])
		j.lines = j.lines[:journalSize-1]
	}
	j.lines = append(j.lines, l)
}

// after returns the lines with a sequence number above seq.
func (j *journal) after(seq uint64) []LogLine {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := []LogLine{}
	for _, l := range j.lines {
		if l.Seq > seq {
			out = append(out, l)
		}
	}
	return out
}

func (j *journal) serve(w http.ResponseWriter, r *http.Request) {
	after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
	writeJSON(w, http.StatusOK, Logs{Boot: j.boot, Logs: j.after(after)})
}

// handler keeps what passes through next at info level and above.
func (j *journal) handler(next slog.Handler) slog.Handler {
	return &journalHandler{j: j, next: next}
}

type journalHandler struct {
	j      *journal
	next   slog.Handler
	attrs  []slog.Attr
	prefix string // of the current group
}

func (h *journalHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.next.Enabled(ctx, l)
}

func (h *journalHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelInfo {
		fields := map[string]string{}
		for _, a := range h.attrs {
			addField(fields, "", a)
		}
		r.Attrs(func(a slog.Attr) bool {
			addField(fields, h.prefix, a)
			return true
		})
		if len(fields) == 0 {
			fields = nil
		}
		h.j.add(LogLine{Time: r.Time.UTC(), Level: levelName(r.Level), Message: r.Message, Fields: fields})
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(as)
	c.attrs = append([]slog.Attr{}, h.attrs...)
	for _, a := range as {
		if h.prefix != "" {
			a.Key = h.prefix + a.Key
		}
		c.attrs = append(c.attrs, a)
	}
	return &c
}

func (h *journalHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	c.prefix = h.prefix + name + "."
	return &c
}

func addField(out map[string]string, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		for _, g := range v.Group() {
			addField(out, prefix+a.Key+".", g)
		}
		return
	}
	if a.Key != "" {
		out[prefix+a.Key] = v.String()
	}
}

// levelName is the level as E2B's logs name it (debug, info, warn, error).
func levelName(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "error"
	case l >= slog.LevelWarn:
		return "warn"
	case l >= slog.LevelInfo:
		return "info"
	}
	return strings.ToLower(l.String())
}
