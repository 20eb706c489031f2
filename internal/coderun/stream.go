package coderun

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Line types of an execution's stream (docs/code-interpreter.md).
const (
	TypeExecution          = "execution"
	TypeNumberOfExecutions = "number_of_executions"
	TypeStdout             = "stdout"
	TypeStderr             = "stderr"
	TypeResult             = "result"
	TypeError              = "error"
	TypeGap                = "gap"
	TypeEnd                = "end_of_execution"
	TypeUnexpectedEnd      = "unexpected_end_of_execution"
	typeKeepalive          = "keepalive"
)

// Line is one line of an execution's stream.
type Line struct {
	// Seq goes up by one per line within an execution. A gap's Seq is the
	// last dropped line's, so resuming after any line's Seq is right.
	Seq  uint64
	Type string
	// ExecutionID is set on the execution line.
	ExecutionID string
	// Raw is the line's JSON as the interpreter sent it, without the
	// newline.
	Raw []byte
}

// IsEnd reports whether l is the last line of its execution.
func (l Line) IsEnd() bool { return l.Type == TypeEnd || l.Type == TypeUnexpectedEnd }

// Stream is the lines of one execution. Call Next until it returns io.EOF
// (after the end line) or another error; Close it in any case. Closing it
// early leaves the cell running.
type Stream struct {
	sandboxID string
	id        string
	body      io.ReadCloser
	r         *bufio.Reader
	max       int
	pending   *Line // the execution line Execute read
	resumed   bool  // from Events: a stream without lines is a finished one
	seen      bool
	ended     atomic.Bool // read by Close from any goroutine
	closeOnce sync.Once
}

func newStream(sandboxID string, body io.ReadCloser, max int) *Stream {
	return &Stream{sandboxID: sandboxID, body: body, r: bufio.NewReaderSize(body, 64<<10), max: max}
}

// ExecutionID is the execution's id.
func (s *Stream) ExecutionID() string { return s.id }

// Next returns the next line; io.EOF after the end line. The
// interpreter's keepalives are skipped: they carry nothing but the seq
// already reached.
func (s *Stream) Next() (Line, error) {
	if p := s.pending; p != nil {
		s.pending = nil
		return *p, nil
	}
	for {
		if s.ended.Load() {
			return Line{}, io.EOF
		}
		raw, err := s.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) && s.resumed && !s.seen {
				// The client already had the end line.
				s.ended.Store(true)
				return Line{}, io.EOF
			}
			return Line{}, s.broken(err)
		}
		var head struct {
			Seq  uint64 `json:"seq"`
			Type string `json:"type"`
			ID   string `json:"id"`
		}
		if err := json.Unmarshal(raw, &head); err != nil || head.Type == "" {
			return Line{}, errdefs.Wrap(errdefs.ErrUnavailable, fmt.Errorf("line %.80q: %v", raw, err),
				"the code interpreter of sandbox %s sent a line that is not its JSON", s.sandboxID)
		}
		if head.Type == typeKeepalive {
			continue
		}
		if head.Seq == 0 {
			return Line{}, errdefs.New(errdefs.ErrUnavailable,
				"the code interpreter of sandbox %s sent a %s line without a seq: it does not know resumable executions", s.sandboxID, head.Type)
		}
		s.seen = true
		l := Line{Seq: head.Seq, Type: head.Type, Raw: raw}
		if head.Type == TypeExecution {
			l.ExecutionID = head.ID
		}
		if l.IsEnd() {
			s.ended.Store(true)
		}
		return l, nil
	}
}

func (s *Stream) broken(err error) error {
	if errors.Is(err, io.EOF) {
		return errdefs.New(errdefs.ErrUnavailable, "the code interpreter of sandbox %s ended execution %s's stream before its end", s.sandboxID, s.id)
	}
	if errdefs.Class(err) != nil {
		return err
	}
	return errdefs.Wrap(errdefs.ErrUnavailable, err, "the stream of execution %s from sandbox %s broke off", s.id, s.sandboxID)
}

// readLine reads one line, at most s.max bytes, without its newline. A
// stream cut mid-line is io.ErrUnexpectedEOF.
func (s *Stream) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := s.r.ReadSlice('\n')
		if len(line)+len(chunk) > s.max+1 {
			return nil, errdefs.New(errdefs.ErrUnavailable,
				"the code interpreter of sandbox %s sent a line longer than %d bytes in execution %s", s.sandboxID, s.max, s.id)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			line = bytes.TrimSuffix(line[:len(line)-1], []byte("\r"))
			if len(bytes.TrimSpace(line)) == 0 {
				line = line[:0]
				continue
			}
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// Close ends the stream (not the cell). It may be called from another
// goroutine to end a blocked Next.
func (s *Stream) Close() error {
	var err error
	s.closeOnce.Do(func() {
		if s.ended.Load() {
			// The interpreter ends the response right after the end line:
			// read to that end, so the connection goes back to the pool
			// instead of a new one through the sandbox's netstack per cell.
			// Bounded, in case it does not.
			stop := time.AfterFunc(time.Second, func() { s.body.Close() })
			_, _ = io.CopyN(io.Discard, s.r, 4<<10)
			stop.Stop()
		}
		err = s.body.Close()
	})
	return err
}
