package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// collectCode reads a code stream to its end: the events as "type:id",
// stdout, and the error.
func collectCode(s *CodeStream) ([]string, string, []CodeEvent, error) {
	var seen []string
	var out strings.Builder
	var evs []CodeEvent
	for {
		ev, err := s.Next()
		if err == io.EOF {
			return seen, out.String(), evs, nil
		}
		if err != nil {
			return seen, out.String(), evs, err
		}
		seen = append(seen, fmt.Sprintf("%s:%d", ev.Type, ev.ID))
		evs = append(evs, ev)
		if ev.Type == CodeEventStdout {
			out.WriteString(ev.Text)
		}
	}
}

func TestRunCodeEvents(t *testing.T) {
	png := base64.StdEncoding.EncodeToString([]byte("\x89PNG..."))
	var body map[string]any
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/v1/sandboxes/s1/code" || r.Header.Get("Accept") != "text/event-stream" {
			t.Errorf("%s %s Accept %q", r.Method, r.URL, r.Header.Get("Accept"))
		}
		json.NewDecoder(r.Body).Decode(&body)
		s := startSSE(w)
		s.event(1, "execution", `{"seq":1,"type":"execution","id":"ex-1"}`)
		s.event(2, "number_of_executions", `{"seq":2,"type":"number_of_executions","execution_count":3}`)
		s.raw(": keepalive\n\n")
		s.event(3, "stdout", `{"seq":3,"type":"stdout","text":"hi\n","timestamp":"t"}`)
		s.event(4, "stderr", `{"seq":4,"type":"stderr","text":"warn\n"}`)
		s.event(5, "result", `{"seq":5,"type":"result","text":"<Figure>","png":"`+png+`","chart":{"type":"line"},"json":null,"is_main_result":false}`)
		s.event(6, "result", `{"seq":6,"type":"result","text":"2","html":"<b>2</b>","extra":{"x/y":1},"is_main_result":true}`)
		s.event(7, "error", `{"seq":7,"type":"error","name":"ValueError","value":"bad","traceback":"Traceback...\nValueError: bad"}`)
		s.event(8, "end_of_execution", `{"seq":8,"type":"end_of_execution"}`)
	})
	s, err := c.RunCode(context.Background(), "s1", CodeRequest{Code: "x", Env: map[string]string{"A": "b"}, TimeoutSeconds: 9})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	seen, out, evs, err := collectCode(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(seen, " "); got != "execution:1 number_of_executions:2 stdout:3 stderr:4 result:5 result:6 error:7 end_of_execution:8" {
		t.Fatalf("events %s", got)
	}
	if fmt.Sprint(body) != "map[code:x env:map[A:b] timeout_seconds:9]" {
		t.Errorf("body %v", body)
	}
	if out != "hi\n" || evs[3].Text != "warn\n" || evs[1].ExecutionCount != 3 || s.ExecutionID() != "ex-1" || s.LastEventID() != 8 {
		t.Errorf("out %q events %+v", out, evs)
	}
	for _, ev := range evs {
		if ev.ExecutionID != "ex-1" {
			t.Errorf("%s event without the execution id", ev.Type)
		}
	}
	fig, main := evs[4].Result, evs[5].Result
	b, ok, err := fig.Bytes("png")
	if err != nil || !ok || string(b) != "\x89PNG..." || string(fig.Chart) != `{"type":"line"}` || fig.JSON != nil || fig.IsMainResult {
		t.Errorf("figure %+v (png %q %v %v)", fig, b, ok, err)
	}
	if strings.Join(fig.Formats(), ",") != "text,png,chart" || strings.Join(main.Formats(), ",") != "text,html" {
		t.Errorf("formats %v %v", fig.Formats(), main.Formats())
	}
	if _, ok, _ := main.Bytes("jpeg"); ok || !main.IsMainResult || main.Text != "2" || main.HTML != "<b>2</b>" || string(main.Extra["x/y"]) != "1" {
		t.Errorf("main result %+v", main)
	}
	if e := evs[6].Error; e == nil || e.Error() != "ValueError: bad" || !strings.HasSuffix(e.Traceback, "ValueError: bad") {
		t.Errorf("error %+v", e)
	}
	if !evs[7].End() {
		t.Error("the end is not the end")
	}
	if _, err := s.Next(); err != io.EOF {
		t.Errorf("after end: %v", err)
	}
}

