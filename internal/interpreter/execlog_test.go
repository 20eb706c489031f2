package interpreter

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// replay reads what l holds after seq after, without waiting.
func replay(t *testing.T, l *execLog, after int64) (ls lines, done bool) {
	t.Helper()
	for {
		batch, last, d, _ := l.read(after)
		for _, b := range batch {
			var ln line
			if err := json.Unmarshal(b, &ln); err != nil {
				t.Fatalf("bad line %q: %v", b, err)
			}
			ls = append(ls, ln)
		}
		if last < after {
			t.Fatalf("read went back from %d to %d", after, last)
		}
		after = last
		if d || len(batch) == 0 {
			return ls, d
		}
	}
}

// seqs describes lines as "seq:type" (gap: "seq:gap/dropped").
func seqs(ls lines) string {
	var out []string
	for _, l := range ls {
		s := fmt.Sprintf("%v:%s", l["seq"], l.typ())
		if l.typ() == "gap" {
			s += fmt.Sprintf("/%v", l["dropped"])
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// newTestLog is a log with the execution line, n stdout lines of 100
// bytes each (with their seq) and, if ended, the end line.
func newTestLog(maxBytes int64, n int, ended bool) *execLog {
	l := newExecLog(maxBytes)
	l.write(executionLine{Type: "execution", ID: "x"})
	for i := range n {
		l.write(markerLine{Type: "keepalive"}) // not kept
		l.write(streamLine{Type: "stdout", Text: fmt.Sprintf("%051d", i), Timestamp: "t"})
	}
	if ended {
		l.write(markerLine{Type: "end_of_execution"})
		l.write(streamLine{Type: "stdout", Text: "after the end"}) // not kept
	}
	return l
}

func TestExecLogReplay(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxBytes int64
		n        int
		ended    bool
		after    int64
		want     string
		done     bool
	}{
		{"all", 1 << 20, 3, true, 0, "1:execution 2:stdout 3:stdout 4:stdout 5:end_of_execution", true},
		{"after 2", 1 << 20, 3, true, 2, "3:stdout 4:stdout 5:end_of_execution", true},
		{"after the end", 1 << 20, 3, true, 5, "", true},
		{"past the end", 1 << 20, 3, true, 99, "", true},
		{"running", 1 << 20, 2, false, 1, "2:stdout 3:stdout", false},
		{"running, caught up", 1 << 20, 2, false, 3, "", false},
		{"empty cell", 1 << 20, 0, true, 0, "1:execution 2:end_of_execution", true},
		// 100-byte lines, 250 bytes kept: the last two stay.
		{"gap from 0", 250, 6, true, 0, "1:execution 5:gap/4 6:stdout 7:stdout 8:end_of_execution", true},
		{"gap from 1", 250, 6, true, 1, "5:gap/4 6:stdout 7:stdout 8:end_of_execution", true},
		{"gap from inside", 250, 6, true, 3, "5:gap/2 6:stdout 7:stdout 8:end_of_execution", true},
		{"no gap past it", 250, 6, true, 5, "6:stdout 7:stdout 8:end_of_execution", true},
		{"gap running", 250, 6, false, 1, "5:gap/4 6:stdout 7:stdout", false},
		// A line over the limit alone is kept while it is the newest.
		{"one line over", 50, 3, true, 1, "3:gap/2 4:stdout 5:end_of_execution", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newTestLog(tc.maxBytes, tc.n, tc.ended)
			ls, done := replay(t, l, tc.after)
			if got := seqs(ls); got != tc.want || done != tc.done {
				t.Errorf("after %d:\n got %s (done %v)\nwant %s (done %v)", tc.after, got, done, tc.want, tc.done)
			}
			if l.midBytes > max(tc.maxBytes, 110) { // a line is about 100 bytes
				t.Errorf("kept %d bytes between, limit %d", l.midBytes, tc.maxBytes)
			}
		})
	}
}

// A flood is replayed in batches, and the log's memory stays bounded
// however many lines pass through it.
func TestExecLogFlood(t *testing.T) {
	const n = 20000
	l := newTestLog(64<<10, n, true)
	if got := l.size(); got > 64<<10+200 {
		t.Errorf("log holds %d bytes", got)
	}
	if cap(l.mid) > 2*(64<<10/100)+200 {
		t.Errorf("kept slice grew to %d", cap(l.mid))
	}
	ls, done := replay(t, l, 0)
	if !done || ls[0].typ() != "execution" || ls[1].typ() != "gap" || ls.last() != "end_of_execution" {
		t.Fatalf("replay %s...", seqs(ls[:3]))
	}
	dropped := int(ls[1]["dropped"].(float64))
	if kept := len(ls.of("stdout")); kept+dropped != n {
		t.Errorf("kept %d + dropped %d != %d", kept, dropped, n)
	}
	for i := 2; i < len(ls); i++ {
		if ls[i]["seq"].(float64) != ls[i-1]["seq"].(float64)+1 {
			t.Fatalf("seq %v after %v", ls[i]["seq"], ls[i-1]["seq"])
		}
	}
	if got := ls.of("stdout")[len(ls.of("stdout"))-1].str("text"); got != fmt.Sprintf("%051d", n-1) {
		t.Errorf("last kept line %q", got)
	}
}

// A reader waiting for more is woken by the next line.
func TestExecLogWake(t *testing.T) {
	l := newTestLog(1<<20, 1, false)
	_, last, done, wake := l.read(0)
	if done || wake == nil || last != 2 {
		t.Fatalf("last %d done %v wake %v", last, done, wake)
	}
	l.write(streamLine{Type: "stdout", Text: "more"})
	select {
	case <-wake:
	case <-time.After(time.Second):
		t.Fatal("not woken")
	}
	l.write(markerLine{Type: "unexpected_end_of_execution"})
	if ls, done := replay(t, l, last); seqs(ls) != "3:stdout 4:unexpected_end_of_execution" || !done {
		t.Errorf("%s %v", seqs(ls), done)
	}
}

func TestExecTableEvict(t *testing.T) {
	rec := func(id string, lines int, ended bool) *execRecord {
		return &execRecord{id: id, log: newTestLog(1<<20, lines, ended), interrupt: func() {}}
	}
	for _, tc := range []struct {
		name      string
		keep      int
		keepBytes int64
		recs      []*execRecord
		want      string
	}{
		{"under", 3, 1 << 20, []*execRecord{rec("a", 1, true), rec("b", 1, true)}, "a b"},
		{"oldest finished go", 2, 1 << 20, []*execRecord{rec("a", 1, true), rec("b", 1, true), rec("c", 1, true)}, "b c"},
		{"running stay", 3, 1 << 20, []*execRecord{rec("a", 1, false), rec("b", 1, true), rec("c", 1, false), rec("d", 1, true)}, "a c d"},
		{"only running", 1, 1 << 20, []*execRecord{rec("a", 1, false), rec("b", 1, true), rec("c", 1, false), rec("d", 1, true)}, "a c"},
		{"all running", 1, 1 << 20, []*execRecord{rec("a", 1, false), rec("b", 1, false)}, "a b"},
		// About 1.1 KB each: 2.5 KB keeps two.
		{"bytes", 64, 2500, []*execRecord{rec("a", 10, true), rec("b", 10, true), rec("c", 10, true)}, "b c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := newExecTable(tc.keep, tc.keepBytes)
			for _, e := range tc.recs {
				tab.add(e)
			}
			var ids []string
			for _, sum := range tab.list() {
				ids = append(ids, sum.ID)
				if (sum.State == "done") != (sum.EndedAt != nil) {
					t.Errorf("%+v", sum)
				}
			}
			if got := strings.Join(ids, " "); got != tc.want {
				t.Errorf("kept %q, want %q", got, tc.want)
			}
			for _, e := range tc.recs {
				if (tab.get(e.id) != nil) != strings.Contains(tc.want, e.id) {
					t.Errorf("get(%s) disagrees with the list", e.id)
				}
			}
		})
	}
}
