package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCreateSandbox(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/sandboxes" {
			t.Errorf("got %s %s", r.Method, r.URL.Path)
		}
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		want := `map[cpu:2 env:map[A:b] template:py timeout_seconds:60]`
		if fmt.Sprint(body) != want {
			t.Errorf("body = %v, want %s", body, want)
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"sb1","state":"running","template":"py","created_at":"2026-01-02T03:04:05Z","expires_at":"2026-01-02T03:05:05Z","access_token":"tok"}`)
	})
	sb, err := c.CreateSandbox(context.Background(), CreateSandboxRequest{Template: "py", TimeoutSeconds: 60, CPU: 2, Env: map[string]string{"A": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != "sb1" || sb.AccessToken != "tok" || sb.ExpiresAt.Sub(sb.CreatedAt).Seconds() != 60 {
		t.Errorf("sandbox = %+v", sb)
	}
}

func TestAllSandboxesPages(t *testing.T) {
	pages := map[string]string{
		"":   `{"sandboxes":[{"id":"a"},{"id":"b"}],"next_page_token":"p2"}`,
		"p2": `{"sandboxes":[{"id":"c"}],"next_page_token":"p3"}`,
		"p3": `{"sandboxes":[]}`,
	}
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("state") != "running,killed" || q.Get("limit") != "2" || !slices.Equal(q["metadata"], []string{"team=x"}) {
			t.Errorf("query = %v", q)
		}
		fmt.Fprint(w, pages[q.Get("page_token")])
	})
	opts := ListOptions{States: []string{"running", "killed"}, Metadata: map[string]string{"team": "x"}, Limit: 2}
	all, err := c.ListAllSandboxes(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, sb := range all {
		ids = append(ids, sb.ID)
	}
	if strings.Join(ids, ",") != "a,b,c" {
		t.Errorf("ids = %v", ids)
	}

	// Stopping early fetches no further page.
	for sb, err := range c.AllSandboxes(context.Background(), opts) {
		if err != nil || sb.ID != "a" {
			t.Fatalf("first = %v, %v", sb, err)
		}
		break
	}
}

func TestAllSandboxesRepeatedToken(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"sandboxes":[{"id":"a"}],"next_page_token":"same"}`)
	})
	if _, err := c.ListAllSandboxes(context.Background(), ListOptions{}); err == nil || !strings.Contains(err.Error(), "repeated") {
		t.Fatalf("err = %v", err)
	}
}

