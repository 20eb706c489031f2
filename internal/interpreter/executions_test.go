package interpreter

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// stream makes a request answered with NDJSON and hands each line to each
// (if not nil) as it arrives; each returning false leaves, closing the
// connection. It returns the lines read, the status, and the body of an
// answer other than 200.
func (s *testServer) stream(ctx context.Context, method, path string, body any, h http.Header, each func(line) bool) (lines, int, string) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := s.do(ctx, method, path, body, h)
	if err != nil {
		return nil, 0, err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return nil, resp.StatusCode, string(msg)
	}
	var out lines
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return out, resp.StatusCode, "bad line: " + sc.Text()
		}
		out = append(out, l)
		if each != nil && !each(l) {
			return out, resp.StatusCode, ""
		}
	}
	if err := sc.Err(); err != nil {
		return out, resp.StatusCode, "read: " + err.Error()
	}
	return out, resp.StatusCode, ""
}

// startExecution posts body to /executions and reads its lines until
// until returns true for one (nil: to the end), then leaves. It returns
// the execution's id and the lines read.
func (s *testServer) startExecution(t *testing.T, body map[string]any, until func(line) bool) (string, lines) {
	t.Helper()
	ls, status, msg := s.stream(context.Background(), "POST", "/executions", body, nil, func(l line) bool {
		return until == nil || !until(l)
	})
	if status != http.StatusOK || msg != "" {
		t.Fatalf("POST /executions %v: %d %s", body, status, msg)
	}
	if len(ls) == 0 || ls[0].typ() != "execution" || ls[0].str("id") == "" || ls[0]["seq"] != 1.0 {
		t.Fatalf("first line %v, want the execution's id with seq 1", ls)
	}
	checkSeqs(t, ls, 0)
	return ls[0].str("id"), ls
}

// events reads GET /executions/{id}/events?after=after to its end.
func (s *testServer) events(t *testing.T, id string, after int) lines {
	t.Helper()
	ls, status, msg := s.stream(context.Background(), "GET", fmt.Sprintf("/executions/%s/events?after=%d", id, after), nil, nil, nil)
	if status != http.StatusOK || msg != "" {
		t.Fatalf("events of %s after %d: %d %s", id, after, status, msg)
	}
	return ls
}

// checkSeqs checks that ls, read after seq after, go up one by one, gap
// lines jumping over what was dropped and keepalives repeating the last.
func checkSeqs(t *testing.T, ls lines, after int) {
	t.Helper()
	last := after
	for i, l := range ls {
		seq, ok := l["seq"].(float64)
		switch {
		case !ok:
			t.Fatalf("line %d without a seq: %v", i, l)
		case l.typ() == "keepalive" && int(seq) != last:
			t.Fatalf("keepalive with seq %v after %d", seq, last)
		case l.typ() == "gap" && (int(seq) != last+int(l["dropped"].(float64)) || i != 0 && after != 0):
			t.Fatalf("gap %v after %d, at %d", l, last, i)
		case l.typ() != "keepalive" && l.typ() != "gap" && int(seq) != last+1:
			t.Fatalf("line %d: seq %v after %d: %v", i, seq, last, l)
		}
		last = int(seq)
	}
}

func (ls lines) noKeepalives() lines {
	var out lines
	for _, l := range ls {
		if l.typ() != "keepalive" {
			out = append(out, l)
		}
	}
	return out
}

func (ls lines) lastSeq() int {
	if len(ls) == 0 {
		return 0
	}
	return int(ls[len(ls)-1]["seq"].(float64))
}

func (s *testServer) listExecutions(t *testing.T) map[string]map[string]any {
	t.Helper()
	var list []map[string]any
	if status, msg := s.call(t, "GET", "/executions", nil, &list); status != http.StatusOK {
		t.Fatalf("list: %d %s", status, msg)
	}
	out := map[string]map[string]any{}
	for _, e := range list {
		out[e["id"].(string)] = e
	}
	return out
}

