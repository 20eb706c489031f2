package redteam

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// Volumes: a sandbox writes what it likes into a volume, and the host
// reads and writes the same files (the content APIs, backups). Nothing a
// sandbox plants there (symlinks out, devices, set-user-ID programs, races)
// may make the host read, write or reveal a host path.

const volumeStops = "volume: every content call resolves its path with os.Root under the volume's root (\"..\" stops there, a symlink out is refused), the volume is mounted nosuid,nodev on the host, and no answer names a host path"

// volFixture is a volume held read-write by the attacker's sandbox.
type volFixture struct {
	d     *harness.Daemon
	cp    *cpFixture
	vol   *client.Volume
	token string // the volume's E2B content token
	sb    *client.Sandbox
	leaks []string
}

// native calls /v1/volumes/{vol}<route>.
func (f *volFixture) native(method, route string, q url.Values, body []byte) (int, []byte, error) {
	u := "/v1/volumes/" + f.vol.ID + route
	if q != nil {
		u += "?" + q.Encode()
	}
	return f.cp.req(method, u, body, nil)
}

// e2b calls E2B's volume content API with the volume's token.
func (f *volFixture) e2b(method, route string, q url.Values, body []byte) (int, []byte, error) {
	return f.cp.req(method, "/volumecontent/"+f.vol.ID+route+"?"+q.Encode(), body, map[string]string{"Authorization": "Bearer " + f.token})
}

// clean: no 5xx, nothing secret or host-specific in the answer.
func (f *volFixture) clean(st int, b []byte, err error) error {
	if err != nil {
		return err
	}
	if st >= 500 && st != 507 {
		return fmt.Errorf("status %d: %.300s", st, b)
	}
	if strings.Contains(string(b), f.d.DataDir) {
		return fmt.Errorf("the answer names spaced's data dir: %.300s", b)
	}
	return noLeak(string(b), f.leaks)
}

// every runs fn on each content route of both APIs with path p.
func (f *volFixture) every(p string, fn func(what string, st int, b []byte, err error) error) error {
	q := url.Values{"path": {p}}
	calls := []struct {
		what string
		do   func() (int, []byte, error)
	}{
		{"native read", func() (int, []byte, error) { return f.native("GET", "/files", q, nil) }},
		{"native stat", func() (int, []byte, error) { return f.native("GET", "/files/stat", q, nil) }},
		{"native list", func() (int, []byte, error) { return f.native("GET", "/files/list", q, nil) }},
		{"e2b read", func() (int, []byte, error) { return f.e2b("GET", "/file", q, nil) }},
		{"e2b stat", func() (int, []byte, error) { return f.e2b("GET", "/path", q, nil) }},
		{"e2b dir", func() (int, []byte, error) { return f.e2b("GET", "/dir", q, nil) }},
	}
	for _, c := range calls {
		st, b, err := c.do()
		if err := fn(c.what, st, b, err); err != nil {
			return fmt.Errorf("%s %q: %w", c.what, p, err)
		}
	}
	return nil
}

// writes tries every writing route at p, each with a fresh name marker
// under it; it returns the markers.
func (f *volFixture) writes(p string) []string {
	var names []string
	fresh := func() string {
		n := "rt-vol-" + harness.RandHex(6)
		names = append(names, n)
		return strings.TrimSuffix(p, "/") + "/" + n
	}
	f.native("PUT", "/files", url.Values{"path": {fresh()}}, []byte("escaped"))
	f.native("POST", "/files/mkdir", nil, []byte(fmt.Sprintf(`{"path":%q,"parents":true}`, fresh())))
	f.e2b("PUT", "/file", url.Values{"path": {fresh()}}, []byte("escaped"))
	f.e2b("POST", "/dir", url.Values{"path": {fresh()}, "force": {"true"}}, nil)
	f.e2b("PATCH", "/path", url.Values{"path": {p}}, []byte(`{"mode":511,"uid":0}`))
	return names
}

