package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs the command tree against the fake daemon, as the binary would.
func runCLI(t *testing.T, f *fakeDaemon, stdin string, args ...string) result {
	t.Helper()
	var out, errOut strings.Builder
	env := map[string]string{"SPACE_ADDR": f.srv.URL, "SPACE_API_KEY": "k"}
	code := run(args, strings.NewReader(stdin), &out, &errOut, func(k string) string { return env[k] })
	return result{code, out.String(), errOut.String()}
}

func TestCLI(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		stdin      string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"create prints the id", []string{"create"}, "", 0, "sb-new\n", ""},
		{"exec success with argv", []string{"exec", "sb-1", "--", "ls", "-la"}, "", 0, "[ls -la]\n", ""},
		{"exec exit code", []string{"exec", "sb-1", "--", "exit 3"}, "", 3, "", "failing\n"},
		{"exec signal exit code", []string{"exec", "sb-1", "kill"}, "", 137, "", ""},
		{"exec forwards stdin", []string{"exec", "sb-1", "--", "cat"}, "piped\x00data", 0, "piped\x00data", ""},
		{"exec background prints the pid", []string{"exec", "--background", "sb-1", "--", "sleep 9"}, "", 0, "77\n", ""},
		{"exec in a missing sandbox", []string{"exec", "missing", "--", "true"}, "", 1, "", `space: run command in missing: sandbox "missing" not found` + "\n"},
		{"exec without command", []string{"exec", "sb-1"}, "", 2, "", "space: want at least 2 argument(s), got 1\n"},
		{"exec with two ids", []string{"exec", "a", "b", "--", "true"}, "", 2, "", "space: want one sandbox ID before --, got 2 arguments\n"},
		{"shell exits with the remote code", []string{"shell", "--user", "root", "sb-1"}, "exit 5\n", 5, "user=root\nexit 5\n", ""},
		{"shell in a missing sandbox", []string{"shell", "missing"}, "", 1, "", `space: open pty in missing: sandbox "missing" not found` + "\n"},
		{"ls walks all pages", []string{"ls"}, "", 0, "", ""},
		{"info of a missing sandbox", []string{"info", "missing"}, "", 1, "", `space: get sandbox missing: sandbox "missing" not found` + "\n"},
		{"kill", []string{"kill", "sb-1", "sb-2"}, "", 0, "", ""},
		{"kill reports each failure", []string{"kill", "missing", "sb-2"}, "", 1, "", `space: kill sandbox missing: sandbox "missing" not found` + "\n"},
		{"unknown flag", []string{"ls", "--nope"}, "", 2, "", "space: unknown flag: --nope\n"},
		{"unknown command", []string{"frobnicate"}, "", 2, "", "space: unknown command \"frobnicate\" (see space --help)\n"},
		{"bad env pair", []string{"create", "--env", "NOEQUALS"}, "", 2, "", "space: --env \"NOEQUALS\": want KEY=VALUE\n"},
		{"wrong api key", []string{"--api-key", "bad", "info", "sb-1"}, "", 1, "", "space: get sandbox sb-1: missing or wrong API key\n"},
		{"metrics", []string{"metrics", "sb-1", "--json"}, "", 0, "", ""},
		{"logs", []string{"logs", "sb-1", "--json"}, "", 0, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeDaemon(t)
			got := runCLI(t, f, tt.stdin, tt.args...)
			if got.code != tt.wantCode {
				t.Errorf("exit code %d, want %d (stderr %q)", got.code, tt.wantCode, got.stderr)
			}
			if tt.wantStdout != "" && got.stdout != tt.wantStdout {
				t.Errorf("stdout %q, want %q", got.stdout, tt.wantStdout)
			}
			if got.stderr != tt.wantStderr {
				t.Errorf("stderr %q, want %q", got.stderr, tt.wantStderr)
			}
		})
	}
}

