package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// fakeDaemon plays the spec's answers for the CLI tests. It is no proof that
// the real daemon behaves so; test/e2e is.
type fakeDaemon struct {
	srv *httptest.Server

	mu       sync.Mutex
	files    map[string][]byte
	created  []map[string]any
	stdin    []byte
	stdinEOF chan struct{}
	lastCmd  map[string]any
	// lastLogsQuery is the query of the last GET .../logs.
	lastLogsQuery string
}

func newFakeDaemon(t *testing.T) *fakeDaemon {
	f := &fakeDaemon{files: map[string][]byte{}, stdinEOF: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes", f.create)
	mux.HandleFunc("GET /v1/sandboxes", f.list)
	mux.HandleFunc("GET /v1/sandboxes/{id}", f.get)
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", f.get)
	mux.HandleFunc("POST /v1/sandboxes/{id}/commands", f.run)
	mux.HandleFunc("POST /v1/sandboxes/{id}/commands/{pid}/stdin", f.writeStdin)
	mux.HandleFunc("PUT /v1/sandboxes/{id}/files", f.upload)
	mux.HandleFunc("GET /v1/sandboxes/{id}/files", f.download)
	mux.HandleFunc("GET /v1/sandboxes/{id}/pty", f.pty)
	mux.HandleFunc("GET /v1/sandboxes/{id}/metrics", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"interval_seconds":5,"samples":[{"time":"2026-01-01T00:00:05Z","cpu_count":2,"cpu_used_pct":97.25,`+
			`"mem_used":104857600,"mem_total":536870912,"mem_cache":1048576,"disk_used":20971520,"disk_total":1073741824}]}`)
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/logs", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.lastLogsQuery = r.URL.RawQuery
		f.mu.Unlock()
		fmt.Fprint(w, `{"logs":[{"time":"2026-01-01T00:00:06Z","level":"info","message":"Process with pid 7 ended",`+
			`"fields":{"source":"agent","exit_code":"0"}},{"time":"2026-01-01T00:00:05Z","level":"info","message":"Process with pid 7 started","fields":{"source":"agent","pid":"7"}}]}`)
	})
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" {
			apiError(w, 401, "unauthenticated", "missing or wrong API key")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func apiError(w http.ResponseWriter, status int, code, msg string) {
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"code":%q,"message":%q}}`, code, msg)
}

func sandboxJSON(id string) string {
	return fmt.Sprintf(`{"id":%q,"state":"running","template":"base","created_at":"2026-01-01T00:00:00Z","expires_at":"2026-01-01T00:05:00Z"}`, id)
}

func (f *fakeDaemon) create(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	json.NewDecoder(r.Body).Decode(&body)
	f.mu.Lock()
	f.created = append(f.created, body)
	f.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
	fmt.Fprint(w, sandboxJSON("sb-new"))
}

func (f *fakeDaemon) list(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("page_token") == "" {
		fmt.Fprintf(w, `{"sandboxes":[%s],"next_page_token":"2"}`, sandboxJSON("sb-1"))
		return
	}
	fmt.Fprintf(w, `{"sandboxes":[%s]}`, sandboxJSON("sb-2"))
}

func (f *fakeDaemon) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if id == "missing" {
		apiError(w, 404, "not_found", fmt.Sprintf("sandbox %q not found", id))
		return
	}
	if r.Method == http.MethodDelete {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	fmt.Fprint(w, sandboxJSON(id))
}

// run plays a command: "cat" echoes stdin; "exit N" exits N; "kill" dies of
// SIGKILL; anything else prints its argv.
func (f *fakeDaemon) run(w http.ResponseWriter, r *http.Request) {
	var req map[string]any
	json.NewDecoder(r.Body).Decode(&req)
	f.mu.Lock()
	f.lastCmd = req
	f.mu.Unlock()
	if r.PathValue("id") == "missing" {
		apiError(w, 404, "not_found", `sandbox "missing" not found`)
		return
	}
	if req["background"] == true {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"pid":77}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	flush := func(id int, typ, data string) {
		fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", id, typ, data)
		w.(http.Flusher).Flush()
	}
	flush(1, "start", `{"pid":9}`)
	cmd, _ := req["cmd"].(string)
	end := `{"exit_code":0,"exited":true,"status":"exit status 0"}`
	switch {
	case cmd == "cat":
		select {
		case <-f.stdinEOF:
		case <-time.After(5 * time.Second):
		}
		f.mu.Lock()
		data := base64.StdEncoding.EncodeToString(f.stdin)
		f.mu.Unlock()
		flush(2, "stdout", fmt.Sprintf(`{"base64":%q}`, data))
	case strings.HasPrefix(cmd, "exit "):
		flush(2, "stderr", `{"text":"failing\n"}`)
		end = fmt.Sprintf(`{"exit_code":%s,"exited":true,"status":"exit status %[1]s"}`, strings.TrimPrefix(cmd, "exit "))
	case cmd == "kill":
		end = `{"exit_code":-1,"exited":false,"status":"signal: killed"}`
	default:
		b, _ := json.Marshal(map[string]string{"text": fmt.Sprint(req["argv"]) + "\n"})
		flush(2, "stdout", string(b))
	}
	flush(3, "end", end)
}

func (f *fakeDaemon) writeStdin(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Base64 string `json:"base64"`
		EOF    bool   `json:"eof"`
	}
	json.NewDecoder(r.Body).Decode(&req)
	b, _ := base64.StdEncoding.DecodeString(req.Base64)
	f.mu.Lock()
	f.stdin = append(f.stdin, b...)
	f.mu.Unlock()
	if req.EOF {
		close(f.stdinEOF)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeDaemon) upload(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	p := r.URL.Query().Get("path")
	f.mu.Lock()
	f.files[p] = b
	f.mu.Unlock()
	fmt.Fprintf(w, `{"name":"x","path":%q,"type":"file","size":%d}`, p, len(b))
}

func (f *fakeDaemon) download(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	b, ok := f.files[r.URL.Query().Get("path")]
	f.mu.Unlock()
	if !ok {
		apiError(w, 404, "not_found", "no such file")
		return
	}
	w.Write(b)
}

// pty echoes what it is sent until a line "exit N", then exits N.
func (f *fakeDaemon) pty(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("id") == "missing" {
		apiError(w, 404, "not_found", `sandbox "missing" not found`)
		return
	}
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer conn.CloseNow()
	ctx := r.Context()
	conn.Write(ctx, websocket.MessageBinary, []byte("user="+r.URL.Query().Get("user")+"\n"))
	var line []byte
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			return
		}
		if typ != websocket.MessageBinary {
			continue
		}
		conn.Write(ctx, websocket.MessageBinary, data)
		line = append(line, data...)
		if i := strings.IndexByte(string(line), '\n'); i >= 0 {
			var code int
			if _, err := fmt.Sscanf(string(line[:i]), "exit %d", &code); err == nil {
				conn.Write(ctx, websocket.MessageText, []byte(fmt.Sprintf(`{"type":"exit","exit_code":%d}`, code)))
				conn.Close(websocket.StatusNormalClosure, "")
				return
			}
			line = line[i+1:]
		}
	}
}