func volumeAttempts(f *volFixture) []attempt {
	var out []attempt
	add := func(id, desc, control string, run func(t *testing.T) error) {
		out = append(out, attempt{id: id, category: "filesystem", family: "fs-volume", desc: desc, stops: volumeStops, control: control, run: run})
	}
	canaries := func() []string {
		if env.canary == nil {
			return nil
		}
		return env.canary.paths()
	}
	add("fs-volume-symlink-out", "inside, plant symlinks in a volume to each host canary (absolute, ../ chains, /proc/1/root/...) and to /, then read, stat, list, write, chmod and remove through them with both volume content APIs",
		"a symlink inside the volume to a file of the volume is read through both APIs",
		func(t *testing.T) error {
			var cmd strings.Builder
			cmd.WriteString("cd /vol && echo inside > target && ln -sfn target ok && ln -sfn / l-root && ln -sfn /proc/1/root l-p1root && ln -sfn " + strings.Repeat("../", 12) + " l-up; ")
			for i, c := range canaries() {
				fmt.Fprintf(&cmd, "ln -sfn %s c%d; ln -sfn %s%s r%d; ", c, i, strings.Repeat("../", 12), strings.TrimPrefix(c, "/"), i)
			}
			sh(t, f.d, f.sb.ID, "root", cmd.String())
			// Control: a link inside the volume is followed.
			if err := want2xx("inside")(f.native("GET", "/files", url.Values{"path": {"/ok"}}, nil)); err != nil {
				return fmt.Errorf("control: %w", err)
			}
			if err := want2xx("inside")(f.e2b("GET", "/file", url.Values{"path": {"/ok"}}, nil)); err != nil {
				return fmt.Errorf("control: %w", err)
			}
			var paths []string
			for i, c := range canaries() {
				paths = append(paths, fmt.Sprintf("/c%d", i), fmt.Sprintf("/r%d", i), "/l-root"+c, "/l-p1root"+c, "/l-up"+c)
			}
			for _, p := range paths {
				if err := f.every(p, func(_ string, st int, b []byte, err error) error { return f.clean(st, b, err) }); err != nil {
					return err
				}
				for _, n := range f.writes(p) {
					if found := hostHas(f.d, f.sb.ID, n); len(found) > 0 {
						return fmt.Errorf("a write through %s reached the host: %v", p, found)
					}
				}
			}
			for _, l := range []string{"/l-root", "/l-p1root", "/l-up"} {
				st, b, err := f.native("GET", "/files/list", url.Values{"path": {l}}, nil)
				if err := f.clean(st, b, err); err != nil {
					return err
				}
				if st == 200 && strings.Contains(string(b), "rt-canary-") {
					return fmt.Errorf("listing %s shows a host canary", l)
				}
				f.native("DELETE", "/files", url.Values{"path": {l + "/tmp"}}, nil)
			}
			return env.canary.check()
		})
	add("fs-volume-traversal", "every traversal spelling of every host canary as a path of both volume content APIs (reads, writes, removes)",
		"the same routes with a path of the volume's own answer 2xx",
		func(t *testing.T) error {
			if err := want2xx("")(f.native("GET", "/files/stat", url.Values{"path": {"/target"}}, nil)); err != nil {
				return fmt.Errorf("control: %w", err)
			}
			for _, c := range canaries() {
				for _, p := range traversals(c) {
					if err := f.every(p, func(_ string, st int, b []byte, err error) error { return f.clean(st, b, err) }); err != nil {
						return err
					}
					for _, n := range f.writes(p) {
						if found := hostHas(f.d, f.sb.ID, n); len(found) > 0 {
							return fmt.Errorf("a write to %q reached the host: %v", p, found)
						}
					}
					f.native("DELETE", "/files", url.Values{"path": {p}}, nil)
					f.e2b("DELETE", "/path", url.Values{"path": {p}}, nil)
				}
			}
			return env.canary.check()
		})
	add("fs-volume-symlink-race", "swap a directory of the volume for symlinks to / and /proc/1/root thousands of times while both content APIs read and write through it",
		"a file of the volume is read through the directory while it is one",
		func(t *testing.T) error {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := f.d.Client.StartBackground(ctx, f.sb.ID, client.CommandRequest{User: "root", Tag: "volrace", Cmd: `mkdir -p /vol/real/tmp; echo own > /vol/real/f; end=$(($(date +%s)+6)); while [ $(date +%s) -lt $end ]; do ln -sfn / /vol/race; ln -sfn /proc/1/root /vol/race; rm -f /vol/race; ln -sfn real /vol/race; done`}); err != nil {
				return err
			}
			name := "rt-volrace-" + harness.RandHex(6)
			deadline := time.Now().Add(5 * time.Second)
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for range 4 {
				wg.Go(func() {
					for time.Now().Before(deadline) {
						for _, c := range canaries() {
							if err := f.clean(f.native("GET", "/files", url.Values{"path": {"/race" + c}}, nil)); err != nil {
								errs <- err
								return
							}
							if err := f.clean(f.e2b("GET", "/file", url.Values{"path": {"/race" + c}}, nil)); err != nil {
								errs <- err
								return
							}
						}
						f.native("PUT", "/files", url.Values{"path": {"/race/tmp/" + name}}, []byte("raced"))
						f.e2b("PUT", "/file", url.Values{"path": {"/race/tmp/" + name}}, []byte("raced"))
					}
				})
			}
			wg.Wait()
			close(errs)
			if err := <-errs; err != nil {
				return err
			}
			if found := hostHas(f.d, f.sb.ID, name); len(found) > 0 {
				return fmt.Errorf("the write reached the host: %v", found)
			}
			return want2xx("own")(f.native("GET", "/files", url.Values{"path": {"/real/f"}}, nil))
		})
	add("fs-volume-mount-paths", "create sandboxes that mount a volume over the agent and system directories, with .. and // spellings, over /, and with volume names shaped as paths",
		"the same volume mounted at /home/user/data makes a sandbox",
		func(t *testing.T) error {
			ctx := harness.Ctx(t, time.Minute)
			ctl, err := f.d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Volumes: []client.VolumeMount{{Name: f.vol.Name, Path: "/home/user/data", ReadOnly: true}}})
			if err != nil {
				return fmt.Errorf("control: %v", err)
			}
			f.d.Client.KillSandbox(ctx, ctl.ID)
			for _, m := range []client.VolumeMount{
				{Name: f.vol.Name, Path: "/usr/local/bin", ReadOnly: true}, {Name: f.vol.Name, Path: "/", ReadOnly: true},
				{Name: f.vol.Name, Path: "/proc", ReadOnly: true}, {Name: f.vol.Name, Path: "/etc", ReadOnly: true},
				{Name: f.vol.Name, Path: "/run", ReadOnly: true}, {Name: f.vol.Name, Path: "/home/user/../../usr/local/bin", ReadOnly: true},
				{Name: f.vol.Name, Path: "//usr/local/bin", ReadOnly: true}, {Name: f.vol.Name, Path: "/lib64", ReadOnly: true},
				{Name: f.vol.Name, Path: "/var", ReadOnly: true}, {Name: f.vol.Name, Path: "/dev/shm", ReadOnly: true},
				{Name: "../../../" + f.vol.ID, Path: "/data", ReadOnly: true}, {Name: f.d.DataDir, Path: "/data", ReadOnly: true},
			} {
				sb, err := f.d.Client.CreateSandbox(ctx, client.CreateSandboxRequest{Volumes: []client.VolumeMount{m}})
				if err == nil {
					f.d.Client.KillSandbox(ctx, sb.ID)
					return fmt.Errorf("mount %+v made sandbox %s", m, sb.ID)
				}
				if !client.IsInvalidArgument(err) {
					return fmt.Errorf("mount %+v: %v, want a 400", m, err)
				}
				if strings.Contains(err.Error(), f.d.DataDir+"/") {
					return fmt.Errorf("mount %+v: the error names a host path: %v", m, err)
				}
			}
			return nil
		})
	add("fs-volume-host-path", "look for the volume's host path from inside (mount tables, /proc, the volume's root) and in every API answer about the volume and the sandbox",
		"the mount tables inside list the volume at its path",
		func(t *testing.T) error {
			inside := sh(t, f.d, f.sb.ID, "root", "cat /proc/self/mountinfo /proc/mounts; ls -la /vol /vol/..; stat -f /vol; df /vol")
			if !strings.Contains(inside, "/vol") {
				return fmt.Errorf("control: the mount tables do not list /vol: %.300s", inside)
			}
			if strings.Contains(inside, f.d.DataDir) || strings.Contains(inside, "volumes/"+f.vol.ID) {
				return fmt.Errorf("the sandbox sees the volume's host path: %.500s", inside)
			}
			for _, u := range []string{"/v1/volumes", "/v1/volumes/" + f.vol.ID, "/v1/sandboxes/" + f.sb.ID, "/volumes/" + f.vol.ID, "/sandboxes/" + f.sb.ID} {
				h := map[string]string(nil)
				if !strings.HasPrefix(u, "/v1") {
					h = map[string]string{"Authorization": "", "X-API-Key": f.d.APIKey}
				}
				st, b, err := f.cp.req("GET", u, nil, h)
				if err != nil || st != 200 {
					return fmt.Errorf("GET %s: %d %v", u, st, err)
				}
				if strings.Contains(string(b), f.d.DataDir) {
					return fmt.Errorf("GET %s names a host path: %.300s", u, b)
				}
			}
			return nil
		})
	add("fs-volume-devices-suid", "as root inside, make a device node for /dev/mem and a set-user-ID root shell in the volume, for the host (or a reader) to use",
		"a regular file made in the volume the same way is there on the host side",
		func(t *testing.T) error {
			r := run(t, f.d, f.sb.ID, client.CommandRequest{User: "root", Cmd: "cd /vol && echo plain > regular; mknod mem c 1 1 2>&1; cp /bin/dash suid-sh && chmod 4755 suid-sh; ls -l mem suid-sh 2>&1; true"})
			if err := want2xx("plain")(f.native("GET", "/files", url.Values{"path": {"/regular"}}, nil)); err != nil {
				return fmt.Errorf("control: %w", err)
			}
			st, b, err := f.native("GET", "/files/stat", url.Values{"path": {"/mem"}}, nil)
			if err == nil && st == 200 {
				var e struct{ Type string }
				json.Unmarshal(b, &e)
				// A node the sentry made is a gVisor file, not a host device;
				// either way the host mount is nodev.
				if e.Type == "unknown" && !hostMountHas(f.vol.ID, "nodev") {
					return fmt.Errorf("a device node in a volume mounted without nodev (%s)", r.Stdout)
				}
			}
			if !hostMountHas(f.vol.ID, "nosuid") || !hostMountHas(f.vol.ID, "nodev") {
				return fmt.Errorf("the volume's host mount lacks nosuid,nodev")
			}
			return nil
		})
	return out
}

