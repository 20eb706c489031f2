package redteam

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"mime/multipart"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

const agentFS = "space-agent resolves every path inside the sandbox's own file tree (gVisor); spaced never opens a sandbox's files by host path"

// traversals are path spellings that would reach the host canary p if any
// layer joined them onto a host directory.
func traversals(p string) []string {
	rel := strings.TrimPrefix(p, "/")
	return []string{
		strings.Repeat("../", 12) + rel,
		"/" + strings.Repeat("../", 12) + rel,
		"/proc/1/root" + p,
		"/proc/self/root/../../.." + p,
		"/home/user/" + strings.Repeat("..%2f", 12) + rel,
		"/home/user/....//....//....//" + rel,
		strings.Repeat(`..\`, 12) + rel,
		p + "\x00.txt",
		"~/../../.." + p,
		"//" + strings.Repeat("./", 100) + rel,
	}
}

// hostHas reports the places on the host where a file named name turned
// up: where a write that escaped would land.
func hostHas(d *harness.Daemon, id, name string) []string {
	var found []string
	repo, _ := harness.Repo() // known: the binaries were built from it
	for _, dir := range []string{"/", "/tmp", "/root", "/home/user", filepath.Dir(d.DataDir), d.DataDir,
		filepath.Join(d.DataDir, "sandboxes", id), repo, filepath.Join(repo, "test", "redteam")} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			found = append(found, filepath.Join(dir, name))
		}
	}
	return found
}

// fileFixture is a sandbox prepared with symlinks and a hard link that
// point out of the user's home.
type fileFixture struct {
	d      *harness.Daemon
	sb     *client.Sandbox
	root   string // `ls -A /` inside, sorted
	leaks  []string
	cp     *cpFixture
	linkMu sync.Mutex
}

var links = map[string]string{
	"l-root":     "/",
	"l-p1root":   "/proc/1/root",
	"l-selfroot": "/proc/self/root",
	"l-dotdot":   strings.Repeat("../", 12),
	"l-p1cwd":    "/proc/1/cwd",
}

// native calls the /v1 files API of f.sb.
func (f *fileFixture) native(method, route string, q url.Values, body []byte) (int, []byte, error) {
	u := "/v1/sandboxes/" + f.sb.ID + route
	if q != nil {
		u += "?" + q.Encode()
	}
	return f.cp.req(method, u, body, nil)
}

// e2b calls envd's routes of f.sb through the proxy with its token.
func (f *fileFixture) e2b(method, path string, body []byte, hdr map[string]string) (int, []byte, error) {
	return f.cp.envd(f.sb.ID, f.sb.AccessToken, method, path, body, hdr)
}

func multipartBody(content string) ([]byte, string) {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	fw, _ := w.CreateFormFile("file", "x")
	fw.Write([]byte(content))
	w.Close()
	return b.Bytes(), w.FormDataContentType()
}

// noHostLeak: a 5xx is a failure, and so is any canary content in body.
func (f *fileFixture) noHostLeak(st int, body []byte, err error) error {
	if err != nil {
		return err
	}
	if st >= 500 {
		return fmt.Errorf("status %d: %.300s", st, body)
	}
	return noLeak(string(body), f.leaks)
}

// wrote checks that a write to a traversal path named name landed nowhere
// on the host.
func (f *fileFixture) wroteNowhere(name string) error {
	if found := hostHas(f.d, f.sb.ID, name); len(found) > 0 {
		return fmt.Errorf("the write reached the host: %v", found)
	}
	return nil
}

// fileControl is the positive control of a file API attempt: the same
// route, with a path of the sandbox's own, does what it is for.
type fileControl struct {
	text string
	run  func(t *testing.T) error
}

// want2xx: a 2xx answer, holding want if it is not "".
func want2xx(want string) func(int, []byte, error) error {
	return func(st int, b []byte, err error) error {
		if err != nil {
			return err
		}
		if st < 200 || st > 299 || !strings.Contains(string(b), want) {
			return fmt.Errorf("status %d %.200q, want 2xx holding %q", st, b, want)
		}
		return nil
	}
}

func fileAPIControls(f *fileFixture) map[string]fileControl {
	ct := map[string]string{"Content-Type": "application/json"}
	fresh := func() string { return "/home/user/rt-ctl-" + harness.RandHex(4) }
	native := func(text, method, route string, q func() url.Values, body func() []byte, want string) fileControl {
		return fileControl{text, func(t *testing.T) error {
			var b []byte
			if body != nil {
				b = body()
			}
			return want2xx(want)(f.native(method, route, q(), b))
		}}
	}
	connect := func(rpc, field string, path func() string) fileControl {
		return fileControl{"Connect filesystem." + rpc + " of a path of the sandbox's own answers 200", func(t *testing.T) error {
			return want2xx("")(f.e2b("POST", "/filesystem.Filesystem/"+rpc, []byte(fmt.Sprintf(`{%q:%q}`, field, path())), ct))
		}}
	}
	src := func() url.Values { return url.Values{"path": {"/home/user/src2"}} }
	own := "the sandbox's own link /home/user/l-own to /home/user/realdir is followed by both APIs"
	ownLink := fileControl{own, func(t *testing.T) error {
		if err := want2xx("own-file")(f.native("GET", "/files", url.Values{"path": {"/home/user/l-own/f"}}, nil)); err != nil {
			return err
		}
		return want2xx("own-file")(f.e2b("GET", "/files?"+url.Values{"path": {"/home/user/l-own/f"}, "username": {"root"}}.Encode(), nil, nil))
	}}
	m := map[string]fileControl{
		"fs-trav-native-download": native("a download of the sandbox's /home/user/src2 returns it", "GET", "/files", src, nil, "x"),
		"fs-trav-native-stat":     native("a stat of /home/user/src2 answers 200", "GET", "/files/stat", src, nil, "src2"),
		"fs-trav-native-list":     native("a listing of /home/user shows src2", "GET", "/files/list", func() url.Values { return url.Values{"path": {"/home/user"}} }, nil, "src2"),
		"fs-trav-native-upload": {"an upload to a new file in /home/user is read back", func(t *testing.T) error {
			p := fresh()
			if err := want2xx("")(f.native("PUT", "/files", url.Values{"path": {p}}, []byte("uploaded"))); err != nil {
				return err
			}
			return want2xx("uploaded")(f.native("GET", "/files", url.Values{"path": {p}}, nil))
		}},
		"fs-trav-native-delete": {"a file uploaded to /home/user is deleted and then not found", func(t *testing.T) error {
			p := fresh()
			f.native("PUT", "/files", url.Values{"path": {p}}, []byte("x"))
			if err := want2xx("")(f.native("DELETE", "/files", url.Values{"path": {p}}, nil)); err != nil {
				return err
			}
			if st, b, _ := f.native("GET", "/files/stat", url.Values{"path": {p}}, nil); st != 404 {
				return fmt.Errorf("after the delete, stat answers %d %.200q", st, b)
			}
			return nil
		}},
		"fs-trav-native-mkdir": native("mkdir of a new directory in /home/user answers 2xx", "POST", "/files/mkdir", func() url.Values { return nil }, func() []byte { return []byte(`{"path":"` + fresh() + `"}`) }, ""),
		"fs-trav-native-move": {"a file of /home/user moves within it", func(t *testing.T) error {
			p := fresh()
			f.native("PUT", "/files", url.Values{"path": {p}}, []byte("x"))
			return want2xx("")(f.native("POST", "/files/move", nil, []byte(`{"source":"`+p+`","destination":"`+p+`-moved"}`)))
		}},
		"fs-trav-native-watch": {"a watch on /home/user delivers the event of a file made there", nil}, // in the attempt
		"fs-trav-native-cwd": {"a command with cwd /home/user runs there", func(t *testing.T) error {
			r, err := f.d.Exec(harness.Ctx(t, 20*time.Second), f.sb.ID, client.CommandRequest{Cmd: "pwd", Cwd: "/home/user"})
			if err != nil || strings.TrimSpace(r.Stdout) != "/home/user" {
				return fmt.Errorf("pwd gave %q (%v)", r.Stdout, err)
			}
			return nil
		}},
		"fs-trav-envd-download": {"an envd download of /home/user/src2 returns it", func(t *testing.T) error {
			return want2xx("x")(f.e2b("GET", "/files?"+url.Values{"path": {"/home/user/src2"}, "username": {"root"}}.Encode(), nil, nil))
		}},
		"fs-trav-envd-upload": {"an envd upload to a new file in /home/user answers 200", func(t *testing.T) error {
			body, ctype := multipartBody("uploaded")
			return want2xx("")(f.e2b("POST", "/files?"+url.Values{"path": {fresh()}, "username": {"root"}}.Encode(), body, map[string]string{"Content-Type": ctype}))
		}},
		"fs-trav-envd-compose": {"compose of /home/user/src2 into a new file of /home/user answers 200", func(t *testing.T) error {
			return want2xx("")(f.e2b("POST", "/files/compose", []byte(fmt.Sprintf(`{"source_paths":["/home/user/src2"],"destination":%q,"username":"root"}`, fresh())), ct))
		}},
		"fs-trav-envd-stat":    connect("Stat", "path", func() string { return "/home/user/src2" }),
		"fs-trav-envd-listdir": connect("ListDir", "path", func() string { return "/home/user" }),
		"fs-trav-envd-remove": {"Connect filesystem.Remove of a file uploaded to /home/user answers 200", func(t *testing.T) error {
			p := fresh()
			f.native("PUT", "/files", url.Values{"path": {p}}, []byte("x"))
			return want2xx("")(f.e2b("POST", "/filesystem.Filesystem/Remove", []byte(`{"path":"`+p+`"}`), ct))
		}},
		"fs-trav-envd-watcher":      connect("CreateWatcher", "path", func() string { return "/home/user" }),
		"fs-trav-envd-makedir-move": connect("MakeDir", "path", fresh),
		"fs-symlink-race": {"the API reads a file of the sandbox's own through /home/user/real", func(t *testing.T) error {
			return want2xx("own-file")(f.native("GET", "/files", url.Values{"path": {"/home/user/realdir/f"}}, nil))
		}},
	}
	for name := range links {
		m["fs-symlink-api-"+strings.TrimPrefix(name, "l-")] = ownLink
	}
	return m
}

func fileAPIAttempts(f *fileFixture) []attempt {
	var out []attempt
	ctls := fileAPIControls(f)
	add := func(id, desc string, run func(t *testing.T) error) {
		ctl := ctls[id]
		if ctl.run != nil {
			inner := run
			run = func(t *testing.T) error {
				if err := ctl.run(t); err != nil {
					return fmt.Errorf("control: %w", err)
				}
				return inner(t)
			}
		}
		fam := ""
		for _, p := range []string{"fs-trav-native", "fs-trav-envd", "fs-symlink-api"} {
			if strings.HasPrefix(id, p+"-") {
				fam = p
			}
		}
		out = append(out, attempt{id: id, category: "filesystem", family: fam, desc: desc, stops: agentFS, control: ctl.text, run: run})
	}
	// Reads with every traversal spelling of every host canary.
	each := func(fn func(p string) error) error {
		for _, c := range env.canary.paths() {
			for _, p := range traversals(c) {
				if err := fn(p); err != nil {
					return fmt.Errorf("path %q: %w", p, err)
				}
			}
		}
		return nil
	}
	add("fs-trav-native-download", "GET /v1/.../files?path= with ../, encoded, backslash, NUL, /proc/1/root and ~ spellings of the host canaries", func(t *testing.T) error {
		return each(func(p string) error { return f.noHostLeak(f.native("GET", "/files", url.Values{"path": {p}}, nil)) })
	})
	add("fs-trav-native-stat", "GET /v1/.../files/stat?path= with traversal spellings of the host canaries (must not be found)", func(t *testing.T) error {
		return each(func(p string) error {
			st, b, err := f.native("GET", "/files/stat", url.Values{"path": {p}}, nil)
			if err == nil && st == 200 {
				return fmt.Errorf("found: %s", b)
			}
			return f.noHostLeak(st, b, err)
		})
	})
	add("fs-trav-native-list", "GET /v1/.../files/list?path=../../../tmp&depth=3: no host canary listed", func(t *testing.T) error {
		for _, p := range []string{strings.Repeat("../", 12) + "tmp", "/proc/1/root/tmp", "/proc/self/root/../../../root", strings.Repeat("../", 12) + "var/tmp"} {
			st, b, err := f.native("GET", "/files/list", url.Values{"path": {p}, "depth": {"3"}}, nil)
			if err := f.noHostLeak(st, b, err); err != nil {
				return err
			}
			for _, c := range env.canary.paths() {
				if bytes.Contains(b, []byte(filepath.Base(c))) {
					return fmt.Errorf("listing %s shows the host canary %s", p, c)
				}
			}
		}
		return nil
	})
	add("fs-trav-native-upload", "PUT /v1/.../files?path=../../../tmp/<new> (a write that escaped would land on the host)", func(t *testing.T) error {
		for _, pre := range []string{strings.Repeat("../", 12) + "tmp/", "/proc/1/root/tmp/", "/home/user/" + strings.Repeat("..%2f", 12) + "tmp/"} {
			name := "rt-w-" + harness.RandHex(6)
			if err := f.noHostLeak(f.native("PUT", "/files", url.Values{"path": {pre + name}}, []byte("escaped"))); err != nil {
				return err
			}
			if err := f.wroteNowhere(name); err != nil {
				return err
			}
		}
		return nil
	})
	add("fs-trav-native-delete", "DELETE /v1/.../files?path= with traversal spellings of the host canaries (they must survive)", func(t *testing.T) error {
		if err := each(func(p string) error { return f.noHostLeak(f.native("DELETE", "/files", url.Values{"path": {p}}, nil)) }); err != nil {
			return err
		}
		return env.canary.check()
	})
	add("fs-trav-native-mkdir", "POST /v1/.../files/mkdir {path: ../../../tmp/<new>}", func(t *testing.T) error {
		name := "rt-d-" + harness.RandHex(6)
		if err := f.noHostLeak(f.native("POST", "/files/mkdir", nil, []byte(`{"path":"`+strings.Repeat("../", 12)+"tmp/"+name+`"}`))); err != nil {
			return err
		}
		return f.wroteNowhere(name)
	})
	add("fs-trav-native-move", "POST /v1/.../files/move from a host canary's traversal path, and to ../../../tmp/<new>", func(t *testing.T) error {
		if err := each(func(p string) error {
			return f.noHostLeak(f.native("POST", "/files/move", nil, []byte(fmt.Sprintf(`{"source":%q,"destination":"/home/user/stolen"}`, p))))
		}); err != nil {
			return err
		}
		name := "rt-m-" + harness.RandHex(6)
		f.native("PUT", "/files", url.Values{"path": {"/home/user/src"}}, []byte("x"))
		if err := f.noHostLeak(f.native("POST", "/files/move", nil, []byte(`{"source":"/home/user/src","destination":"`+strings.Repeat("../", 12)+"tmp/"+name+`"}`))); err != nil {
			return err
		}
		return f.wroteNowhere(name)
	})
	add("fs-trav-native-watch", "GET /v1/.../files/watch?path=../../../tmp (watch the host's /tmp)", func(t *testing.T) error {
		// watchSees opens a watch on path, makes the files in order (host
		// ones on the host, the others inside) and reads events until
		// want is seen; it returns the names seen before it.
		watchSees := func(path, want string, makeFiles func()) ([]string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			w, err := f.d.Client.Watch(ctx, f.sb.ID, path, false)
			if err != nil {
				return nil, err
			}
			defer w.Close()
			makeFiles()
			var seen []string
			for {
				ev, err := w.Next()
				if err != nil {
					return seen, fmt.Errorf("no event for %s before %v (saw %v)", want, err, seen)
				}
				if strings.Contains(ev.Name, want) {
					return seen, nil
				}
				seen = append(seen, ev.Name)
			}
		}
		// Control: a watch on an allowed directory delivers the event.
		own := "rt-own-" + harness.RandHex(4)
		if _, err := watchSees("/home/user", own, func() { sh(t, f.d, f.sb.ID, "user", "touch /home/user/"+own) }); err != nil {
			return fmt.Errorf("control: a watch on /home/user: %w", err)
		}
		host, inside := "rt-canary-watch-"+harness.RandHex(4), "rt-inside-watch-"+harness.RandHex(4)
		defer os.Remove("/tmp/" + host)
		seen, err := watchSees(strings.Repeat("../", 12)+"tmp", inside, func() {
			os.WriteFile("/tmp/"+host, nil, 0o644)
			sh(t, f.d, f.sb.ID, "root", "touch /tmp/"+inside)
		})
		var apiErr *client.APIError
		switch {
		case errors.As(err, &apiErr) && apiErr.Status >= 400 && apiErr.Status < 500:
			t.Logf("refused: %v", err)
			return nil
		case err != nil:
			return fmt.Errorf("the watch neither was refused by the server nor watched the sandbox's /tmp: %w", err)
		}
		for _, n := range seen {
			if strings.Contains(n, host) {
				return fmt.Errorf("the watch saw the host's /tmp/%s", host)
			}
		}
		t.Logf("the watch is on the sandbox's own /tmp (it saw %s, made inside after the host's file)", inside)
		return nil
	})
	add("fs-trav-native-cwd", "run a command with cwd ../../../../ and /proc/1/root/.. and list it", func(t *testing.T) error {
		for _, cwd := range []string{strings.Repeat("../", 12), "/proc/1/root/..", "/proc/self/cwd/../../.."} {
			r, err := f.d.Exec(harness.Ctx(t, 20*time.Second), f.sb.ID, client.CommandRequest{Cmd: "pwd; ls -A", Cwd: cwd})
			if err != nil {
				continue
			}
			if err := noLeak(r.Stdout, f.leaks); err != nil {
				return err
			}
			if strings.Contains(r.Stdout, "rt-canary-") {
				return fmt.Errorf("cwd %s lists a host canary: %s", cwd, r.Stdout)
			}
		}
		return nil
	})
	// envd (E2B) routes.
	add("fs-trav-envd-download", "envd GET /files?path= with traversal spellings of the host canaries", func(t *testing.T) error {
		return each(func(p string) error {
			return f.noHostLeak(f.e2b("GET", "/files?"+url.Values{"path": {p}, "username": {"root"}}.Encode(), nil, nil))
		})
	})
	add("fs-trav-envd-upload", "envd POST /files?path=../../../tmp/<new> (multipart)", func(t *testing.T) error {
		name := "rt-w-" + harness.RandHex(6)
		body, ct := multipartBody("escaped")
		if err := f.noHostLeak(f.e2b("POST", "/files?"+url.Values{"path": {strings.Repeat("../", 12) + "tmp/" + name}, "username": {"root"}}.Encode(), body, map[string]string{"Content-Type": ct})); err != nil {
			return err
		}
		return f.wroteNowhere(name)
	})
	add("fs-trav-envd-compose", "envd POST /files/compose from host canaries to ../../../tmp/<new>", func(t *testing.T) error {
		name := "rt-c-" + harness.RandHex(6)
		var srcs []string
		for _, c := range env.canary.paths() {
			srcs = append(srcs, strings.Repeat("../", 12)+strings.TrimPrefix(c, "/"))
		}
		body := fmt.Sprintf(`{"source_paths":[%q],"destination":%q,"username":"root"}`, srcs[0], strings.Repeat("../", 12)+"tmp/"+name)
		if err := f.noHostLeak(f.e2b("POST", "/files/compose", []byte(body), map[string]string{"Content-Type": "application/json"})); err != nil {
			return err
		}
		return f.wroteNowhere(name)
	})
	connect := func(rpc, field string) func(t *testing.T) error {
		return func(t *testing.T) error {
			return each(func(p string) error {
				return f.noHostLeak(f.e2b("POST", "/filesystem.Filesystem/"+rpc, []byte(fmt.Sprintf(`{%q:%q}`, field, p)), map[string]string{"Content-Type": "application/json"}))
			})
		}
	}
	add("fs-trav-envd-stat", "Connect filesystem.Stat with traversal spellings of the host canaries", connect("Stat", "path"))
	add("fs-trav-envd-listdir", "Connect filesystem.ListDir with traversal spellings", connect("ListDir", "path"))
	add("fs-trav-envd-remove", "Connect filesystem.Remove with traversal spellings of the host canaries (they must survive)", func(t *testing.T) error {
		if err := connect("Remove", "path")(t); err != nil {
			return err
		}
		return env.canary.check()
	})
	add("fs-trav-envd-watcher", "Connect filesystem.CreateWatcher on traversal spellings", connect("CreateWatcher", "path"))
	add("fs-trav-envd-makedir-move", "Connect filesystem.MakeDir and Move to ../../../tmp/<new>", func(t *testing.T) error {
		name := "rt-d-" + harness.RandHex(6)
		ct := map[string]string{"Content-Type": "application/json"}
		if err := f.noHostLeak(f.e2b("POST", "/filesystem.Filesystem/MakeDir", []byte(`{"path":"`+strings.Repeat("../", 12)+"tmp/"+name+`"}`), ct)); err != nil {
			return err
		}
		name2 := "rt-m-" + harness.RandHex(6)
		if err := f.noHostLeak(f.e2b("POST", "/filesystem.Filesystem/Move", []byte(`{"source":"/home/user/src2","destination":"`+strings.Repeat("../", 12)+"tmp/"+name2+`"}`), ct)); err != nil {
			return err
		}
		if err := f.wroteNowhere(name); err != nil {
			return err
		}
		return f.wroteNowhere(name2)
	})
	// Links made inside the sandbox, used through the APIs.
	for _, name := range slices.Sorted(maps.Keys(links)) {
		target := links[name]
		add("fs-symlink-api-"+strings.TrimPrefix(name, "l-"), "inside, ln -s "+target+" /home/user/"+name+"; then read the host canaries, list, and write through it with both APIs", func(t *testing.T) error {
			l := "/home/user/" + name
			for _, c := range env.canary.paths() {
				if err := f.noHostLeak(f.native("GET", "/files", url.Values{"path": {l + c}}, nil)); err != nil {
					return err
				}
				if err := f.noHostLeak(f.e2b("GET", "/files?"+url.Values{"path": {l + c}, "username": {"root"}}.Encode(), nil, nil)); err != nil {
					return err
				}
			}
			if name != "l-p1cwd" {
				st, b, err := f.native("GET", "/files/list", url.Values{"path": {l}}, nil)
				if err := f.noHostLeak(st, b, err); err != nil {
					return err
				}
				if st == 200 && bytes.Contains(b, []byte("rt-canary-")) {
					return fmt.Errorf("listing %s shows a host canary", l)
				}
			}
			w := "rt-sl-" + harness.RandHex(6)
			f.native("PUT", "/files", url.Values{"path": {l + "/tmp/" + w}}, []byte("through-link"))
			body, ct := multipartBody("through-link")
			f.e2b("POST", "/files?"+url.Values{"path": {l + "/tmp/" + w + "e"}, "username": {"root"}}.Encode(), body, map[string]string{"Content-Type": ct})
			if err := f.wroteNowhere(w); err != nil {
				return err
			}
			return f.wroteNowhere(w + "e")
		})
	}
	add("fs-hardlink-api", "inside, hard-link /proc/1/root/etc/passwd into the home and read it through the API: it must be the sandbox's file, not the host's", func(t *testing.T) error {
		sh(t, f.d, f.sb.ID, "root", "ln /proc/1/root/etc/passwd /home/user/hl 2>/dev/null || ln /etc/passwd /home/user/hl")
		st, b, err := f.native("GET", "/files", url.Values{"path": {"/home/user/hl"}}, nil)
		if err := f.noHostLeak(st, b, err); err != nil {
			return err
		}
		inside := sh(t, f.d, f.sb.ID, "root", "cat /etc/passwd")
		host, _ := os.ReadFile("/etc/passwd")
		if string(b) != inside {
			return fmt.Errorf("the API returned %d bytes that are not the sandbox's /etc/passwd", len(b))
		}
		if string(host) != inside && string(b) == string(host) {
			return fmt.Errorf("the API returned the host's /etc/passwd")
		}
		return nil
	})
	add("fs-symlink-race", "swap /home/user/race between a directory and a symlink to / and /proc/1/root 1000s of times while the API reads and writes through it", func(t *testing.T) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := f.d.Client.StartBackground(ctx, f.sb.ID, client.CommandRequest{User: "root", Tag: "race", Cmd: `mkdir -p /home/user/real/tmp; end=$(($(date +%s)+6)); while [ $(date +%s) -lt $end ]; do ln -sfn / /home/user/race; ln -sfn /proc/1/root /home/user/race; rm -f /home/user/race; ln -sfn /home/user/real /home/user/race; done`}); err != nil {
			return err
		}
		name := "rt-race-" + harness.RandHex(6)
		deadline := time.Now().Add(5 * time.Second)
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					for _, c := range env.canary.paths() {
						if err := f.noHostLeak(f.native("GET", "/files", url.Values{"path": {"/home/user/race" + c}}, nil)); err != nil {
							errs <- err
							return
						}
					}
					f.native("PUT", "/files", url.Values{"path": {"/home/user/race/tmp/" + name}}, []byte("raced"))
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
		return f.wroteNowhere(name)
	})
	return out
}

func TestFileAPI(t *testing.T) {
	d := need(t)
	t.Parallel()
	sb := d.NewSandbox(t, client.CreateSandboxRequest{})
	// The error messages echo the requested paths, which name the canaries
	// and the data directory; what must never come back is their content.
	n := getNeighbour(t, d)
	leaks := append(env.canary.contents(), d.APIKey, n.marker, n.sb.AccessToken)
	f := &fileFixture{d: d, sb: sb, leaks: leaks, cp: &cpFixture{d: d}}
	var cmd strings.Builder
	for name, target := range links {
		fmt.Fprintf(&cmd, "ln -s %s /home/user/%s; ", target, name)
	}
	sh(t, d, sb.ID, "root", cmd.String()+"echo x > /home/user/src2; mkdir -p /home/user/realdir; echo own-file > /home/user/realdir/f; ln -s /home/user/realdir /home/user/l-own")
	for _, a := range fileAPIAttempts(f) {
		t.Run(a.id, func(t *testing.T) {
			if err := a.run(t); err != nil {
				t.Errorf("%s: the attack was not stopped: %v", a.desc, err)
			}
		})
	}
	guard(t, d)
}