func TestSandboxRoutes(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name       string
		call       func(c *Client) error
		wantMethod string
		wantPath   string
		wantBody   string
		reply      string
		status     int
	}{
		{"get", func(c *Client) error { _, err := c.GetSandbox(ctx, "s/1"); return err }, "GET", "/v1/sandboxes/s%2F1", "", `{"id":"s/1"}`, 200},
		{"kill", func(c *Client) error { return c.KillSandbox(ctx, "s1") }, "DELETE", "/v1/sandboxes/s1", "", "", 204},
		{"timeout", func(c *Client) error { _, err := c.SetTimeout(ctx, "s1", 90); return err }, "POST", "/v1/sandboxes/s1/timeout", `{"timeout_seconds":90}`, `{"id":"s1"}`, 200},
		{"health", func(c *Client) error { return c.Health(ctx) }, "GET", "/healthz", "", `{"status":"ok"}`, 200},
		{"metrics", func(c *Client) error { _, err := c.Metrics(ctx); return err }, "GET", "/metrics", "", "up 1\n", 200},
		{"list commands", func(c *Client) error { _, err := c.ListCommands(ctx, "s1"); return err }, "GET", "/v1/sandboxes/s1/commands", "", `{"commands":[{"pid":3}]}`, 200},
		{"stdin", func(c *Client) error { return c.SendStdin(ctx, "s1", 3, []byte("hi")) }, "POST", "/v1/sandboxes/s1/commands/3/stdin", `{"base64":"aGk="}`, "", 204},
		{"close stdin", func(c *Client) error { return c.CloseStdin(ctx, "s1", 3) }, "POST", "/v1/sandboxes/s1/commands/3/stdin", `{"eof":true}`, "", 204},
		{"signal", func(c *Client) error { return c.Signal(ctx, "s1", 3, SIGKILL) }, "POST", "/v1/sandboxes/s1/commands/3/signal", `{"signal":"SIGKILL"}`, "", 204},
		{"background", func(c *Client) error {
			cmd, err := c.StartBackground(ctx, "s1", CommandRequest{Cmd: "sleep 9"})
			if err == nil && cmd.PID != 8 {
				err = fmt.Errorf("pid %d", cmd.PID)
			}
			return err
		}, "POST", "/v1/sandboxes/s1/commands", `{"background":true,"cmd":"sleep 9"}`, `{"pid":8}`, 201},
		{"list files", func(c *Client) error { _, err := c.ListFiles(ctx, "s1", "/a b", 2); return err }, "GET", "/v1/sandboxes/s1/files/list?depth=2&path=%2Fa+b", "", `{"entries":[]}`, 200},
		{"stat", func(c *Client) error { _, err := c.Stat(ctx, "s1", "x"); return err }, "GET", "/v1/sandboxes/s1/files/stat?path=x", "", `{"name":"x","path":"/home/user/x","type":"file"}`, 200},
		{"mkdir", func(c *Client) error { _, err := c.MakeDir(ctx, "s1", "/d"); return err }, "POST", "/v1/sandboxes/s1/files/mkdir", `{"path":"/d"}`, `{"name":"d","path":"/d","type":"dir"}`, 201},
		{"move", func(c *Client) error { _, err := c.Move(ctx, "s1", "/a", "/b"); return err }, "POST", "/v1/sandboxes/s1/files/move", `{"source":"/a","destination":"/b"}`, `{"name":"b","path":"/b","type":"file"}`, 200},
		{"remove", func(c *Client) error { return c.Remove(ctx, "s1", "/a") }, "DELETE", "/v1/sandboxes/s1/files?path=%2Fa", "", "", 204},
		{"sandbox metrics", func(c *Client) error {
			m, err := c.SandboxMetrics(ctx, "s1", MetricsOptions{Start: time.Unix(1800000000, 0).UTC()})
			if err == nil && (len(m.Samples) != 1 || m.Samples[0].CPUUsedPct != 97.5 || m.Samples[0].MemUsed != 3 || m.IntervalSeconds != 5) {
				err = fmt.Errorf("metrics %+v", m)
			}
			return err
		}, "GET", "/v1/sandboxes/s1/metrics?start=2027-01-15T08%3A00%3A00Z", "",
			`{"interval_seconds":5,"samples":[{"time":"2027-01-15T08:00:05Z","cpu_count":1,"cpu_used_pct":97.5,"mem_used":3,"mem_total":4,"mem_cache":0,"disk_used":1,"disk_total":2}]}`, 200},
		{"sandbox logs", func(c *Client) error {
			ls, err := c.SandboxLogs(ctx, "s1", LogsOptions{Backward: true, Limit: 5, Level: "warn", Search: "pid"})
			if err == nil && (len(ls) != 1 || ls[0].Fields["source"] != "agent") {
				err = fmt.Errorf("logs %+v", ls)
			}
			return err
		}, "GET", "/v1/sandboxes/s1/logs?direction=backward&level=warn&limit=5&search=pid", "",
			`{"logs":[{"time":"2027-01-15T08:00:05Z","level":"warn","message":"Process with pid 3 started","fields":{"source":"agent"}}]}`, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				if r.Method != tt.wantMethod || r.URL.RequestURI() != tt.wantPath || string(body) != tt.wantBody {
					t.Errorf("got %s %s %q, want %s %s %q", r.Method, r.URL.RequestURI(), body, tt.wantMethod, tt.wantPath, tt.wantBody)
				}
				w.WriteHeader(tt.status)
				fmt.Fprint(w, tt.reply)
			})
			if err := tt.call(c); err != nil {
				t.Fatal(err)
			}
		})
	}
}