// volumeTokenAttempts are the control-plane attempts on E2B's volume
// content API.
func volumeTokenAttempts(f *volFixture) []attempt {
	var out []attempt
	out = append(out, attempt{id: "cp-volume-content-token", category: "control-plane", stops: "e2bcompat: a /volumecontent call needs that volume's own token (constant-time) or the API key; an unknown volume without the key is a 401 too",
		desc:    "E2B's volume content routes with no token, another volume's token, the sandbox's access token, a forged token and the token of an unknown volume id",
		control: "the volume's own token reads its file",
		run: func(t *testing.T) error {
			q := url.Values{"path": {"/target"}}.Encode()
			if err := want2xx("inside")(f.cp.req("GET", "/volumecontent/"+f.vol.ID+"/file?"+q, nil, map[string]string{"Authorization": "Bearer " + f.token})); err != nil {
				return fmt.Errorf("control: %w", err)
			}
			other, err := f.d.Client.CreateVolume(harness.Ctx(t, time.Minute), client.CreateVolumeRequest{Name: "rt-other-" + harness.RandHex(4), SizeMB: 16})
			if err != nil {
				return err
			}
			defer f.d.Client.DeleteVolume(harness.Ctx(t, time.Minute), other.ID)
			_, ob, _ := f.cp.req("GET", "/volumes/"+other.ID, nil, map[string]string{"Authorization": "", "X-API-Key": f.d.APIKey})
			var oi struct{ Token string }
			json.Unmarshal(ob, &oi)
			for _, tok := range []string{"", oi.Token, f.sb.AccessToken, "vt_" + harness.RandHex(32), f.token[:len(f.token)-1]} {
				for _, r := range []struct{ method, route string }{{"GET", "/file"}, {"GET", "/path"}, {"GET", "/dir"}, {"PUT", "/file"}, {"POST", "/dir"}, {"PATCH", "/path"}, {"DELETE", "/path"}} {
					h := map[string]string{"Authorization": ""}
					if tok != "" {
						h["Authorization"] = "Bearer " + tok
					}
					for _, id := range []string{f.vol.ID, "vol-" + harness.RandHex(8)} {
						if err := refused(401)(f.cp.req(r.method, "/volumecontent/"+id+r.route+"?"+q, []byte("{}"), h)); err != nil {
							return fmt.Errorf("%s %s with token %.8q: %w", r.method, r.route, tok, err)
						}
					}
				}
			}
			return want2xx("inside")(f.native("GET", "/files", url.Values{"path": {"/target"}}, nil))
		}})
	return out
}

