"""Helpers of the red-team attempts that run inside a sandbox.

Every attempt is a function of one of the modules beside this one (fs.py,
kernel.py, net.py, res.py) that takes the dict R and records in it what it
saw; the Go side checks R. A positive control, where an attempt has one,
goes into R['ctl'] through control(): the same mechanism, used where it is
allowed, must work, so that a refusal cannot be mistaken for a broken probe.
"""

import ctypes
import errno
import json
import os
import socket
import struct
import threading
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

CANARY_PATHS = json.loads(os.environ.get("RT_CANARY_PATHS", "[]"))
CANARY_NAMES = [os.path.basename(p) for p in CANARY_PATHS]
NET = json.loads(os.environ.get("RT_NET", "{}"))
HOST_IFS = json.loads(os.environ.get("RT_HOST_IFS", "[]"))

CLONE_NEWNS = 0x20000
CLONE_NEWCGROUP = 0x2000000
CLONE_NEWUTS = 0x4000000
CLONE_NEWIPC = 0x8000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_BIND = 4096
MS_REC = 16384


def en(e):
    """The name of errno e."""
    return errno.errorcode.get(e, str(e))


def sc(nr, *args):
    """System call nr; returns (result, errno name or '')."""
    ctypes.set_errno(0)
    a = []
    for x in args:
        if isinstance(x, int):
            a.append(ctypes.c_long(x - (1 << 64) if x >= (1 << 63) else x))
        else:
            a.append(x)
    r = libc.syscall(ctypes.c_long(nr), *a)
    return r, (en(ctypes.get_errno()) if r == -1 else "")


def tryio(f, *a, **k):
    """f(*a, **k); returns (result, errno name or '')."""
    try:
        return f(*a, **k), ""
    except OSError as e:
        return None, en(e.errno)


def readf(p, n=1 << 20):
    with open(p, "rb") as f:
        return f.read(n).decode("latin-1")


def cstr(s):
    return ctypes.c_char_p(s.encode())


def control(R, name, err):
    """Records a positive control: err is '' when it worked."""
    R.setdefault("ctl", {})[name] = err or ""


def expect(cond, what):
    """'' when cond holds, else what (for control())."""
    return "" if cond else what


def mount(src, tgt, fs, flags=0, data=None):
    """mount(2); returns '' or the errno name."""
    ctypes.set_errno(0)
    r = libc.mount(cstr(src) if src else None, cstr(tgt), cstr(fs) if fs else None,
                   ctypes.c_ulong(flags), cstr(data) if data else None)
    return "" if r == 0 else en(ctypes.get_errno())


def userns(extra=0):
    """Enters a new user namespace (root mapped to the caller) and the
    namespaces in extra; returns '' or what failed."""
    r, e = sc(272, CLONE_NEWUSER | extra)
    if e:
        return "unshare:" + e
    for f, v in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", "0 0 1"),
                 ("/proc/self/gid_map", "0 0 1")):
        try:
            with open(f, "w") as fh:
                fh.write(v)
        except OSError as x:
            if f != "/proc/self/setgroups":
                return "map:" + en(x.errno)
    return ""