func TestRunCodeResumes(t *testing.T) {
	var mu sync.Mutex
	var resumedWith []string
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/sandboxes/s1/code":
			s := startSSE(w)
			s.event(1, "execution", `{"seq":1,"type":"execution","id":"ex-1"}`)
			s.event(2, "stdout", `{"seq":2,"type":"stdout","text":"a"}`)
			s.raw("id: 3\nevent: stdout\ndata: {\"seq\":3,") // the connection drops mid-event
		case r.URL.Path == "/v1/sandboxes/s1/code/ex-1/events":
			mu.Lock()
			resumedWith = append(resumedWith, r.Header.Get("Last-Event-ID"))
			n := len(resumedWith)
			mu.Unlock()
			switch n {
			case 1:
				writeAPIError(w, http.StatusServiceUnavailable, "unavailable", "spaced restarting")
			case 2:
				s := startSSE(w)
				s.raw("event: stream_error\ndata: {\"message\":\"interpreter gone\"}\n\n")
			default:
				s := startSSE(w)
				s.event(2, "stdout", `{"seq":2,"type":"stdout","text":"a"}`) // a replay, skipped
				s.event(3, "stdout", `{"seq":3,"type":"stdout","text":"b"}`)
				s.event(4, "end_of_execution", `{"seq":4,"type":"end_of_execution"}`)
			}
		default:
			t.Errorf("unexpected %s %s", r.Method, r.URL)
		}
	})
	var causes []string
	s, err := c.RunCodeResumable(context.Background(), "s1", CodeRequest{Code: "x"}, ResumeOptions{
		Retries: 3, Backoff: time.Millisecond,
		OnResume: func(attempt int, err error) { causes = append(causes, fmt.Sprintf("%d %v", attempt, err)) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	seen, out, _, err := collectCode(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(seen, " "); got != "execution:1 stdout:2 stdout:3 end_of_execution:4" || out != "ab" {
		t.Fatalf("events %s, out %q", got, out)
	}
	if fmt.Sprint(resumedWith) != "[2 2 2]" || len(causes) != 3 || !strings.Contains(causes[2], "daemon: interpreter gone") {
		t.Fatalf("resumed with %v, causes %q", resumedWith, causes)
	}
}

func TestCodeStreamNoResume(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events func(s sse)
		retry  bool
		err    string
	}{
		{"broken, not resumable", func(s sse) {
			s.event(1, "execution", `{"seq":1,"type":"execution","id":"ex-1"}`)
			s.raw("event: stream_error\ndata: {\"message\":\"lost it\"}\n\n")
		}, false, "daemon: lost it"},
		{"broken before the execution event", func(s sse) {}, true, "execution (not started) stream: unexpected EOF"},
		{"execution forgotten", func(s sse) {
			s.event(1, "execution", `{"seq":1,"type":"execution","id":"ex-1"}`)
		}, true, "execution ex-1 not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var resumes int
			c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Method == "GET" {
					resumes++
					writeAPIError(w, 404, "not_found", "execution ex-1 not found in sandbox s1")
					return
				}
				tc.events(startSSE(w))
			})
			ro := ResumeOptions{}
			if tc.retry {
				ro = ResumeOptions{Retries: 5, Backoff: time.Millisecond}
			}
			s, err := c.RunCodeResumable(context.Background(), "s1", CodeRequest{Code: "x"}, ro)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			_, _, _, err = collectCode(s)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err %v, want %q", err, tc.err)
			}
			if resumes > 1 {
				t.Fatalf("%d resumes after a 404", resumes)
			}
		})
	}
}

func TestCodeEventsAfter(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/sandboxes/s1/code/ex-1/events" {
			t.Errorf("path %s", r.URL.Path)
		}
		s := startSSE(w)
		switch r.Header.Get("Last-Event-ID") {
		case "9": // the caller had the end: nothing
		case "":
			s.event(1, "execution", `{"seq":1,"type":"execution","id":"ex-1"}`)
			s.event(5, "gap", `{"seq":5,"type":"gap","dropped":4}`)
			s.event(6, "end_of_execution", `{"seq":6,"type":"end_of_execution"}`)
		}
	})
	s, err := c.CodeEvents(context.Background(), "s1", "ex-1", 9)
	if err != nil {
		t.Fatal(err)
	}
	if seen, _, _, err := collectCode(s); err != nil || len(seen) != 0 {
		t.Fatalf("after the end: %v %v", seen, err)
	}
	s.Close()
	s, err = c.CodeEvents(context.Background(), "s1", "ex-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	seen, _, evs, err := collectCode(s)
	if err != nil || strings.Join(seen, " ") != "execution:1 gap:5 end_of_execution:6" || evs[1].Dropped != 4 {
		t.Fatalf("events %v %+v %v", seen, evs, err)
	}
}