// A client that leaves does not interrupt the cell: it finishes, and its
// lines wait for the client to come back.
func TestExecutionOutlivesClient(t *testing.T) {
	s := sharedServer(t)
	cid := s.newContext(t, "")
	code := "import time\nprint('started', flush=True)\ntime.sleep(1.5)\nprint('finished')\ndone = True"
	id, ls := s.startExecution(t, map[string]any{"code": code, "context_id": cid}, func(l line) bool {
		return l.typ() == "stdout"
	})
	if got := s.listExecutions(t)[id]; got["state"] != "running" || got["context_id"] != cid || got["ended_at"] != nil {
		t.Errorf("listed while running: %v", got)
	}
	rest := s.events(t, id, ls.lastSeq())
	checkSeqs(t, rest, ls.lastSeq())
	if got := rest.stdout(); got != "finished\n" || rest.last() != "end_of_execution" || len(rest.of("error")) != 0 {
		t.Errorf("after the client left: %v", rest)
	}
	if got := s.execute(t, map[string]any{"code": "done", "context_id": cid}).mainText(); got != "True" {
		t.Errorf("done = %q: the cell did not finish", got)
	}
	got := s.listExecutions(t)[id]
	if got["state"] != "done" || got["started_at"] == nil || got["ended_at"] == nil {
		t.Errorf("listed once done: %v", got)
	}
}

// Every reader, live or late, from any seq, gets the same lines.
func TestExecutionResume(t *testing.T) {
	s := sharedServer(t)
	cid := s.newContext(t, "")
	code := "import sys, time\nprint('a', flush=True)\ntime.sleep(0.8)\nprint('b', file=sys.stderr, flush=True)\ndisplay(1)\n1/0"
	live := make(chan lines, 1)
	id, first := s.startExecution(t, map[string]any{"code": code, "context_id": cid}, func(l line) bool {
		if l.typ() == "execution" {
			go func() {
				ls, _, _ := s.stream(context.Background(), "GET", "/executions/"+l.str("id")+"/events", nil, nil, nil)
				live <- ls
			}()
		}
		return false
	})
	all := first.noKeepalives()
	if len(first.of("keepalive")) == 0 {
		t.Errorf("no keepalive in a quiet 0.8 s (every %v)", keepaliveEvery)
	}
	want := "execution number_of_executions stdout stderr result error end_of_execution"
	var types []string
	for _, l := range all {
		types = append(types, l.typ())
	}
	if got := strings.Join(types, " "); got != want {
		t.Fatalf("lines %s, want %s", got, want)
	}
	same := func(t *testing.T, got, want lines) {
		t.Helper()
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if len(got) != len(want) || len(got) > 0 && string(g) != string(w) {
			t.Errorf("\n got %s\nwant %s", g, w)
		}
	}
	t.Run("live", func(t *testing.T) { same(t, (<-live).noKeepalives(), all) })
	for _, after := range []int{0, 1, 3, len(all) - 1, len(all), len(all) + 10} {
		t.Run(fmt.Sprintf("after %d", after), func(t *testing.T) {
			got := s.events(t, id, after)
			checkSeqs(t, got, after)
			same(t, got, all[min(after, len(all)):])
		})
	}
}

