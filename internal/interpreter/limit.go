package interpreter

import (
	"encoding/json"
	"sync"
	"unicode/utf8"

	"github.com/spacesandbox/space/internal/interpreter/jupyter"
)

// truncatedType is the type of the message outputLimit inserts where it
// cut: not a Jupyter type, so it cannot collide with one.
const truncatedType = "space_output_truncated"

// outputLimit keeps one execution's output under max bytes (stream text
// and display bundles), at the kernel connection's reader, before it is
// queued: output past the limit is never held, however slowly the client
// reads. It cuts the stream message that crosses the limit, drops every
// later output, and marks the cut with a truncatedType message.
type outputLimit struct {
	max int64

	mu   sync.Mutex
	used int64
	cut  bool
}

func (l *outputLimit) filter(m *jupyter.Message, push func(*jupyter.Message)) {
	if m.Channel != jupyter.IOPub || l.max <= 0 {
		push(m)
		return
	}
	switch m.Type() {
	case "stream", "display_data", "execute_result", "update_display_data":
	default:
		push(m)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		return
	}
	size := int64(len(m.Content))
	if l.used+size <= l.max {
		l.used += size
		push(m)
		return
	}
	l.cut = true
	if m.Type() == "stream" {
		if part := cutStream(m, l.max-l.used); part != nil {
			push(part)
		}
	}
	push(&jupyter.Message{Header: jupyter.Header{MsgType: truncatedType}, ParentHeader: m.ParentHeader, Channel: jupyter.IOPub})
}

// cutStream returns m with its text cut to at most n bytes (on a rune
// boundary), or nil if nothing is left.
func cutStream(m *jupyter.Message, n int64) *jupyter.Message {
	var c streamContent
	if n <= 0 || json.Unmarshal(m.Content, &c) != nil {
		return nil
	}
	if int64(len(c.Text)) > n {
		i := int(n)
		for i > 0 && !utf8.RuneStart(c.Text[i]) {
			i--
		}
		c.Text = c.Text[:i]
	}
	if c.Text == "" {
		return nil
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil
	}
	part := *m
	part.Content = b
	return &part
}

type streamContent struct {
	Name string `json:"name"`
	Text string `json:"text"`
}
