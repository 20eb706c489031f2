package agent

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"net/url"
	"os"
	"path/filepath"
	"testing"
)

type tarEntry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func tarOf(t *testing.T, gz bool, ents ...tarEntry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	var w interface {
		Write([]byte) (int, error)
		Close() error
	} = nopCloser{&buf}
	if gz {
		w = gzip.NewWriter(&buf)
	}
	tw := tar.NewWriter(w)
	for _, e := range ents {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: mode, Uid: 4242, Gid: 4242}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()
	w.Close()
	return &buf
}

type nopCloser struct{ *bytes.Buffer }

func (nopCloser) Close() error { return nil }

func TestExtract(t *testing.T) {
	ta := newTestAgent(t, agentOpts{})
	root := t.TempDir()
	os.Mkdir(filepath.Join(root, "existing"), 0o755)
	for _, tc := range []struct {
		name   string
		params url.Values
		gz     bool
		ents   []tarEntry
		status int
		want   map[string]string // path -> content ("" for a dir check only)
		mode   map[string]os.FileMode
	}{
		{
			name:   "tree under a new directory, gzip sniffed, one mode",
			params: url.Values{"path": {root + "/app"}, "mode": {"0750"}},
			gz:     true,
			ents: []tarEntry{
				{name: "sub/", typ: tar.TypeDir, mode: 0o755},
				{name: "sub/a.txt", body: "a", typ: tar.TypeReg},
				{name: "run.sh", body: "#!/bin/sh", typ: tar.TypeReg, mode: 0o755},
				{name: "link", link: "run.sh", typ: tar.TypeSymlink},
				{name: "hard", link: "run.sh", typ: tar.TypeLink},
			},
			status: 200,
			want:   map[string]string{"app/sub/a.txt": "a", "app/run.sh": "#!/bin/sh", "app/hard": "#!/bin/sh"},
			mode:   map[string]os.FileMode{"app/sub/a.txt": 0o750, "app/sub": 0o750, "app": 0o755},
		},
		{
			name:   "one file into an existing directory",
			params: url.Values{"path": {root + "/existing"}, "single": {"1"}},
			ents:   []tarEntry{{name: "ctx/hello.txt", body: "hi", typ: tar.TypeReg}},
			status: 200,
			want:   map[string]string{"existing/hello.txt": "hi"},
		},
		{
			name:   "one file at a new path",
			params: url.Values{"path": {root + "/deep/x/renamed.txt"}, "single": {"1"}},
			ents:   []tarEntry{{name: "hello.txt", body: "hi", typ: tar.TypeReg, mode: 0o600}},
			status: 200,
			want:   map[string]string{"deep/x/renamed.txt": "hi"},
			mode:   map[string]os.FileMode{"deep/x/renamed.txt": 0o600},
		},
		{
			name:   "dot-dot refused",
			params: url.Values{"path": {root + "/dd"}},
			ents:   []tarEntry{{name: "../escape", body: "x", typ: tar.TypeReg}},
			status: 400,
		},
		{
			name:   "relative path refused",
			params: url.Values{"path": {"rel"}},
			status: 400,
		},
		{
			name:   "bad mode refused",
			params: url.Values{"path": {root + "/m"}, "mode": {"99"}},
			status: 400,
		},
		{
			name:   "single with two entries refused",
			params: url.Values{"path": {root + "/two"}, "single": {"1"}},
			ents:   []tarEntry{{name: "a", body: "a", typ: tar.TypeReg}, {name: "b", body: "b", typ: tar.TypeReg}},
			status: 400,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := newRequest(t, "POST", ta.url+"/files/extract?"+tc.params.Encode(), tarOf(t, tc.gz, tc.ents...))
			req.Header.Set(TokenHeader, ta.token)
			resp, body := doHTTP(t, req)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, tc.status)
			}
			for p, want := range tc.want {
				got, err := os.ReadFile(filepath.Join(root, p))
				if err != nil || string(got) != want {
					t.Errorf("%s = %q, %v; want %q", p, got, err, want)
				}
			}
			for p, want := range tc.mode {
				st, err := os.Stat(filepath.Join(root, p))
				if err != nil || st.Mode().Perm() != want {
					t.Errorf("%s mode = %v, %v; want %v", p, st.Mode(), err, want)
				}
			}
		})
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(root), "escape")); err == nil {
		t.Error("an entry left the destination")
	}
	// The symlink is a symlink, the hard link shares the file.
	if l, err := os.Readlink(filepath.Join(root, "app/link")); err != nil || l != "run.sh" {
		t.Errorf("symlink = %q, %v", l, err)
	}
	a, _ := os.Stat(filepath.Join(root, "app/run.sh"))
	b, _ := os.Stat(filepath.Join(root, "app/hard"))
	if !os.SameFile(a, b) {
		t.Error("hard link is not the same file")
	}
}
