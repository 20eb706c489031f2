package agent

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/spacesandbox/space/api/envd/filesystem"
)

func TestFilesystemRPCs(t *testing.T) {
	ta := newTestAgent(t, agentOpts{})
	ctx := ctxTimeout(t, 10*time.Second)
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "tree/sub/deeper"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "tree/a.txt"), []byte("hello"), 0o640))
	must(os.WriteFile(filepath.Join(dir, "tree/sub/b.txt"), []byte("b"), 0o644))
	must(os.Symlink(filepath.Join(dir, "tree"), filepath.Join(dir, "link")))
	must(os.Symlink("a.txt", filepath.Join(dir, "tree/ln")))
	must(os.Symlink("tree/ln", filepath.Join(dir, "chain")))
	must(os.Symlink("nowhere", filepath.Join(dir, "broken")))
	must(os.Symlink("loop", filepath.Join(dir, "loop")))

	t.Run("stat", func(t *testing.T) {
		tests := []struct {
			path    string
			typ     filesystem.FileType
			mode    uint32
			perms   string
			size    int64
			target  string
			link    bool
			errCode connect.Code
		}{
			{path: filepath.Join(dir, "tree/a.txt"), typ: filesystem.FileType_FILE_TYPE_FILE, mode: 0o640, perms: "-rw-r-----", size: 5},
			{path: filepath.Join(dir, "tree/sub"), typ: filesystem.FileType_FILE_TYPE_DIRECTORY, mode: 0o755, perms: "drwxr-xr-x"},
			// envd's symlinks: the target resolved to the end, absolute, with
			// its type and mode; a broken or looping link names itself.
			{path: filepath.Join(dir, "tree/ln"), typ: filesystem.FileType_FILE_TYPE_FILE, mode: 0o640, perms: "Lrwxrwxrwx", target: filepath.Join(dir, "tree/a.txt"), link: true},
			{path: filepath.Join(dir, "chain"), typ: filesystem.FileType_FILE_TYPE_FILE, mode: 0o640, perms: "Lrwxrwxrwx", target: filepath.Join(dir, "tree/a.txt"), link: true},
			{path: filepath.Join(dir, "link"), typ: filesystem.FileType_FILE_TYPE_DIRECTORY, mode: 0o755, perms: "Lrwxrwxrwx", target: filepath.Join(dir, "tree"), link: true},
			{path: filepath.Join(dir, "broken"), typ: filesystem.FileType_FILE_TYPE_UNSPECIFIED, perms: "Lrwxrwxrwx", target: filepath.Join(dir, "broken"), link: true},
			{path: filepath.Join(dir, "loop"), typ: filesystem.FileType_FILE_TYPE_UNSPECIFIED, perms: "Lrwxrwxrwx", target: filepath.Join(dir, "loop"), link: true},
			{path: filepath.Join(dir, "missing"), errCode: connect.CodeNotFound},
		}
		for _, tt := range tests {
			resp, err := ta.fs.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: tt.path}))
			if tt.errCode != 0 {
				if connect.CodeOf(err) != tt.errCode {
					t.Errorf("%s: err %v", tt.path, err)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			e := resp.Msg.GetEntry()
			if e.GetType() != tt.typ || e.GetMode() != tt.mode || e.GetPermissions() != tt.perms || e.GetPath() != tt.path ||
				e.GetName() != filepath.Base(tt.path) || e.GetSymlinkTarget() != tt.target || e.GetIsSymlink() != tt.link ||
				(e.SymlinkTarget != nil) != tt.link || e.GetOwner() != "root" || e.GetGroup() != "root" ||
				(tt.size != 0 && e.GetSize() != tt.size) || e.GetModifiedTime() == nil {
				t.Errorf("%s: entry %v", tt.path, e)
			}
		}
	})

	t.Run("makedir", func(t *testing.T) {
		tests := []struct {
			path string
			code connect.Code
		}{
			{path: filepath.Join(dir, "new/with/parents")},
			{path: filepath.Join(dir, "new/with/parents"), code: connect.CodeAlreadyExists},
			{path: filepath.Join(dir, "tree/a.txt"), code: connect.CodeInvalidArgument},
		}
		for _, tt := range tests {
			resp, err := ta.fs.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: tt.path}))
			if connect.CodeOf(err) != tt.code && !(tt.code == 0 && err == nil) {
				t.Errorf("%s: err %v, want %v", tt.path, err, tt.code)
			}
			if tt.code == 0 && err == nil && resp.Msg.GetEntry().GetType() != filesystem.FileType_FILE_TYPE_DIRECTORY {
				t.Errorf("entry %v", resp.Msg.GetEntry())
			}
		}
	})

	t.Run("listdir", func(t *testing.T) {
		tests := []struct {
			path  string
			depth uint32
			want  []string
			code  connect.Code
		}{
			{path: filepath.Join(dir, "tree"), depth: 0, want: []string{"a.txt", "ln", "sub"}},
			{path: filepath.Join(dir, "tree"), depth: 2, want: []string{"a.txt", "ln", "sub", "sub/b.txt", "sub/deeper"}},
			{path: filepath.Join(dir, "link"), depth: 1, want: []string{"a.txt", "ln", "sub"}},
			{path: filepath.Join(dir, "tree/a.txt"), code: connect.CodeInvalidArgument},
			{path: filepath.Join(dir, "missing"), code: connect.CodeNotFound},
		}
		for _, tt := range tests {
			resp, err := ta.fs.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: tt.path, Depth: tt.depth}))
			if tt.code != 0 {
				if connect.CodeOf(err) != tt.code {
					t.Errorf("%s: err %v", tt.path, err)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range resp.Msg.GetEntries() {
				rel, _ := filepath.Rel(tt.path, e.GetPath())
				if !strings.HasPrefix(e.GetPath(), tt.path+"/") {
					t.Errorf("entry path %s not under %s", e.GetPath(), tt.path)
				}
				got = append(got, rel)
			}
			sort.Strings(got)
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("%s depth %d: %v, want %v", tt.path, tt.depth, got, tt.want)
			}
		}
	})

	t.Run("move", func(t *testing.T) {
		src, dst := filepath.Join(dir, "tree/sub/b.txt"), filepath.Join(dir, "moved/to/b2.txt")
		resp, err := ta.fs.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: src, Destination: dst}))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Msg.GetEntry().GetPath() != dst {
			t.Errorf("entry %v", resp.Msg.GetEntry())
		}
		if b, err := os.ReadFile(dst); err != nil || string(b) != "b" {
			t.Errorf("moved file: %q %v", b, err)
		}
		_, err = ta.fs.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: src, Destination: dst}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("missing source: %v", err)
		}
	})

	t.Run("remove", func(t *testing.T) {
		for _, p := range []string{filepath.Join(dir, "tree"), filepath.Join(dir, "never-existed")} {
			if _, err := ta.fs.Remove(ctx, connect.NewRequest(&filesystem.RemoveRequest{Path: p})); err != nil {
				t.Errorf("remove %s: %v", p, err)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "tree")); !os.IsNotExist(err) {
			t.Errorf("tree still there: %v", err)
		}
	})

	t.Run("home and tilde", func(t *testing.T) {
		home, _ := os.UserHomeDir()
		for _, p := range []string{"~", "", "."} {
			resp, err := ta.fs.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: p}))
			if err != nil || resp.Msg.GetEntry().GetPath() != home {
				t.Errorf("%q: %v %v", p, resp, err)
			}
		}
	})
}

