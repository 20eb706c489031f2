package client

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Command event types.
const (
	EventStart  = "start"
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventEnd    = "end"
	// EventPTY carries terminal output of a command started with a PTY.
	EventPTY = "pty"
	// EventGap says older output was dropped from the agent's buffer before a
	// resumed stream could replay it.
	EventGap = "gap"
)

// Event is one event of a command's stream.
type Event struct {
	ID   uint64 // only goes up; 0 for events without an id of their own (gap)
	Type string // EventStart, EventStdout, EventStderr, EventEnd, EventGap
	PID  int    // the command's pid, known from the start event on
	// Data is the output of stdout/stderr events, decoded from "text" or
	// "base64". For other types it is the event's raw JSON.
	Data []byte
	Exit *ExitInfo // set on end events
}

// ExitInfo is how a command ended.
type ExitInfo struct {
	ExitCode int    `json:"exit_code"`
	Exited   bool   `json:"exited"` // false when a signal ended it
	Status   string `json:"status"` // e.g. "exit status 1", "signal: killed"
	Error    string `json:"error,omitempty"`
}

// Code maps the end to a shell-style exit code: the exit code when the command
// exited, 128+N when signal N ended it, else 1 (with 0 turned into 1).
func (x *ExitInfo) Code() int {
	if x.Exited {
		return x.ExitCode
	}
	if n := x.Signal(); n > 0 {
		return 128 + n
	}
	if x.ExitCode > 0 {
		return x.ExitCode
	}
	return 1
}

// Signal returns the number of the signal that ended the command, parsed from
// Status ("signal: killed", "signal 9", "SIGKILL"), or 0 if none is known.
func (x *ExitInfo) Signal() int {
	s := strings.TrimSpace(strings.ToLower(x.Status))
	s, ok := strings.CutPrefix(s, "signal")
	if !ok {
		if n, ok := signalNumbers[strings.TrimPrefix(s, "sig")]; ok && strings.HasPrefix(s, "sig") {
			return n
		}
		return 0
	}
	s = strings.TrimSpace(strings.TrimPrefix(s, ":"))
	s = strings.TrimSuffix(s, " (core dumped)")
	if n, err := strconv.Atoi(s); err == nil {
		return n
	}
	return signalNumbers[strings.TrimPrefix(s, "sig")]
}

// signalNumbers maps Linux signal names, as Go's os.ProcessState prints them
// and as SIGxxx abbreviations, to their numbers.
var signalNumbers = map[string]int{
	"hangup": 1, "hup": 1, "interrupt": 2, "int": 2, "quit": 3, "ill": 4, "illegal instruction": 4,
	"trace/breakpoint trap": 5, "trap": 5, "aborted": 6, "abrt": 6, "bus error": 7, "bus": 7,
	"floating point exception": 8, "fpe": 8, "killed": 9, "kill": 9, "user defined signal 1": 10,
	"usr1": 10, "segmentation fault": 11, "segv": 11, "user defined signal 2": 12, "usr2": 12,
	"broken pipe": 13, "pipe": 13, "alarm clock": 14, "alrm": 14, "terminated": 15, "term": 15,
	"cpu time limit exceeded": 24, "xcpu": 24, "file size limit exceeded": 25, "xfsz": 25,
}

// decodeEvent turns an SSE event of a command stream into an Event.
func decodeEvent(ev sseEvent) (Event, error) {
	out := Event{Type: ev.Event}
	if ev.HasID && ev.ID != "" {
		id, err := strconv.ParseUint(ev.ID, 10, 64)
		if err != nil {
			return Event{}, fmt.Errorf("event id %q: %w", ev.ID, err)
		}
		out.ID = id
	}
	switch ev.Event {
	case EventStdout, EventStderr, EventPTY:
		var d struct {
			Text   *string `json:"text"`
			Base64 *string `json:"base64"`
		}
		if err := json.Unmarshal([]byte(ev.Data), &d); err != nil {
			return Event{}, fmt.Errorf("%s event %s: %w", ev.Event, ev.ID, err)
		}
		switch {
		case d.Text != nil:
			out.Data = []byte(*d.Text)
		case d.Base64 != nil:
			b, err := base64.StdEncoding.DecodeString(*d.Base64)
			if err != nil {
				return Event{}, fmt.Errorf("%s event %s: %w", ev.Event, ev.ID, err)
			}
			out.Data = b
		}
	case EventStart:
		var d struct {
			PID int `json:"pid"`
		}
		if err := json.Unmarshal([]byte(ev.Data), &d); err != nil {
			return Event{}, fmt.Errorf("start event: %w", err)
		}
		out.PID, out.Data = d.PID, []byte(ev.Data)
	case EventEnd:
		var x ExitInfo
		if err := json.Unmarshal([]byte(ev.Data), &x); err != nil {
			return Event{}, fmt.Errorf("end event: %w", err)
		}
		out.Exit, out.Data = &x, []byte(ev.Data)
	default:
		out.Data = []byte(ev.Data)
	}
	return out, nil
}
