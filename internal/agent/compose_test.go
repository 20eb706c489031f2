package agent

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCompose(t *testing.T) {
	ta := newTestAgent(t, agentOpts{})
	dir := t.TempDir()
	for name, body := range map[string]string{"p1": "hello ", "p2": "composed ", "p3": "world"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	post := func(body string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodPost, ta.url+"/files/compose", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(TokenHeader, ta.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	dst := filepath.Join(dir, "out", "all.txt")
	tests := []struct {
		name   string
		body   string
		status int
	}{
		{"concatenates in order", `{"source_paths":["` + dir + `/p1","` + dir + `/p2","` + dir + `/p3"],"destination":"` + dst + `"}`, 200},
		{"missing source", `{"source_paths":["` + dir + `/nope"],"destination":"` + dir + `/x"}`, 404},
		{"no sources", `{"source_paths":[],"destination":"` + dir + `/x"}`, 400},
		{"destination is a directory", `{"source_paths":["` + dir + `/p1"],"destination":"` + dir + `"}`, 400},
		{"bad json", `{"source_paths":`, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, out := post(tt.body)
			if status != tt.status {
				t.Fatalf("status %d (%v), want %d", status, out, tt.status)
			}
			if status != 200 {
				if _, ok := out["message"]; !ok {
					t.Fatalf("error body without message: %v", out)
				}
			}
		})
	}
	got, err := os.ReadFile(dst)
	if err != nil || string(got) != "hello composed world" {
		t.Fatalf("destination = %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); !os.IsNotExist(err) {
		t.Fatal("a failed compose left its destination")
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, ".compose-*")); len(leftovers) > 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}
}