// A flood passes the log's bytes: a late reader gets a gap line, then the
// newest lines; a reader that keeps up gets every line.
func TestExecutionGap(t *testing.T) {
	// Few enough messages that the kernel's iopub queue (libzmq's high
	// water mark, 1000) cannot overflow on a loaded machine.
	const limit, n = 4 << 10, 300
	s := startServer(t, Config{ExecutionLogBytes: limit})
	code := fmt.Sprintf("for i in range(%d):\n    print(f'line {i:04d} ' + 'x' * 90, flush=True)", n)
	id, live := s.startExecution(t, map[string]any{"code": code}, nil)
	// One that keeps up has them all; one slower than the kernel by more
	// than the log's bytes has gaps, which is fine, but not here.
	if got := strings.Count(live.stdout(), "\n"); got != n || len(live.of("gap")) != 0 {
		t.Logf("live reader fell behind: %d lines, gaps %v", got, live.of("gap"))
	}
	for _, after := range []int{0, 1, 2, 5} {
		t.Run(fmt.Sprintf("after %d", after), func(t *testing.T) {
			ls := s.events(t, id, after)
			checkSeqs(t, ls, after)
			gaps := ls.of("gap")
			if len(gaps) != 1 || ls.last() != "end_of_execution" {
				t.Fatalf("want one gap and the end: %d lines, gaps %v, last %q", len(ls), gaps, ls.last())
			}
			if after == 0 && (ls[0].typ() != "execution" || ls[1].typ() != "gap") || after > 0 && ls[0].typ() != "gap" {
				t.Errorf("gap line not where the dropped lines were: %v %v", ls[0], ls[1])
			}
			out := ls.stdout()
			if !strings.HasSuffix(out, fmt.Sprintf("line %04d %s\n", n-1, strings.Repeat("x", 90))) {
				t.Errorf("kept lines do not end with the last one")
			}
			if len(out) > limit && len(ls.of("stdout")) > 1 {
				t.Errorf("kept %d bytes of stdout in %d lines, limit %d", len(out), len(ls.of("stdout")), limit)
			}
			// Dropped and kept lines make up the execution's.
			if got := int(gaps[0]["seq"].(float64)) + len(ls.noKeepalives()) - len(gaps) - 1; after == 0 && got != live.noKeepalives().lastSeq() {
				t.Errorf("gap seq %v + kept %d does not add up to %d", gaps[0]["seq"], len(ls.noKeepalives()), live.noKeepalives().lastSeq())
			}
		})
	}
}

// An interrupt (explicit or the timeout) stops the cell, running or still
// waiting for its context.
func TestExecutionInterrupt(t *testing.T) {
	s := sharedServer(t)
	for _, tc := range []struct {
		name      string
		body      map[string]any
		queued    bool // behind another execution on the context
		interrupt bool
		want      string // the error line's name
	}{
		{"running", map[string]any{"code": "import time\nprint('go', flush=True)\ntime.sleep(30)\ndone = True"}, false, true, "KeyboardInterrupt"},
		{"timeout", map[string]any{"code": "import time\nprint('go', flush=True)\ntime.sleep(30)\ndone = True", "timeout": 1}, false, false, "TimeoutError"},
		{"queued", map[string]any{"code": "done = True"}, true, true, "ExecutionInterrupted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cid := s.newContext(t, "")
			tc.body["context_id"] = cid
			busy := ""
			if tc.queued {
				busy, _ = s.startExecution(t, map[string]any{"code": "import time\ntime.sleep(30)", "context_id": cid}, func(line) bool { return true })
			}
			start := time.Now()
			id, ls := s.startExecution(t, tc.body, func(l line) bool { return l.typ() == "stdout" || tc.queued })
			if tc.interrupt {
				var sum map[string]any
				if status, msg := s.call(t, "POST", "/executions/"+id+"/interrupt", nil, &sum); status != http.StatusOK || sum["id"] != id {
					t.Fatalf("interrupt: %d %s", status, msg)
				}
			}
			rest := s.events(t, id, ls.lastSeq())
			if took := time.Since(start); took > 8*time.Second {
				t.Errorf("interrupted execution took %v", took)
			}
			if rest.errorName() != tc.want || rest.last() != "end_of_execution" {
				t.Errorf("lines %v, want %s", rest, tc.want)
			}
			if busy != "" {
				s.call(t, "POST", "/executions/"+busy+"/interrupt", nil, nil)
			}
			if got := s.execute(t, map[string]any{"code": "'done' in globals()", "context_id": cid}).mainText(); got != "False" {
				t.Errorf("done in globals: %q (the cell went on)", got)
			}
			if got := s.listExecutions(t)[id]["state"]; got != "done" {
				t.Errorf("state %v", got)
			}
		})
	}
}