func TestWatchDir(t *testing.T) {
	ta := newTestAgent(t, agentOpts{})
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "existing"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		recursive bool
		act       func()
		want      string // "TYPE name" that must show up
	}{
		{name: "file", act: func() { _ = os.WriteFile(filepath.Join(dir, "f.txt"), []byte("x"), 0o644) }, want: "EVENT_TYPE_CREATE f.txt"},
		{name: "recursive existing", recursive: true, act: func() { _ = os.WriteFile(filepath.Join(dir, "existing/g.txt"), []byte("x"), 0o644) }, want: "EVENT_TYPE_CREATE existing/g.txt"},
		{name: "recursive new dir", recursive: true, act: func() {
			_ = os.Mkdir(filepath.Join(dir, "nd"), 0o755)
			time.Sleep(100 * time.Millisecond)
			_ = os.WriteFile(filepath.Join(dir, "nd/h.txt"), []byte("x"), 0o644)
		}, want: "EVENT_TYPE_CREATE nd/h.txt"},
		// A tree made elsewhere and moved in: its contents never had a
		// watch when they were made, and are reported as created.
		{name: "recursive tree moved in", recursive: true, act: func() {
			out := t.TempDir()
			_ = os.MkdirAll(filepath.Join(out, "tree/deep"), 0o755)
			_ = os.WriteFile(filepath.Join(out, "tree/deep/i.txt"), []byte("x"), 0o644)
			_ = os.Rename(filepath.Join(out, "tree"), filepath.Join(dir, "tree"))
		}, want: "EVENT_TYPE_CREATE tree/deep/i.txt"},
		// Its files were written before any watch saw them: a client
		// waiting for their WRITE (E2B's SDK tests do) must get one.
		{name: "recursive tree moved in, written", recursive: true, act: func() {
			out := t.TempDir()
			_ = os.MkdirAll(filepath.Join(out, "wtree/deep"), 0o755)
			_ = os.WriteFile(filepath.Join(out, "wtree/deep/k.txt"), []byte("x"), 0o644)
			_ = os.Rename(filepath.Join(out, "wtree"), filepath.Join(dir, "wtree"))
		}, want: "EVENT_TYPE_WRITE wtree/deep/k.txt"},
		// mkdir -p two levels at once, then a write at once: the
		// directories' watches may come after the write.
		{name: "recursive mkdir -p then write", recursive: true, act: func() {
			_ = os.MkdirAll(filepath.Join(dir, "p/q"), 0o755)
			_ = os.WriteFile(filepath.Join(dir, "p/q/j.txt"), []byte("x"), 0o644)
		}, want: "EVENT_TYPE_WRITE p/q/j.txt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 5*time.Second)
			stream, err := ta.fs.WatchDir(ctx, connect.NewRequest(&filesystem.WatchDirRequest{Path: dir, Recursive: tt.recursive, IncludeEntry: true}))
			if err != nil {
				t.Fatal(err)
			}
			if !stream.Receive() || stream.Msg().GetStart() == nil {
				t.Fatalf("first message is not start: %v", stream.Err())
			}
			tt.act()
			var seen []string
			for stream.Receive() {
				ev := stream.Msg().GetFilesystem()
				if ev == nil {
					continue
				}
				s := ev.GetType().String() + " " + ev.GetName()
				seen = append(seen, s)
				if ev.GetType() == filesystem.EventType_EVENT_TYPE_CREATE && ev.GetEntry().GetPath() != filepath.Join(dir, ev.GetName()) {
					t.Errorf("entry %v for %s", ev.GetEntry(), s)
				}
				if s == tt.want {
					return
				}
			}
			t.Fatalf("never saw %q; saw %v (%v)", tt.want, seen, stream.Err())
		})
	}

	t.Run("errors", func(t *testing.T) {
		for path, code := range map[string]connect.Code{filepath.Join(dir, "missing"): connect.CodeNotFound, filepath.Join(dir, "f.txt"): connect.CodeInvalidArgument} {
			stream, err := ta.fs.WatchDir(ctxTimeout(t, 5*time.Second), connect.NewRequest(&filesystem.WatchDirRequest{Path: path}))
			if err == nil {
				stream.Receive()
				err = stream.Err()
			}
			if connect.CodeOf(err) != code {
				t.Errorf("%s: %v", path, err)
			}
		}
	})

	t.Run("keepalive", func(t *testing.T) {
		req := connect.NewRequest(&filesystem.WatchDirRequest{Path: dir})
		req.Header().Set("Keepalive-Ping-Interval", "0.05")
		stream, err := ta.fs.WatchDir(ctxTimeout(t, 5*time.Second), req)
		if err != nil {
			t.Fatal(err)
		}
		stream.Receive() // start
		if !stream.Receive() || stream.Msg().GetKeepalive() == nil {
			t.Fatalf("no keepalive: %v %v", stream.Msg(), stream.Err())
		}
	})
}

func TestPollWatcher(t *testing.T) {
	ta := newTestAgent(t, agentOpts{})
	ctx := ctxTimeout(t, 5*time.Second)
	dir := t.TempDir()
	cw, err := ta.fs.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: dir}))
	if err != nil {
		t.Fatal(err)
	}
	id := cw.Msg.GetWatcherId()
	if err := os.WriteFile(filepath.Join(dir, "p.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	var names []string
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline) && len(names) == 0; time.Sleep(20 * time.Millisecond) {
		resp, err := ta.fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range resp.Msg.GetEvents() {
			names = append(names, ev.GetName())
		}
	}
	if len(names) == 0 || names[0] != "p.txt" {
		t.Fatalf("events %v", names)
	}
	if _, err := ta.fs.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
	for _, call := range []func() error{
		func() error {
			_, err := ta.fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: id}))
			return err
		},
		func() error {
			_, err := ta.fs.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: id}))
			return err
		},
	} {
		if err := call(); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("removed watcher: %v", err)
		}
	}
}