func TestExecRequest(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"one word runs in the shell", []string{"exec", "sb-1", "--", "echo $HOME | wc"}, `{"cmd":"echo $HOME | wc","keep_stdin_open":true}`},
		{"flags", []string{"exec", "sb-1", "--user", "root", "--cwd", "/tmp", "--env", "A=1", "--timeout", "5", "--stdin=false", "--", "ls", "/"},
			`{"argv":["ls","/"],"cwd":"/tmp","env":{"A":"1"},"timeout_seconds":5,"user":"root"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeDaemon(t)
			if got := runCLI(t, f, "", tt.args...); got.code != 0 {
				t.Fatalf("code %d stderr %q", got.code, got.stderr)
			}
			b, _ := json.Marshal(f.lastCmd)
			if string(b) != tt.want {
				t.Errorf("request %s, want %s", b, tt.want)
			}
		})
	}
}

func TestCreateJSON(t *testing.T) {
	f := newFakeDaemon(t)
	got := runCLI(t, f, "", "create", "--json", "--template", "py", "--timeout", "60", "--cpu", "2",
		"--memory", "1024", "--disk", "2048", "--env", "A=1", "--meta", "team=x")
	if got.code != 0 {
		t.Fatalf("code %d stderr %q", got.code, got.stderr)
	}
	var sb map[string]any
	if err := json.Unmarshal([]byte(got.stdout), &sb); err != nil || sb["id"] != "sb-new" || sb["state"] != "running" {
		t.Errorf("stdout %q: %v", got.stdout, err)
	}
	b, _ := json.Marshal(f.created[0])
	want := `{"cpu":2,"disk_mb":2048,"env":{"A":"1"},"memory_mb":1024,"metadata":{"team":"x"},"template":"py","timeout_seconds":60}`
	if string(b) != want {
		t.Errorf("request %s, want %s", b, want)
	}
}

func TestLsTable(t *testing.T) {
	f := newFakeDaemon(t)
	got := runCLI(t, f, "", "ls")
	lines := strings.Split(strings.TrimSpace(got.stdout), "\n")
	if got.code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") ||
		!strings.HasPrefix(lines[1], "sb-1 ") || !strings.HasPrefix(lines[2], "sb-2 ") {
		t.Errorf("code %d stdout:\n%s", got.code, got.stdout)
	}
	for _, col := range []string{"TEMPLATE", "STATE", "CREATED", "EXPIRES"} {
		if !strings.Contains(lines[0], col) {
			t.Errorf("header %q lacks %s", lines[0], col)
		}
	}
}

func TestCp(t *testing.T) {
	dir := t.TempDir()
	local := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(local, []byte("from a file"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := newFakeDaemon(t)
	steps := []struct {
		name  string
		args  []string
		stdin string
		check func(t *testing.T, r result)
	}{
		{"upload a file into a directory path", []string{"cp", local, "sb-1:/home/user/"}, "", func(t *testing.T, r result) {
			if string(f.files["/home/user/in.txt"]) != "from a file" {
				t.Errorf("files %q", f.files)
			}
		}},
		{"upload stdin", []string{"cp", "-", "sb-1:/tmp/s"}, "from stdin", func(t *testing.T, r result) {
			if string(f.files["/tmp/s"]) != "from stdin" {
				t.Errorf("files %q", f.files)
			}
		}},
		{"download to stdout", []string{"cp", "sb-1:/tmp/s", "-"}, "", func(t *testing.T, r result) {
			if r.stdout != "from stdin" {
				t.Errorf("stdout %q", r.stdout)
			}
		}},
		{"download to a file", []string{"cp", "sb-1:/home/user/in.txt", filepath.Join(dir, "out.txt")}, "", func(t *testing.T, r result) {
			if b, _ := os.ReadFile(filepath.Join(dir, "out.txt")); string(b) != "from a file" {
				t.Errorf("file %q", b)
			}
		}},
		{"download into a directory", []string{"cp", "sb-1:/tmp/s", dir}, "", func(t *testing.T, r result) {
			if b, _ := os.ReadFile(filepath.Join(dir, "s")); string(b) != "from stdin" {
				t.Errorf("file %q", b)
			}
		}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			r := runCLI(t, f, s.stdin, s.args...)
			if r.code != 0 {
				t.Fatalf("code %d stderr %q", r.code, r.stderr)
			}
			s.check(t, r)
		})
	}
}

func TestCpErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{"both local", []string{"cp", "a", "b"}, 2, "space: exactly one of SRC and DST must be ID:/path\n"},
		{"both remote", []string{"cp", "x:/a", "y:/b"}, 2, "space: exactly one of SRC and DST must be ID:/path\n"},
		{"missing remote file leaves no local file", []string{"cp", "sb-1:/nope", filepath.Join(dir, "n")}, 1, "space: download /nope from sb-1: no such file\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, newFakeDaemon(t), "", tt.args...)
			if r.code != tt.wantCode || r.stderr != tt.wantStderr {
				t.Errorf("code %d stderr %q", r.code, r.stderr)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "n")); !os.IsNotExist(err) {
		t.Errorf("partial file left behind: %v", err)
	}
}

func TestSplitRemote(t *testing.T) {
	tests := []struct {
		in, id, path string
		ok           bool
	}{
		{"sb-1:/tmp/x", "sb-1", "/tmp/x", true},
		{"sb-1:rel", "sb-1", "rel", true},
		{"./a:b", "", "", false},
		{"/abs/a:b", "", "", false},
		{"plain", "", "", false},
		{"sb-1:", "", "", false},
		{"-", "", "", false},
	}
	for _, tt := range tests {
		id, p, ok := splitRemote(tt.in)
		if id != tt.id || p != tt.path || ok != tt.ok {
			t.Errorf("splitRemote(%q) = %q, %q, %v", tt.in, id, p, ok)
		}
	}
}

func TestMetricsAndLogs(t *testing.T) {
	f := newFakeDaemon(t)
	got := runCLI(t, f, "", "metrics", "sb-1")
	if got.code != 0 || !strings.Contains(got.stdout, "97.2% of 2") || !strings.Contains(got.stdout, "100 MiB / 512 MiB") || !strings.Contains(got.stdout, "20 MiB / 1024 MiB") {
		t.Errorf("metrics: %d %q %q", got.code, got.stdout, got.stderr)
	}
	// --tail asks for the newest lines (backward) and prints them oldest first.
	got = runCLI(t, f, "", "logs", "-n", "2", "--level", "info", "sb-1")
	lines := strings.Split(strings.TrimSpace(got.stdout), "\n")
	if got.code != 0 || len(lines) != 2 || !strings.Contains(lines[0], `INFO  agent  Process with pid 7 started pid="7"`) || !strings.Contains(lines[1], "ended") {
		t.Errorf("logs: %d %q %q", got.code, got.stdout, got.stderr)
	}
	f.mu.Lock()
	q := f.lastLogsQuery
	f.mu.Unlock()
	if q != "direction=backward&level=info&limit=2" {
		t.Errorf("logs query %q", q)
	}
}