// hostMountHas reports whether the host's mount of volume id has option opt.
func hostMountHas(id, opt string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 5 && strings.HasSuffix(fields[4], "/volumes/"+id+"/mnt") {
			for _, o := range strings.Split(fields[5], ",") {
				if o == opt {
					return true
				}
			}
		}
	}
	return false
}

func TestVolumes(t *testing.T) {
	d := need(t)
	t.Parallel()
	ctx := harness.Ctx(t, time.Minute)
	vol, err := d.Client.CreateVolume(ctx, client.CreateVolumeRequest{Name: "rt-" + harness.RandHex(6), SizeMB: 32})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Client.DeleteVolume(harness.Ctx(t, time.Minute), vol.ID) })
	sb := d.NewSandbox(t, client.CreateSandboxRequest{Volumes: []client.VolumeMount{{Name: vol.Name, Path: "/vol"}}})
	cp := &cpFixture{d: d}
	st, b, err := cp.req("GET", "/volumes/"+vol.ID, nil, map[string]string{"Authorization": "", "X-API-Key": d.APIKey})
	var info struct{ Token string }
	if err != nil || st != 200 || json.Unmarshal(b, &info) != nil || info.Token == "" {
		t.Fatalf("E2B volume info: %d %s %v", st, b, err)
	}
	n := getNeighbour(t, d)
	f := &volFixture{d: d, cp: cp, vol: vol, token: info.Token, sb: sb,
		leaks: append(env.canary.contents(), d.APIKey, n.marker, n.sb.AccessToken)}
	for _, a := range append(volumeAttempts(f), volumeTokenAttempts(f)...) {
		t.Run(a.id, func(t *testing.T) {
			if err := a.run(t); err != nil {
				t.Errorf("%s: the attack was not stopped: %v", a.desc, err)
			}
		})
	}
	d.Client.KillSandbox(ctx, sb.ID)
	guard(t, d)
}
