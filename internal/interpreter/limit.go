package interpreter

import (
	"bytes"
	"encoding/json"
	"sync"
	"unicode/utf8"

	"github.com/spacesandbox/space/internal/interpreter/jupyter"
)

// frameSlack is what a kernel message may hold past the output limit: its
// JSON around the text (the whole of it is counted against the limit).
const frameSlack = 64 << 10

// frameLimit is the most of one kernel message the server holds (see
// jupyter's Frame limit): past the execution's output limit a message's
// output is cut anyway, so nothing past it (and its envelope) is read
// into memory. No output limit, no frame limit.
func frameLimit(maxOutput int64) int64 {
	if maxOutput <= 0 {
		return 0
	}
	return maxOutput + frameSlack
}

// truncatedType is the type of the message outputLimit inserts where it
// cut: not a Jupyter type, so it cannot collide with one. A Python kernel
// sends one itself where it cut its stream output under the limit
// (startup/00-space.py); the execution's output then ends there as if it
// had passed the limit here.
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

// bytes is the output let through so far.
func (l *outputLimit) bytes() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.used
}

func (l *outputLimit) filter(m *jupyter.Message, push func(*jupyter.Message)) {
	if m.Channel != jupyter.IOPub || l.max <= 0 {
		push(m)
		return
	}
	switch m.Type() {
	case "stream", "display_data", "execute_result", "update_display_data":
	case truncatedType:
		l.mu.Lock()
		defer l.mu.Unlock()
		if !l.cut {
			l.cut = true
			push(m)
		}
		return
	case "error":
		// Errors pass even past the limit, but one whose traceback is
		// over the frame limit cannot be read: the marker stands for it.
		if !m.Cut {
			push(m)
			return
		}
	default:
		push(m)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		return
	}
	if m.Cut {
		// One message over the frame limit, so over this limit too: only
		// its first bytes were read. A stream's text is kept up to the
		// limit; other output (a display of a huge value, an error) is
		// dropped.
		l.cut = true
		if m.Type() == "stream" {
			if part := streamStart(m, l.max-l.used); part != nil {
				push(part)
			}
		}
		push(&jupyter.Message{Header: jupyter.Header{MsgType: truncatedType}, ParentHeader: m.ParentHeader, Channel: jupyter.IOPub})
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
	return withStream(m, c)
}

type streamContent struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

// withStream returns a whole (uncut) copy of the stream message m holding
// c, or nil when c has no text.
func withStream(m *jupyter.Message, c streamContent) *jupyter.Message {
	if c.Text == "" {
		return nil
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil
	}
	part := *m
	part.Content, part.Cut = b, false
	return &part
}

// streamStart returns the stream message m, whose content the connection
// cut (jupyter.Message.Cut: the start of a JSON object), with the text
// its first bytes hold, at most n bytes of it as the kernel encoded it;
// nil if there is none. Its name is "stdout" unless it came before the
// text, as ipykernel and Deno write it.
func streamStart(m *jupyter.Message, n int64) *jupyter.Message {
	c := streamContent{Name: "stdout"}
	dec := json.NewDecoder(bytes.NewReader(m.Content))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for n > 0 {
		t, err := dec.Token()
		if err != nil {
			return nil
		}
		switch key, _ := t.(string); key {
		case "text":
			rest := bytes.TrimLeft(m.Content[dec.InputOffset():], " \t\r\n")
			if rest = bytes.TrimLeft(bytes.TrimPrefix(rest, []byte(":")), " \t\r\n"); len(rest) == 0 || rest[0] != '"' {
				return nil
			}
			c.Text = jsonStringStart(rest[1:min(int64(len(rest)), n+1)])
			return withStream(m, c)
		case "name":
			if dec.Decode(&c.Name) != nil {
				return nil
			}
		default:
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return nil
			}
		}
	}
	return nil
}

// jsonStringStart decodes b, the start of a JSON string's body (after its
// opening quote), up to its closing quote or the last whole character
// before b ends.
func jsonStringStart(b []byte) string {
	end := len(b)
	for i := 0; i < len(b); i++ {
		if b[i] == '"' {
			end = i
			break
		}
		if b[i] == '\\' {
			w := 2
			if i+1 < len(b) && b[i+1] == 'u' {
				w = 6
			}
			if i+w > len(b) {
				end = i
				break
			}
			i += w - 1
		}
	}
	b = b[:end]
	// A character cut in its middle goes.
	for k := 1; k <= utf8.UTFMax && k <= len(b); k++ {
		if r := b[len(b)-k]; utf8.RuneStart(r) {
			if !utf8.FullRune(b[len(b)-k:]) {
				b = b[:len(b)-k]
			}
			break
		}
	}
	var s string
	if json.Unmarshal(append(append([]byte{'"'}, b...), '"'), &s) != nil {
		return ""
	}
	return s
}
