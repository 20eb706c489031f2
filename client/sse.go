package client

import (
	"bufio"
	"bytes"
	"io"
	"strings"
)

// sseEvent is one dispatched server-sent event.
type sseEvent struct {
	ID    string // the last event id in force when the event was dispatched
	HasID bool   // the event carried an id line of its own
	Event string // "message" when the server sent no event field
	Data  string // data lines joined by "\n"
}

// sseReader parses a text/event-stream as the WHATWG spec says: fields end at a
// blank line, ":" lines are comments (heartbeats), "data" lines accumulate, and
// the last "id" persists across events so a client can resume from it.
type sseReader struct {
	r      *bufio.Reader
	lastID string
}

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// next returns the next event. At the end of the stream it returns io.EOF; an
// event cut off before its blank line is dropped, as the spec says.
func (s *sseReader) next() (sseEvent, error) {
	var (
		data    bytes.Buffer
		hasData bool
		event   string
		hasID   bool
	)
	for {
		line, err := s.readLine()
		if err != nil {
			return sseEvent{}, err
		}
		if line == "" {
			if !hasData {
				event, hasID = "", false // nothing to dispatch; an id already took effect
				continue
			}
			if event == "" {
				event = "message"
			}
			return sseEvent{ID: s.lastID, HasID: hasID, Event: event, Data: data.String()}, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			event = value
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			hasData = true
		case "id":
			if !strings.ContainsRune(value, 0) {
				s.lastID, hasID = value, true
			}
		}
		// "retry" and unknown fields are ignored: reconnecting is the caller's call.
	}
}

// readLine returns one line without its terminator (LF or CRLF; the daemon
// never ends lines with a lone CR). A stream cut mid-line is io.ErrUnexpectedEOF.
func (s *sseReader) readLine() (string, error) {
	line, err := s.r.ReadString('\n')
	if err != nil {
		if err == io.EOF && line != "" {
			// The stream ended mid-line: the event it belonged to is incomplete.
			return "", io.ErrUnexpectedEOF
		}
		return "", err
	}
	line = strings.TrimSuffix(line, "\n")
	line = strings.TrimSuffix(line, "\r")
	return line, nil
}
