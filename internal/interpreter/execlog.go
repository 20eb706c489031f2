package interpreter

import (
	"strconv"
	"sync"
	"time"
)

// execLog is the lines of one resumable execution (/executions), each
// numbered with its seq (1, 2, 3...), kept for the clients that follow it
// now or come back later. It is the execution's lineSink, and never
// reports its client gone: the cell runs on without one.
//
// Its memory is bounded. The first line (the execution's id) and the end
// line are always kept; the lines between them are kept up to maxBytes,
// the oldest dropped first and counted, so that a reader who comes back
// for them learns how many it missed (a gap line). The newest line is
// kept whatever its size (one line is at most the execution's output
// limit), so a reader that keeps up never misses one.
type execLog struct {
	maxBytes int64

	mu       sync.Mutex
	first    []byte   // seq 1
	mid      [][]byte // mid[start:] are the kept lines between, seqs dropped+2...
	start    int
	midBytes int64
	dropped  int64  // lines dropped: seqs 2 to dropped+1
	end      []byte // the end line, seq next-1 once set
	endedAt  time.Time
	next     int64         // the next line's seq
	wake     chan struct{} // closed at the next line; nil when no reader waits
}

func newExecLog(maxBytes int64) *execLog { return &execLog{maxBytes: maxBytes, next: 1} }

// Lines of /executions only (see doc.go): the first, the gap a reader
// sees where lines were dropped, and a reader's keepalive.
type (
	executionLine struct {
		Type string `json:"type"` // execution
		ID   string `json:"id"`
	}
	gapLine struct {
		Seq     int64  `json:"seq"`
		Type    string `json:"type"` // gap
		Dropped int64  `json:"dropped"`
	}
	keepaliveLine struct {
		Seq  int64  `json:"seq"`
		Type string `json:"type"` // keepalive
	}
)

// write adds v as the next line. Keepalives are not kept: each reader
// sends its own while the execution is quiet.
func (l *execLog) write(v any) {
	m, isMarker := v.(markerLine)
	if isMarker && m.Type == "keepalive" {
		return
	}
	end := isMarker && (m.Type == "end_of_execution" || m.Type == "unexpected_end_of_execution")
	l.add(mustEncodeLine(v), end)
}

func (l *execLog) gone() bool { return false }

func (l *execLog) add(b []byte, end bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.end != nil {
		return // nothing follows the end line
	}
	seq := l.next
	l.next++
	b = withSeq(b, seq)
	switch {
	case seq == 1:
		l.first = b
	case end:
		l.end, l.endedAt = b, time.Now()
	default:
		l.mid = append(l.mid, b)
		l.midBytes += int64(len(b))
		for l.midBytes > l.maxBytes && len(l.mid)-l.start > 1 {
			l.midBytes -= int64(len(l.mid[l.start]))
			l.mid[l.start] = nil
			l.start++
			l.dropped++
		}
		if l.start > 64 && l.start > len(l.mid)/2 {
			l.mid = append([][]byte(nil), l.mid[l.start:]...)
			l.start = 0
		}
	}
	if l.wake != nil {
		close(l.wake)
		l.wake = nil
	}
}

// withSeq puts "seq":seq first in b, a line encodeLine made (an object
// with at least a type), without decoding and encoding it again: a line
// may be a whole image.
func withSeq(b []byte, seq int64) []byte {
	out := make([]byte, 0, len(b)+24)
	out = append(out, `{"seq":`...)
	out = strconv.AppendInt(out, seq, 10)
	out = append(out, ',')
	return append(out, b[1:]...)
}

// readBatch bounds the bytes one read returns (beyond its first line), so
// a reader holds little of a log that it replays.
const readBatch = 256 << 10

// read returns the kept lines with seq > after that are there now, a gap
// line first where lines were dropped, at most about readBatch bytes of
// them; last, the seq they reach (after, if none); done, whether the end
// line is among them or was already had; and, when not done, a channel
// closed when the next line comes.
func (l *execLog) read(after int64) (lines [][]byte, last int64, done bool, wake <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := max(after, 0) + 1 // the seq wanted
	if next == 1 && l.first != nil {
		lines = append(lines, l.first)
		next = 2
	}
	if next >= 2 && next <= l.dropped+1 {
		lines = append(lines, mustEncodeLine(gapLine{Seq: l.dropped + 1, Type: "gap", Dropped: l.dropped + 2 - next}))
		next = l.dropped + 2
	}
	size := 0
	kept := l.mid[l.start:]
	for i := next - (l.dropped + 2); i >= 0 && i < int64(len(kept)); i++ {
		if size > 0 && size+len(kept[i]) > readBatch {
			return lines, next - 1, false, nil // more at once: no need to wait
		}
		lines = append(lines, kept[i])
		size += len(kept[i])
		next++
	}
	if l.end != nil {
		if endSeq := l.next - 1; next <= endSeq {
			lines = append(lines, l.end)
			next = endSeq + 1
		}
		return lines, max(after, next-1), true, nil
	}
	if l.wake == nil {
		l.wake = make(chan struct{})
	}
	return lines, max(after, next-1), false, l.wake
}

// ended reports whether the end line is in, and when it came.
func (l *execLog) ended() (bool, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.end != nil, l.endedAt
}

// size is the bytes of lines kept.
func (l *execLog) size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(len(l.first)+len(l.end)) + l.midBytes
}