func TestRunCodeRefused(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, 409, "failed_precondition", "sandbox s1 runs no code interpreter")
	})
	_, err := c.RunCode(context.Background(), "s1", CodeRequest{Code: "1"})
	if !IsFailedPrecondition(err) || !strings.Contains(err.Error(), "runs no code interpreter") {
		t.Fatalf("err %v", err)
	}
}

func TestCodeContextsAndExecutions(t *testing.T) {
	var calls []string
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		calls = append(calls, strings.TrimSpace(r.Method+" "+r.URL.Path+" "+string(b)))
		w.Header().Set("Content-Type", "application/json")
		switch r.Method + " " + r.URL.Path {
		case "GET /v1/sandboxes/s1/contexts":
			io.WriteString(w, `{"contexts":[{"id":"c-1","language":"python","cwd":"/home/user"}]}`)
		case "POST /v1/sandboxes/s1/contexts":
			w.WriteHeader(201)
			io.WriteString(w, `{"id":"c-2","language":"python","cwd":"/tmp"}`)
		case "DELETE /v1/sandboxes/s1/contexts/c-2", "POST /v1/sandboxes/s1/contexts/c-1/restart":
			w.WriteHeader(204)
		case "GET /v1/sandboxes/s1/code":
			io.WriteString(w, `{"executions":[{"id":"ex-1","context_id":"c-1","state":"running","started_at":"2026-12-01T03:03:41Z"}]}`)
		case "POST /v1/sandboxes/s1/code/ex-1/interrupt":
			io.WriteString(w, `{"id":"ex-1","context_id":"c-1","state":"done","started_at":"2026-12-01T03:03:41Z","ended_at":"2026-12-01T03:03:42Z"}`)
		default:
			writeAPIError(w, 404, "not_found", "no")
		}
	})
	ctx := context.Background()
	list, err := c.ListCodeContexts(ctx, "s1")
	if err != nil || len(list) != 1 || list[0] != (CodeContext{ID: "c-1", Language: "python", Cwd: "/home/user"}) {
		t.Fatalf("contexts %+v %v", list, err)
	}
	made, err := c.CreateCodeContext(ctx, "s1", CodeContextRequest{Cwd: "/tmp"})
	if err != nil || made.ID != "c-2" {
		t.Fatalf("create %+v %v", made, err)
	}
	if err := c.DeleteCodeContext(ctx, "s1", "c-2"); err != nil {
		t.Fatal(err)
	}
	if err := c.RestartCodeContext(ctx, "s1", "c-1"); err != nil {
		t.Fatal(err)
	}
	execs, err := c.ListExecutions(ctx, "s1")
	if err != nil || len(execs) != 1 || execs[0].State != "running" || execs[0].EndedAt != nil {
		t.Fatalf("executions %+v %v", execs, err)
	}
	ex, err := c.InterruptCode(ctx, "s1", "ex-1")
	if err != nil || ex.EndedAt == nil {
		t.Fatalf("interrupt %+v %v", ex, err)
	}
	if err := c.DeleteCodeContext(ctx, "s1", "c-9"); !IsNotFound(err) {
		t.Fatalf("delete unknown: %v", err)
	}
	want := `GET /v1/sandboxes/s1/contexts|POST /v1/sandboxes/s1/contexts {"cwd":"/tmp"}|DELETE /v1/sandboxes/s1/contexts/c-2|` +
		`POST /v1/sandboxes/s1/contexts/c-1/restart|GET /v1/sandboxes/s1/code|POST /v1/sandboxes/s1/code/ex-1/interrupt|DELETE /v1/sandboxes/s1/contexts/c-9`
	if got := strings.Join(calls, "|"); got != want {
		t.Fatalf("calls\n%s\nwant\n%s", got, want)
	}
}
