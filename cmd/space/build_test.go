package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/client/apitypes"
)

// screen plays what a view wrote on a terminal that knows the two
// sequences it uses (cursor to the start of the nth line up, erase to the
// end of the screen) and answers the lines left on it.
func screen(t *testing.T, out string) []string {
	t.Helper()
	lines := []string{""}
	row := 0
	esc := regexp.MustCompile(`^\x1b\[(\d*)([A-Za-z])`)
	for len(out) > 0 {
		if m := esc.FindStringSubmatch(out); m != nil {
			n, _ := strconv.Atoi(m[1])
			switch m[2] {
			case "F":
				row -= n
				if row < 0 {
					t.Fatalf("cursor moved above the screen")
				}
			case "J":
				lines = append(lines[:row], "")
			default:
				t.Fatalf("unexpected escape %q", m[0])
			}
			out = out[len(m[0]):]
			continue
		}
		if strings.HasPrefix(out, "\x1b") {
			t.Fatalf("a raw escape reached the terminal: %q", out[:min(len(out), 12)])
		}
		c := out[:1]
		out = out[1:]
		if c == "\n" {
			row++
			if row == len(lines) {
				lines = append(lines, "")
			}
			continue
		}
		lines[row] += c
	}
	return lines[:row]
}

// TestTTYView: steps that ended stay as one line each (cached or their
// time); the running one is redrawn in place with its last lines and a
// status line (step n of m, cached count, elapsed); the end leaves every
// step, and a failed build's last step its output.
func TestTTYView(t *testing.T) {
	var out strings.Builder
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := &client.Build{Build: apitypes.Build{ID: "b1", Template: "app", Tags: []string{"v1"}, Steps: 3}}
	v := &ttyView{out: &out, build: b, now: func() time.Time { return clock }, start: clock, width: func() int { return 70 }}
	step := func(n int, msg string, cached bool) {
		v.entry(&client.LogEntry{Step: n, Message: msg, Cached: cached, Level: "info"})
	}
	step(0, "FROM base", false)
	clock = clock.Add(500 * time.Millisecond)
	step(1, "[1/3] RUN apt-get install -y curl (cached)", true)
	step(2, "[2/3] RUN make", false)
	for i := 1; i <= 7; i++ {
		clock = clock.Add(time.Second)
		step(2, fmt.Sprintf("make line %d", i), false)
	}
	step(2, "evil \x1b[2J\x1b[H escape", false)
	v.entry(&client.LogEntry{Step: 2, Message: "hidden", Level: "debug"})
	clock = clock.Add(300 * time.Millisecond)
	v.tick()

	got := screen(t, out.String())
	want := []string{
		"    0.5s  FROM base",
		"  cached  [1/3] RUN apt-get install -y curl",
		"    7.3s  [2/3] RUN make",
		"          │ make line 4",
		"          │ make line 5",
		"          │ make line 6",
		"          │ make line 7",
		"          │ evil  [2J [H escape",
		"building app:v1 · step 2 of 3, running · 1 cached · 7.8s",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("screen:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// A long line is cut to the width, not wrapped.
	step(2, strings.Repeat("x", 200), false)
	for _, l := range screen(t, out.String()) {
		if len([]rune(l)) >= 70 {
			t.Errorf("a line of %d runes on a 70-column terminal", len([]rune(l)))
		}
	}

	b.State = client.BuildStateFailed
	clock = clock.Add(time.Second)
	v.end(b)
	got = screen(t, out.String())
	if n := len(got); n != 8 || got[2] != "    8.3s  [2/3] RUN make" || !strings.HasPrefix(got[n-1], "          │ xxx") || strings.Contains(strings.Join(got, "\n"), "building app") {
		t.Errorf("after a failed end:\n%s", strings.Join(got, "\n"))
	}
}

// buildDaemon serves one build's log: the lines given, then, once the
// build is canceled, its end.
type buildDaemon struct {
	srv      *httptest.Server
	mu       sync.Mutex
	canceled bool
	cancel   chan struct{}
	state    string // what GET and cancel answer
}

func newBuildDaemon(t *testing.T, lines ...string) *buildDaemon {
	d := &buildDaemon{cancel: make(chan struct{}), state: client.BuildStateBuilding}
	mux := http.NewServeMux()
	build := func(state string) string {
		return fmt.Sprintf(`{"id":"b1","template":"app","tags":["v1"],"state":%q,"steps":2}`, state)
	}
	mux.HandleFunc("GET /v1/builds/b1/logs", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i, l := range lines {
			data, _ := json.Marshal(client.LogEntry{Seq: i, Step: 1, Level: "info", Message: l})
			fmt.Fprintf(w, "id: %d\nevent: log\ndata: %s\n\n", i+1, data)
		}
		w.(http.Flusher).Flush()
		select {
		case <-d.cancel:
			fmt.Fprintf(w, "event: end\ndata: %s\n\n", build(client.BuildStateCanceled))
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("POST /v1/builds/b1/cancel", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		if !d.canceled && d.state == client.BuildStateBuilding {
			d.canceled = true
			close(d.cancel)
		}
		fmt.Fprint(w, build(d.state))
		if d.canceled {
			d.state = client.BuildStateCanceled
		}
	})
	mux.HandleFunc("GET /v1/builds/b1", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		fmt.Fprint(w, build(d.state))
	})
	d.srv = httptest.NewServer(mux)
	t.Cleanup(d.srv.Close)
	return d
}

func (d *buildDaemon) wasCanceled() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.canceled
}

// syncBuilder is a strings.Builder safe for a test to read while the
// follow writes.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestFollowBuildInterrupt: Ctrl-C while `template build` follows a build
// (not on a terminal: no question) cancels it on the server and says so,
// then follows it to its end; while `template logs` follows one, it only
// stops following.
func TestFollowBuildInterrupt(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cancelable bool
	}{{"build", true}, {"logs", false}} {
		t.Run(tc.name, func(t *testing.T) {
			d := newBuildDaemon(t, "[1/2] RUN sleep 100", "sleeping")
			var out, errOut syncBuilder
			a := &app{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, getenv: func(string) string { return "" },
				signals: make(chan os.Signal, 1), addr: d.srv.URL}
			done := make(chan error, 1)
			go func() {
				done <- a.followBuild(context.Background(), a.client(), &client.Build{Build: apitypes.Build{ID: "b1", Template: "app", Steps: 2}}, tc.cancelable)
			}()
			deadline := time.Now().Add(10 * time.Second)
			for !strings.Contains(out.String(), "sleeping") {
				if time.Now().After(deadline) {
					t.Fatalf("the log never showed; stdout %q", out.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
			a.signals <- os.Interrupt
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the follow did not end after Ctrl-C")
			}
			if tc.cancelable {
				if !d.wasCanceled() || err == nil || !strings.Contains(err.Error(), "canceled") || !strings.Contains(errOut.String(), "canceling build b1 on the server") {
					t.Errorf("canceled %v, err %v, stderr %q", d.wasCanceled(), err, errOut.String())
				}
				return
			}
			if d.wasCanceled() || err != (exitError{130}) {
				t.Errorf("logs: canceled %v, err %v", d.wasCanceled(), err)
			}
		})
	}
}

// TestTemplateCancel: `space template cancel` cancels on the server and
// waits for the build to say so; a build that already ended is an error.
func TestTemplateCancel(t *testing.T) {
	d := newBuildDaemon(t)
	env := map[string]string{"SPACE_ADDR": d.srv.URL}
	var out, errOut strings.Builder
	if code := run([]string{"template", "cancel", "b1"}, strings.NewReader(""), &out, &errOut, func(k string) string { return env[k] }); code != 0 || out.String() != "build b1 canceled\n" {
		t.Errorf("cancel: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	d.state = client.BuildStateReady
	out.Reset()
	errOut.Reset()
	if code := run([]string{"template", "cancel", "b1"}, strings.NewReader(""), &out, &errOut, func(k string) string { return env[k] }); code != 1 || !strings.Contains(errOut.String(), "already ended (ready)") {
		t.Errorf("cancel of a ready build: exit %d, stderr %q", code, errOut.String())
	}
}

// TestConfirm: the question takes y or yes; anything else, or no answer,
// is no; another Ctrl-C while it waits is yes.
func TestConfirm(t *testing.T) {
	for in, want := range map[string]bool{"y\n": true, "Yes\n": true, "n\n": false, "\n": false, "": false} {
		var errOut strings.Builder
		a := &app{stdin: strings.NewReader(in), stderr: &errOut}
		if got := a.confirm("cancel? ", make(chan os.Signal)); got != want || errOut.String() != "cancel? " {
			t.Errorf("answer %q: %v (asked %q), want %v", in, got, errOut.String(), want)
		}
	}
	r, w, err := os.Pipe() // an answer that never comes
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	sig := make(chan os.Signal, 1)
	sig <- os.Interrupt
	a := &app{stdin: r, stderr: &strings.Builder{}}
	if !a.confirm("cancel? ", sig) {
		t.Error("a second Ctrl-C did not answer yes")
	}
}
