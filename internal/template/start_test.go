package template

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestURLCheck runs the URL ready check's script on the host (what it
// does inside a sandbox) with each HTTP client it may find: only a 200
// is ready; another 2xx, a redirect (even to a 200), an error status or
// no server is not; and no client at all says so with its own code.
func TestURLCheck(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	mux.HandleFunc("/empty", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("/accepted", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("/broken", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	closed := httptest.NewServer(mux)
	closed.Close()

	// Each client alone on the PATH, with the tools the script needs.
	clients := map[string]string{"curl": "/usr/bin/curl", "python3": "/usr/bin/python3", "wget": "/usr/bin/wget", "busybox wget": "/bin/busybox"}
	for name, bin := range clients {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("%s: %v (the test runs each client the script can use)", name, err)
		}
	}
	path := func(t *testing.T, client, bin string) string {
		dir := t.TempDir()
		for _, tool := range []string{"/usr/bin/sed", "/usr/bin/head"} {
			if err := os.Symlink(tool, filepath.Join(dir, filepath.Base(tool))); err != nil {
				t.Fatal(err)
			}
		}
		if client != "" {
			link := filepath.Base(client)
			if client == "busybox wget" {
				link = "wget"
			}
			if err := os.Symlink(bin, filepath.Join(dir, link)); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	check := func(t *testing.T, dir, url string) int {
		cmd := exec.Command("/bin/sh", "-c", urlCheck, "ready", url)
		cmd.Env = []string{"PATH=" + dir}
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	}
	for client, bin := range clients {
		t.Run(client, func(t *testing.T) {
			dir := path(t, client, bin)
			for url, ready := range map[string]bool{
				srv.URL + "/ok": true, srv.URL + "/empty": false, srv.URL + "/accepted": false,
				srv.URL + "/moved": false, srv.URL + "/broken": false, srv.URL + "/missing": false, closed.URL + "/ok": false,
			} {
				code := check(t, dir, url)
				if (code == 0) != ready || code == urlCheckNoClient {
					t.Errorf("%s: exit %d, want ready=%v", url, code, ready)
				}
			}
		})
	}
	if code := check(t, path(t, "", ""), srv.URL+"/ok"); code != urlCheckNoClient {
		t.Errorf("with no client: exit %d, want %d", code, urlCheckNoClient)
	}
}

// TestKeepStart: a started template's checkpoint and its agent's token
// are kept as a pair: a complete pair there already stays whole (another
// build or daemon kept its own; replacing only the token broke restores),
// a checkpoint left without its token is replaced.
func TestKeepStart(t *testing.T) {
	e := newTestService(t, nil)
	dir, err := e.s.startDir(key('k'), true)
	if err != nil {
		t.Fatal(err)
	}
	made := func(content string) string {
		tmp := t.TempDir() + "/cp"
		if err := os.MkdirAll(tmp, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, "checkpoint.img"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return tmp
	}
	pair := func() (string, string) {
		cp, _ := os.ReadFile(filepath.Join(dir, "checkpoint.img"))
		token, _ := os.ReadFile(dir + ".token")
		return string(cp), string(token)
	}
	for _, step := range []struct {
		name, content, token string
		prepare              func()
		wantCP, wantToken    string
	}{
		{"fresh", "one", "t1", nil, "one", "t1"},
		{"a complete pair stays", "two", "t2", nil, "one", "t1"},
		{"a checkpoint without its token is replaced", "three", "t3", func() { os.Remove(dir + ".token") }, "three", "t3"},
	} {
		if step.prepare != nil {
			step.prepare()
		}
		if err := e.s.keepStart(made(step.content), dir, step.token); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if cp, token := pair(); cp != step.wantCP || token != step.wantToken {
			t.Errorf("%s: checkpoint %q with token %q, want %q with %q", step.name, cp, token, step.wantCP, step.wantToken)
		}
	}
}