func TestExecutionRequests(t *testing.T) {
	s := sharedServer(t)
	id, _ := s.startExecution(t, map[string]any{"code": "1"}, nil)
	for _, tc := range []struct {
		method, path string
		body         any
		want         int
	}{
		{"GET", "/executions/nope/events", nil, http.StatusNotFound},
		{"GET", "/executions/nope/events?after=3", nil, http.StatusNotFound},
		{"POST", "/executions/nope/interrupt", nil, http.StatusNotFound},
		{"POST", "/executions", map[string]any{"code": "1", "context_id": "nope"}, http.StatusNotFound},
		{"POST", "/executions", map[string]any{"code": "1", "context_id": "x", "language": "python"}, http.StatusBadRequest},
		{"POST", "/executions", map[string]any{"code": "1", "language": "r"}, http.StatusBadRequest},
		{"GET", "/executions/" + id + "/events?after=-1", nil, http.StatusBadRequest},
		{"GET", "/executions/" + id + "/events?after=x", nil, http.StatusBadRequest},
		{"GET", "/executions/" + id + "/events", nil, http.StatusOK},
		{"POST", "/executions/" + id + "/interrupt", nil, http.StatusOK}, // done: nothing to do
		{"GET", "/executions", nil, http.StatusOK},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			if status, msg := s.call(t, tc.method, tc.path, tc.body, nil); status != tc.want {
				t.Errorf("%d %s, want %d", status, msg, tc.want)
			}
		})
	}
}

// Every /executions route requires the token.
func TestExecutionAuth(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.json")
	if err := os.WriteFile(state, []byte(`{"token":"tok"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, Config{StatePath: state})
	ok := http.Header{"X-Access-Token": {"tok"}}
	ls, status, msg := s.stream(context.Background(), "POST", "/executions", map[string]any{"code": "1"}, ok, nil)
	if status != http.StatusOK || ls.last() != "end_of_execution" {
		t.Fatalf("with the token: %d %s %v", status, msg, ls)
	}
	id := ls[0].str("id")
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/executions", map[string]any{"code": "1"}},
		{"GET", "/executions", nil},
		{"GET", "/executions/" + id + "/events", nil},
		{"POST", "/executions/" + id + "/interrupt", nil},
	} {
		for _, token := range []string{"", "wrong", "tok"} {
			t.Run(fmt.Sprintf("%s %s %q", tc.method, tc.path, token), func(t *testing.T) {
				h := http.Header{}
				if token != "" {
					h.Set("X-Access-Token", token)
				}
				resp, err := s.do(context.Background(), tc.method, tc.path, tc.body, h)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if want := map[bool]int{true: http.StatusOK, false: http.StatusUnauthorized}[token == "tok"]; resp.StatusCode != want {
					t.Errorf("%d, want %d", resp.StatusCode, want)
				}
			})
		}
	}
}

// The oldest finished executions go past KeepExecutions; running ones stay.
func TestExecutionEviction(t *testing.T) {
	s := startServer(t, Config{KeepExecutions: 3})
	cid := s.newContext(t, "")
	long, _ := s.startExecution(t, map[string]any{"code": "import time\ntime.sleep(30)", "context_id": cid}, func(line) bool { return true })
	var quick []string
	for i := range 4 {
		id, ls := s.startExecution(t, map[string]any{"code": fmt.Sprint(i)}, nil)
		if ls.mainText() != fmt.Sprint(i) {
			t.Fatalf("quick %d: %v", i, ls)
		}
		quick = append(quick, id)
	}
	list := s.listExecutions(t)
	for id, want := range map[string]bool{long: true, quick[0]: false, quick[1]: false, quick[2]: true, quick[3]: true} {
		if _, kept := list[id]; kept != want {
			t.Errorf("%s kept %v, want %v (list %v)", id, kept, want, list)
		}
		status := s.statusOf(t, "GET", "/executions/"+id+"/events?after=1000")
		if want && status == http.StatusNotFound || !want && status != http.StatusNotFound {
			t.Errorf("events of %s (kept %v): %d", id, want, status)
		}
	}
	if list[long]["state"] != "running" {
		t.Errorf("long execution %v", list[long])
	}
	s.call(t, "POST", "/executions/"+long+"/interrupt", nil, nil)
	if ls := s.events(t, long, 0); ls.errorName() != "KeyboardInterrupt" {
		t.Errorf("long execution after the interrupt: %v", ls)
	}
}

// statusOf is the status a request gets, without waiting for its body.
func (s *testServer) statusOf(t *testing.T, method, path string) int {
	t.Helper()
	resp, err := s.do(context.Background(), method, path, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