def in_child(fn):
    """Runs fn() in a forked child and returns what it returned (JSON),
    or {'exc': ...}; namespaces it enters stay in the child."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = fn()
        except BaseException as e:  # report anything, the child must not return
            out = {"exc": "%s: %s" % (type(e).__name__, e)}
        with os.fdopen(w, "w") as f:
            f.write(json.dumps(out, default=str))
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        data = f.read()
    os.waitpid(pid, 0)
    try:
        return json.loads(data)
    except ValueError:
        return {"exc": "child wrote %r" % data[:200]}


def openerr(p, flags=os.O_RDONLY):
    """Opens p (and reads from it when opened read-only); '' or the errno."""
    try:
        fd = os.open(p, flags)
    except OSError as e:
        return en(e.errno)
    try:
        if flags == os.O_RDONLY:
            os.read(fd, 16)
    except OSError as e:
        return "read:" + en(e.errno)
    finally:
        os.close(fd)
    return ""


def writeerr(p, data):
    """Writes data to the existing file p; '' or the errno."""
    try:
        fd = os.open(p, os.O_WRONLY)
    except OSError as e:
        return en(e.errno)
    try:
        os.write(fd, data.encode())
    except OSError as e:
        return en(e.errno)
    finally:
        os.close(fd)
    return ""


def canaries_seen(prefix, paths=None):
    """The canary paths that exist under prefix."""
    return [p for p in (CANARY_PATHS if paths is None else paths) if os.path.exists(prefix + p)]


TWIN_ROOT = "/tmp/rt-twin"


def plant_twins():
    """Makes, inside the sandbox, a file at TWIN_ROOT + p for each canary
    path p, and returns the twins' paths: a probe that finds them shows it
    would find the canaries, were they there."""
    twins = []
    for p in CANARY_PATHS:
        t = TWIN_ROOT + p
        os.makedirs(os.path.dirname(t), exist_ok=True)
        with open(t, "w") as f:
            f.write("twin")
        twins.append(t)
    return twins


def probe_tcp(targets, timeout=1.0):
    """Connects to each host:port at once; connected, refused, timeout or
    error:ERRNO for each."""
    res = {}

    def one(t):
        h, p = t.rsplit(":", 1)
        h = h.strip("[]")
        fam = socket.AF_INET6 if ":" in h else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect((h, int(p)))
            res[t] = "connected"
        except ConnectionRefusedError:
            res[t] = "refused"
        except socket.timeout:
            res[t] = "timeout"
        except OSError as e:
            res[t] = "error:" + en(e.errno)
        finally:
            s.close()

    ts = [threading.Thread(target=one, args=(t,)) for t in targets]
    for x in ts:
        x.start()
    for x in ts:
        x.join()
    return res


def send_udp(targets, payload=b"RTUDP"):
    """Sends three datagrams to each host:port; answered, no answer or
    error:ERRNO for each."""
    res = {}
    for t in targets:
        h, p = t.rsplit(":", 1)
        h = h.strip("[]")
        fam = socket.AF_INET6 if ":" in h else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.settimeout(0.5)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            for _ in range(3):
                s.sendto(payload, (h, int(p)))
            try:
                s.recvfrom(512)
                res[t] = "answered"
            except socket.timeout:
                res[t] = "no answer"
        except OSError as e:
            res[t] = "error:" + en(e.errno)
        finally:
            s.close()
    return res


def ping(hosts, timeout=0.7):
    """ICMP echo through an unprivileged ICMP socket; reply, no reply or
    an error for each host."""
    res = {}
    for h in hosts:
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
            s.settimeout(timeout)
        except OSError as e:
            res[h] = "socket:" + en(e.errno)
            continue
        try:
            s.sendto(struct.pack("!BBHHH", 8, 0, 0, 0, 1) + b"rt", (h, 0))
            s.recvfrom(512)
            res[h] = "reply"
        except socket.timeout:
            res[h] = "no reply"
        except OSError as e:
            res[h] = "error:" + en(e.errno)
        finally:
            s.close()
    return res


def local_tcp_server(host="127.0.0.1", port=0, banner=b"SANDBOX"):
    """A listener inside the sandbox that sends banner to whoever connects;
    returns its port."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, port))
    srv.listen(16)

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            try:
                c.sendall(banner)
            except OSError:
                pass
            c.close()

    threading.Thread(target=serve, daemon=True).start()
    return srv.getsockname()[1]


def local_udp_echo(host="127.0.0.1"):
    """A UDP echo server inside the sandbox; returns its port."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((host, 0))

    def serve():
        while True:
            try:
                data, addr = s.recvfrom(2048)
                s.sendto(data, addr)
            except OSError:
                return

    threading.Thread(target=serve, daemon=True).start()
    return s.getsockname()[1]


def net_controls(R):
    """The probes reach what they may reach: a TCP listener, a UDP echo
    server and an ICMP echo on the sandbox's own loopback."""
    port = local_tcp_server()
    control(R, "tcp", expect(probe_tcp(["127.0.0.1:%d" % port]).popitem()[1] == "connected",
                             "probe_tcp did not reach a listener on the sandbox's loopback"))
    uport = local_udp_echo()
    control(R, "udp", expect(send_udp(["127.0.0.1:%d" % uport]).popitem()[1] == "answered",
                             "send_udp got no answer from an echo server on the sandbox's loopback"))
    control(R, "icmp", expect(ping(["127.0.0.1"])["127.0.0.1"] == "reply",
                              "ping got no reply from the sandbox's loopback"))


def agent_alive():
    """The sandbox's init (space-agent) exists and is not stopped or dead."""
    try:
        return "space-agent" in readf("/proc/1/cmdline") and \
            readf("/proc/1/stat").split(")")[1].split()[0] not in ("T", "Z", "X")
    except OSError:
        return False


def tasks_of(uid, skip=()):
    """(processes, tasks) the user uid runs in the sandbox, threads counted;
    the processes whose pids are in skip are left out."""
    procs = tasks = 0
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) in skip:
            continue
        try:
            if os.stat("/proc/" + p).st_uid != uid:
                continue
            n = len(os.listdir("/proc/%s/task" % p))
        except OSError:
            continue
        procs += 1
        tasks += n
    return procs, tasks


def wait_for(cond, timeout, step=0.05):
    """Polls cond until it holds or timeout seconds pass; returns cond()."""
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()
