package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// codeDaemon plays spaced's /code routes (api/openapi.yaml) for the CLI:
// cells are looked up by their code.
type codeDaemon struct {
	mu     sync.Mutex
	bodies []map[string]any
	resume []string // Last-Event-ID of each resume
}

var pngBytes = []byte("\x89PNG\r\n\x1a\nfake")

func (d *codeDaemon) start(t *testing.T) *fakeDaemon {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" {
			apiError(w, 401, "unauthenticated", "missing or wrong API key")
			return
		}
		ev := func(id int, typ, data string) {
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", id, typ, data)
			w.(http.Flusher).Flush()
		}
		if r.Method == "GET" && r.URL.Path == "/v1/sandboxes/sb-1/code/ex-1/events" {
			d.mu.Lock()
			d.resume = append(d.resume, r.Header.Get("Last-Event-ID"))
			d.mu.Unlock()
			w.Header().Set("Content-Type", "text/event-stream")
			ev(2, "stdout", `{"seq":2,"type":"stdout","text":"one\n"}`)
			ev(3, "stdout", `{"seq":3,"type":"stdout","text":"two\n"}`)
			ev(4, "end_of_execution", `{"seq":4,"type":"end_of_execution"}`)
			return
		}
		if r.Method != "POST" || r.URL.Path != "/v1/sandboxes/sb-1/code" {
			apiError(w, 409, "failed_precondition", "sandbox sb-2 runs no code interpreter")
			return
		}
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		d.mu.Lock()
		d.bodies = append(d.bodies, body)
		d.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		ev(1, "execution", `{"seq":1,"type":"execution","id":"ex-1"}`)
		switch body["code"] {
		case "plot()":
			png := base64.StdEncoding.EncodeToString(pngBytes)
			ev(2, "stdout", `{"seq":2,"type":"stdout","text":"drawing\n"}`)
			ev(3, "result", `{"seq":3,"type":"result","text":"42","is_main_result":true}`)
			ev(4, "result", `{"seq":4,"type":"result","text":"<Figure>","png":"`+png+`","svg":"<svg/>","is_main_result":false}`)
			ev(5, "stderr", `{"seq":5,"type":"stderr","text":"careful\n"}`)
			ev(6, "end_of_execution", `{"seq":6,"type":"end_of_execution"}`)
		case "raise":
			ev(2, "error", `{"seq":2,"type":"error","name":"ValueError","value":"no","traceback":"Traceback (most recent call last):\nValueError: no"}`)
			ev(3, "end_of_execution", `{"seq":3,"type":"end_of_execution"}`)
		case "drop":
			ev(2, "stdout", `{"seq":2,"type":"stdout","text":"one\n"}`)
			// the connection drops here; the cell runs on
		default:
			ev(2, "end_of_execution", `{"seq":2,"type":"end_of_execution"}`)
		}
	}))
	t.Cleanup(srv.Close)
	return &fakeDaemon{srv: srv}
}

func TestRunCode(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name           string
		args           []string
		stdin          string
		code           int
		stdout, stderr string
	}{
		{"results, main last, files saved", []string{"run-code", "--out-dir", dir, "sb-1", "plot()"}, "", 0,
			"drawing\n<Figure>\n42\n", filepath.Join(dir, "result-1.png") + "\n" + filepath.Join(dir, "result-1.svg") + "\ncareful\n"},
		{"an error", []string{"run-code", "sb-1", "raise"}, "", 1, "", "Traceback (most recent call last):\nValueError: no\n"},
		{"code from stdin", []string{"run-code", "sb-1"}, "raise", 1, "", "Traceback (most recent call last):\nValueError: no\n"},
		{"code from stdin with -", []string{"run-code", "sb-1", "-"}, "pass", 0, "", ""},
		{"resumes a dropped stream", []string{"run-code", "sb-1", "drop"}, "", 0, "one\ntwo\n", "resuming, attempt 1"},
		{"no interpreter", []string{"run-code", "sb-2", "1"}, "", 1, "", "space: run code in sb-2: sandbox sb-2 runs no code interpreter\n"},
		{"no code", []string{"run-code", "sb-1"}, " \n", 2, "", "space: no code to run\n"},
		{"no sandbox", []string{"run-code"}, "", 2, "", "space: want a sandbox ID and at most one CODE argument, got 0 argument(s)\n"},
		{"context and language", []string{"run-code", "--context", "c", "--language", "python", "sb-1", "1"}, "", 2, "", "space: give --context or --language, not both\n"},
		{"bad env", []string{"run-code", "--env", "X", "sb-1", "1"}, "", 2, "", "space: --env \"X\": want KEY=VALUE\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &codeDaemon{}
			got := runCLI(t, d.start(t), tt.stdin, tt.args...)
			if got.code != tt.code || got.stdout != tt.stdout || !strings.Contains(got.stderr, tt.stderr) || (tt.stderr == "" && got.stderr != "") {
				t.Fatalf("exit %d stdout %q stderr %q; want %d %q %q", got.code, got.stdout, got.stderr, tt.code, tt.stdout, tt.stderr)
			}
			if tt.name == "resumes a dropped stream" && fmt.Sprint(d.resume) != "[2]" {
				t.Fatalf("resumed with %v", d.resume)
			}
		})
	}
	if b, err := os.ReadFile(filepath.Join(dir, "result-1.png")); err != nil || string(b) != string(pngBytes) {
		t.Fatalf("png %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "result-1.svg")); err != nil || string(b) != "<svg/>" {
		t.Fatalf("svg %q %v", b, err)
	}
}

func TestRunCodeRequest(t *testing.T) {
	d := &codeDaemon{}
	got := runCLI(t, d.start(t), "", "run-code", "--context", "c-1", "--timeout", "30", "--env", "A=1", "--env", "B=x=y", "sb-1", "print(1)")
	if got.code != 0 {
		t.Fatalf("exit %d: %s", got.code, got.stderr)
	}
	want := "map[code:print(1) context_id:c-1 env:map[A:1 B:x=y] timeout_seconds:30]"
	if fmt.Sprint(d.bodies) != "["+want+"]" {
		t.Fatalf("bodies %v, want %s", d.bodies, want)
	}
}
