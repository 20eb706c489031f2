package redteam

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/client"
	"github.com/spacesandbox/space/test/harness"
)

// attempt is one escape or abuse attempt. In-sandbox attempts carry py, a
// Python snippet run by harnessPy that records what it saw in the dict R;
// check then says whether the attack failed. Attempts driven from outside
// (the API, the proxy, floods) carry run instead.
type attempt struct {
	id       string
	category string // filesystem, kernel, resources, control-plane, network
	desc     string // what it tries
	stops    string // what stops it (docs/security.md)
	py       string
	check    func(r res) error
	run      func(t *testing.T) error
}

// res is what an in-sandbox attempt recorded.
type res map[string]any

func (r res) s(k string) string {
	switch v := r[k].(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

func (r res) b(k string) bool { v, _ := r[k].(bool); return v }

func (r res) n(k string) float64 { v, _ := r[k].(float64); return v }

// harnessPy runs each attempt of a group in a forked child of its own
// session (so a crash, a hang or stray children stay contained), waits at
// most RT_TIMEOUT seconds for it, and prints one line "RTRESULT {json}" per
// attempt.
const harnessPy = `
import ctypes, os, sys, json, errno, socket, struct, signal, time, select, threading, stat
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def en(e): return errno.errorcode.get(e, str(e))
def sc(nr, *args):
    ctypes.set_errno(0)
    a = [ctypes.c_long(x - (1 << 64) if x >= (1 << 63) else x) if isinstance(x, int) else x for x in args]
    r = libc.syscall(ctypes.c_long(nr), *a)
    return r, (en(ctypes.get_errno()) if r == -1 else "")
def tryio(f, *a, **k):
    try: return f(*a, **k), ""
    except OSError as e: return None, en(e.errno)
def readf(p, n=1 << 20):
    with open(p, "rb") as f: return f.read(n).decode("latin-1")
def cstr(s): return ctypes.c_char_p(s.encode())
CANARY_PATHS = json.loads(os.environ.get("RT_CANARY_PATHS", "[]"))
CANARY_NAMES = [os.path.basename(p) for p in CANARY_PATHS]
def find_names(roots, names, limit=200000):
    seen = 0
    for root in roots:
        for dp, dn, fn in os.walk(root):
            seen += len(fn)
            for n in names:
                if n in fn or n in dn: return os.path.join(dp, n)
            if seen > limit: return ""
    return ""
def mount(src, tgt, fs, flags=0, data=None):
    ctypes.set_errno(0)
    r = libc.mount(cstr(src) if src else None, cstr(tgt), cstr(fs) if fs else None, ctypes.c_ulong(flags), cstr(data) if data else None)
    return "" if r == 0 else en(ctypes.get_errno())
def userns(extra=0):
    r, e = sc(272, 0x10000000 | extra)
    if e: return "unshare:" + e
    for f, v in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", "0 0 1"), ("/proc/self/gid_map", "0 0 1")):
        try:
            with open(f, "w") as fh: fh.write(v)
        except OSError as x:
            if f != "/proc/self/setgroups": return "map:" + en(x.errno)
    return ""
def openerr(p, flags=os.O_RDONLY):
    try:
        fd = os.open(p, flags)
    except OSError as e: return en(e.errno)
    try: os.read(fd, 16) if flags == os.O_RDONLY else None
    except OSError as e: return "read:" + en(e.errno)
    finally: os.close(fd)
    return ""
def writeerr(p, data):
    try:
        with open(p, "w") as f: f.write(data)
    except OSError as e: return en(e.errno)
    return ""
def probe_tcp(targets, timeout=1.0):
    res = {}
    def one(t):
        h, p = t.rsplit(":", 1)
        h = h.strip("[]")
        fam = socket.AF_INET6 if ":" in h else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(timeout)
        try: s.connect((h, int(p))); res[t] = "connected"
        except ConnectionRefusedError: res[t] = "refused"
        except socket.timeout: res[t] = "timeout"
        except OSError as e: res[t] = "error:" + en(e.errno)
        finally: s.close()
    ts = [threading.Thread(target=one, args=(t,)) for t in targets]
    [x.start() for x in ts]; [x.join() for x in ts]
    return res
def send_udp(targets, payload=b"RTUDP"):
    res = {}
    for t in targets:
        h, p = t.rsplit(":", 1)
        h = h.strip("[]")
        fam = socket.AF_INET6 if ":" in h else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(0.5)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            for i in range(3): s.sendto(payload, (h, int(p)))
            try: s.recvfrom(512); res[t] = "answered"
            except socket.timeout: res[t] = "no answer"
        except OSError as e: res[t] = "error:" + en(e.errno)
        finally: s.close()
    return res
def ping(hosts, timeout=0.7):
    res = {}
    for h in hosts:
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP); s.settimeout(timeout)
        except OSError as e: res[h] = "socket:" + en(e.errno); continue
        try:
            s.sendto(struct.pack("!BBHHH", 8, 0, 0, 0, 1) + b"rt", (h, 0))
            s.recvfrom(512); res[h] = "reply"
        except socket.timeout: res[h] = "no reply"
        except OSError as e: res[h] = "error:" + en(e.errno)
        finally: s.close()
    return res
NET = json.loads(os.environ.get("RT_NET", "{}"))
def agent_alive():
    try: return "space-agent" in readf("/proc/1/cmdline") and readf("/proc/1/stat").split(")")[1].split()[0] not in ("T", "Z", "X")
    except OSError: return False
G = dict(globals())
def run_one(a, timeout):
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        try: os.setsid()
        except OSError: pass
        R = {}
        try: exec(a["code"], dict(G, R=R))
        except BaseException as e: R["exc"] = "%s: %s" % (type(e).__name__, e)
        with os.fdopen(wfd, "wb") as w: w.write(json.dumps(R, default=str).encode())
        os._exit(0)
    os.close(wfd)
    buf, deadline, timed_out = b"", time.time() + timeout, False
    while True:
        left = deadline - time.time()
        if left <= 0: timed_out = True; break
        rd, _, _ = select.select([rfd], [], [], left)
        if not rd: timed_out = True; break
        chunk = os.read(rfd, 65536)
        if not chunk: break
        buf += chunk
    os.close(rfd)
    try: os.killpg(pid, signal.SIGKILL)
    except OSError: pass
    try: os.kill(pid, signal.SIGKILL)
    except OSError: pass
    _, st = os.waitpid(pid, 0)
    try: R = json.loads(buf)
    except Exception: R = {"harness": "no result", "status": st, "raw": buf[:300].decode("latin-1")}
    if timed_out: R["timeout"] = True
    return R
attempts = json.load(open(sys.argv[1]))
for a in attempts:
    print("RTRESULT " + json.dumps({"id": a["id"], "r": run_one(a, float(os.environ.get("RT_TIMEOUT", "20")))}), flush=True)
`

// runGroup runs the in-sandbox attempts of group in sandbox id as user,
// one subtest per attempt, then checks that nothing outside was disturbed.
func runGroup(t *testing.T, d *harness.Daemon, id, user string, group []attempt) {
	t.Helper()
	runGroupEnv(t, d, id, user, group, nil)
}

// runGroupEnv is runGroup with extra environment for the snippets.
func runGroupEnv(t *testing.T, d *harness.Daemon, id, user string, group []attempt, extra map[string]string) {
	t.Helper()
	dir := "/tmp/rt-" + harness.RandHex(4)
	type spec struct {
		ID   string `json:"id"`
		Code string `json:"code"`
	}
	var specs []spec
	for _, a := range group {
		specs = append(specs, spec{a.id, a.py})
	}
	b, _ := json.Marshal(specs)
	ctx := harness.Ctx(t, 30*time.Second)
	if _, err := d.Client.Upload(ctx, id, dir+"/harness.py", strings.NewReader(harnessPy)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client.Upload(ctx, id, dir+"/group.json", strings.NewReader(string(b))); err != nil {
		t.Fatal(err)
	}
	sh(t, d, id, "root", "chmod -R a+rX "+dir)
	paths, _ := json.Marshal(env.canary.paths())
	cmdEnv := map[string]string{"RT_CANARY_PATHS": string(paths)}
	for k, v := range extra {
		cmdEnv[k] = v
	}
	start := time.Now()
	out := run(t, d, id, client.CommandRequest{
		Argv: []string{"python3", dir + "/harness.py", dir + "/group.json"},
		User: user,
		Cwd:  "/tmp",
		Env:  cmdEnv,
	})
	t.Logf("%d attempts as %s in %s (exit %+v)", len(group), user, time.Since(start).Round(time.Millisecond), *out.Exit)
	got := map[string]res{}
	rawLine := map[string]string{}
	for _, line := range strings.Split(out.Stdout, "\n") {
		j, ok := strings.CutPrefix(line, "RTRESULT ")
		if !ok {
			continue
		}
		var v struct {
			ID string `json:"id"`
			R  res    `json:"r"`
		}
		if err := json.Unmarshal([]byte(j), &v); err != nil {
			t.Errorf("bad harness line %q: %v", line, err)
			continue
		}
		got[v.ID], rawLine[v.ID] = v.R, j
	}
	leaks := secrets(t, d)
	for _, a := range group {
		t.Run(a.id, func(t *testing.T) {
			r, ok := got[a.id]
			if !ok {
				t.Fatalf("no result (harness exit %+v, stderr %s)", *out.Exit, harness.Clip(out.Stderr))
			}
			t.Logf("result: %s", rawLine[a.id])
			if err := noLeak(rawLine[a.id], leaks); err != nil {
				t.Errorf("%s: %v; result %v", a.desc, err, r)
			}
			if err := a.check(r); err != nil {
				t.Errorf("%s: the attack was not stopped: %v; result %v", a.desc, err, r)
			}
		})
	}
	guard(t, d)
}

// noLeak fails when out contains a host or neighbour secret.
func noLeak(out string, leaks []string) error {
	for _, s := range leaks {
		if s != "" && strings.Contains(out, s) {
			return fmt.Errorf("output holds the secret %q", s)
		}
	}
	return nil
}

// Checks used by many attempts.

// errnoIn: R["err"] is one of the errnos (the syscall was refused).
func errnoIn(errs ...string) func(res) error {
	return func(r res) error {
		if e := r.s("err"); slices.Contains(errs, e) {
			return nil
		}
		return fmt.Errorf("err %q, want one of %v", r.s("err"), errs)
	}
}

// failed: R["err"] is set, whatever the errno.
func failed(r res) error {
	if r.s("err") == "" {
		return fmt.Errorf("the call succeeded")
	}
	return nil
}

// isFalse: R[k] is false (and present).
func isFalse(k string) func(res) error {
	return func(r res) error {
		v, ok := r[k].(bool)
		if !ok || v {
			return fmt.Errorf("%s is %v, want false", k, r[k])
		}
		return nil
	}
}

// all combines checks.
func all(checks ...func(res) error) func(res) error {
	return func(r res) error {
		for _, c := range checks {
			if err := c(r); err != nil {
				return err
			}
		}
		return nil
	}
}

// anyOf passes when one of checks does.
func anyOf(checks ...func(res) error) func(res) error {
	return func(r res) error {
		var errs []error
		for _, c := range checks {
			err := c(r)
			if err == nil {
				return nil
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
}

// noExc: the snippet ran to its end.
func noExc(r res) error {
	if r.s("exc") != "" || r.b("timeout") || r.s("harness") != "" {
		return fmt.Errorf("the attempt did not complete: exc %q timeout %v harness %q", r.s("exc"), r.b("timeout"), r.s("harness"))
	}
	return nil
}

// call builds a snippet that makes syscall nr with args and records err.
func call(nr int, args ...string) string {
	return fmt.Sprintf("R['ret'], R['err'] = sc(%d%s)", nr, joinArgs(args))
}

func joinArgs(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return ", " + strings.Join(args, ", ")
}
