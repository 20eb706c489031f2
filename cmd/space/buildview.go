package main

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/spacesandbox/space/client"
)

// A build's progress as `space template build` shows it. On a terminal
// the view redraws a live region in place: the step running (step n of
// m, cached or running, its elapsed time) and the last lines of its
// output, under the steps already done, each left as one line. Elsewhere
// it prints the log's lines as they come.

// buildView shows a build's log.
type buildView interface {
	// entry shows a log line.
	entry(e *client.LogEntry)
	// tick redraws what changes with time.
	tick()
	// note prints a line of the CLI's own (a prompt's answer, a cancel).
	note(format string, args ...any)
	// clear takes the live region away (before a prompt).
	clear()
	// end leaves the build's steps on the screen as they ended.
	end(b *client.Build)
}

// plainView prints each line as it comes, with the elapsed time and its
// step: a log a file or a pipe can keep.
type plainView struct {
	out, errOut io.Writer
	start       time.Time
}

func (v *plainView) entry(e *client.LogEntry) {
	if e.Level == "debug" {
		return
	}
	elapsed := time.Since(v.start).Seconds()
	if isStepLine(e) {
		fmt.Fprintf(v.out, "%6.1fs #%d %s\n", elapsed, e.Step, e.Message)
		return
	}
	fmt.Fprintf(v.out, "%6.1fs #%d   %s\n", elapsed, e.Step, e.Message)
}

func (v *plainView) tick()                           {}
func (v *plainView) clear()                          {}
func (v *plainView) end(*client.Build)               {}
func (v *plainView) note(format string, args ...any) { fmt.Fprintf(v.errOut, format+"\n", args...) }

// isStepLine reports whether e names a step (as opposed to its output).
func isStepLine(e *client.LogEntry) bool {
	return strings.HasPrefix(e.Message, "[") || e.Step == 0 && strings.HasPrefix(e.Message, "FROM ") || strings.HasPrefix(e.Message, "start command")
}

// tailLines is how many of the running step's last lines the live region
// shows.
const tailLines = 5

// stepState is one step as the terminal view knows it.
type stepState struct {
	num          int
	label        string
	cached       bool
	began, ended time.Time
	lines        []string // the last tailLines lines of its output
}

// ttyView draws on a terminal.
type ttyView struct {
	out   io.Writer
	build *client.Build
	now   func() time.Time
	width func() int
	start time.Time

	steps   []*stepState // in the order they began
	printed int          // steps already left on the screen
	live    int          // lines of the live region drawn last
}

func newTTYView(out io.Writer, fd int, b *client.Build) *ttyView {
	return &ttyView{out: out, build: b, now: time.Now, start: time.Now(), width: func() int {
		if w, _, err := term.GetSize(fd); err == nil && w > 10 {
			return w
		}
		return 80
	}}
}

func (v *ttyView) current() *stepState {
	if len(v.steps) == 0 {
		return nil
	}
	return v.steps[len(v.steps)-1]
}

func (v *ttyView) entry(e *client.LogEntry) {
	if e.Level == "debug" {
		return
	}
	cur := v.current()
	if cur == nil || e.Step != cur.num {
		if cur != nil && cur.ended.IsZero() {
			cur.ended = v.now()
		}
		cur = &stepState{num: e.Step, label: strings.TrimSuffix(e.Message, " (cached)"), cached: e.Cached, began: v.now()}
		v.steps = append(v.steps, cur)
	} else {
		cur.lines = append(cur.lines, e.Message)
		if len(cur.lines) > tailLines {
			cur.lines = cur.lines[len(cur.lines)-tailLines:]
		}
	}
	v.draw()
}

func (v *ttyView) tick() { v.draw() }

func (v *ttyView) note(format string, args ...any) {
	v.clear()
	fmt.Fprintf(v.out, format+"\n", args...)
	v.draw()
}

// clear erases the live region (the cursor is at its start after).
func (v *ttyView) clear() {
	if v.live > 0 {
		fmt.Fprintf(v.out, "\x1b[%dF\x1b[J", v.live)
		v.live = 0
	}
}

// draw leaves the steps that ended above and redraws the live region.
func (v *ttyView) draw() {
	v.clear()
	var buf strings.Builder
	w := v.width()
	for ; v.printed < len(v.steps)-1; v.printed++ {
		buf.WriteString(fit(v.doneLine(v.steps[v.printed]), w) + "\n")
	}
	live := v.liveLines()
	for _, l := range live {
		buf.WriteString(fit(l, w) + "\n")
	}
	io.WriteString(v.out, buf.String())
	v.live = len(live)
}

func (v *ttyView) doneLine(s *stepState) string {
	status := "cached"
	if !s.cached {
		status = fmt.Sprintf("%.1fs", s.ended.Sub(s.began).Seconds())
	}
	return fmt.Sprintf("%8s  %s", status, s.label)
}

func (v *ttyView) liveLines() []string {
	var out []string
	cur := v.current()
	if cur != nil {
		status := "cached"
		if !cur.cached {
			status = fmt.Sprintf("%.1fs", v.now().Sub(cur.began).Seconds())
		}
		out = append(out, fmt.Sprintf("%8s  %s", status, cur.label))
		for _, l := range cur.lines {
			out = append(out, "          │ "+l)
		}
	}
	return append(out, v.statusLine(cur))
}

// statusLine: "building app:v1 · step 3 of 5, running · 2 cached · 12.3s".
func (v *ttyView) statusLine(cur *stepState) string {
	b := v.build
	where := "queued"
	if cur != nil {
		state := "running"
		if cur.cached {
			state = "cached"
		}
		switch {
		case cur.num == 0:
			where = "the source (FROM)"
		case cur.num > b.Steps:
			where = "the start command and the end"
		default:
			where = fmt.Sprintf("step %d of %d", cur.num, b.Steps)
		}
		where += ", " + state
	}
	cached := 0
	for _, s := range v.steps {
		if s.cached && s.num >= 1 && s.num <= b.Steps {
			cached++
		}
	}
	return fmt.Sprintf("building %s:%s · %s · %d cached · %.1fs", b.Template, strings.Join(b.Tags, ","), where, cached, v.now().Sub(v.start).Seconds())
}

// end leaves every step on the screen; a failed build's last step keeps
// the end of its output.
func (v *ttyView) end(b *client.Build) {
	v.clear()
	if cur := v.current(); cur != nil && cur.ended.IsZero() {
		cur.ended = v.now()
	}
	w := v.width()
	for ; v.printed < len(v.steps); v.printed++ {
		s := v.steps[v.printed]
		fmt.Fprintln(v.out, fit(v.doneLine(s), w))
		if b.State != client.BuildStateReady && v.printed == len(v.steps)-1 {
			for _, l := range s.lines {
				fmt.Fprintln(v.out, fit("          │ "+l, w))
			}
		}
	}
}

// fit cuts s to the terminal's width (a wrapped line would throw the
// redraw's line count off) and blanks control characters: a build's
// output is the build's, and an escape sequence in it must not move the
// cursor or reach the terminal.
func fit(s string, width int) string {
	s = strings.ReplaceAll(s, "\t", "    ")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 {
			return ' '
		}
		return r
	}, s)
	if utf8.RuneCountInString(s) < width {
		return s
	}
	r := []rune(s)
	return string(r[:width-2]) + "…"
}
