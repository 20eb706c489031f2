"""Kernel attempts: system calls, capabilities, namespaces, sockets and odd
arguments from inside a sandbox. Each function fills R; kernel_test.go
checks it."""

import ctypes
import fcntl
import mmap
import os
import random
import resource
import signal
import socket
import struct
import time

from rt import (CLONE_NEWCGROUP, CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWUTS, agent_alive,
                control, cstr, expect, in_child, mount, openerr, readf, sc, tryio, userns)


def call(R, nr, *args):
    R["ret"], R["err"] = sc(nr, *args)


def sleeper():
    """A child that sleeps, holding a known buffer; returns (pid, address)."""
    buf = ctypes.create_string_buffer(b"RTCHILD", 64)
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    return pid, buf


def reap(pid):
    tryio(os.kill, pid, signal.SIGKILL)
    tryio(os.waitpid, pid, 0)


def ptrace_control(R):
    """PTRACE_ATTACH works on a child of the caller."""
    pid, _ = sleeper()
    control(R, "ptrace-own-child", sc(101, 16, pid, 0, 0)[1])
    reap(pid)


def pid_of(tag):
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and tag in readf("/proc/%s/cmdline" % p)][0]


def ptrace(R, target, request=16):
    pid = 1 if target == "agent" else pid_of(target)
    call(R, 101, request, pid, 0, 0)
    ptrace_control(R)


def vm_rw(R, nr):
    """process_vm_readv (310) or writev (311) of the agent; the control
    reads a child's buffer."""
    buf = ctypes.create_string_buffer(64)
    loc = struct.pack("QQ", ctypes.addressof(buf), 64)
    rem = struct.pack("QQ", 0x400000, 64)
    call(R, nr, 1, loc, 1, rem, 1, 0)
    pid, child_buf = sleeper()
    got = ctypes.create_string_buffer(64)
    loc = struct.pack("QQ", ctypes.addressof(got), 7)
    rem = struct.pack("QQ", ctypes.addressof(child_buf), 7)
    n, e = sc(310, pid, loc, 1, rem, 1, 0)
    reap(pid)
    control(R, "own-child", e or expect(got.value == b"RTCHILD", "read %r from the child" % got.value))


def pidfd_getfd_agent(R, target="agent"):
    pfd, e = sc(434, 1 if target == "agent" else pid_of(target), 0)
    R["pidfd_open"] = e
    R["err"] = e
    if pfd >= 0:
        for n in range(3, 12):
            r, e = sc(438, pfd, n, 0)
            R["err"] = e
            if r >= 0:
                break
    pid, _ = sleeper()
    cfd, e = sc(434, pid, 0)
    control(R, "own-child", e or sc(438, cfd, 1, 0)[1])
    reap(pid)


def kcmp_agent(R):
    call(R, 312, 1, os.getpid(), 0, 0, 0)
    R["self"] = sc(312, os.getpid(), os.getpid(), 0, 0, 0)[1]


def process_madvise_agent(R):
    pfd, _ = sc(434, 1, 0)
    iov = struct.pack("QQ", 0x400000, 4096)
    call(R, 440, pfd, iov, 1, 21, 0)


def move_pages_agent(R):
    pages = (ctypes.c_void_p * 1)(0x400000)
    st = (ctypes.c_int * 1)()
    mask = ctypes.c_ulong(1)
    R["errs"] = {"move_pages": sc(279, 1, 1, pages, None, st, 0)[1],
                 "migrate_pages": sc(256, 1, 64, ctypes.byref(mask), ctypes.byref(mask))[1]}


def caps(R):
    for line in readf("/proc/self/status").splitlines():
        k, _, v = line.partition(":")
        if k.startswith("Cap"):
            R[k] = v.strip()


def capset_raise(R):
    hdr = struct.pack("Ii", 0x20080522, 0)
    call(R, 126, hdr, struct.pack("6I", *([0xffffffff] * 6)))
    cur = ctypes.create_string_buffer(24)
    e = sc(125, hdr, cur)[1]
    control(R, "capset-same", e or sc(126, hdr, cur.raw)[1])


def ambient_raise(R):
    call(R, 157, 47, 2, 21, 0, 0)  # PR_CAP_AMBIENT_RAISE CAP_SYS_ADMIN
    r, e = sc(157, 47, 1, 21, 0, 0)  # PR_CAP_AMBIENT_IS_SET
    control(R, "is-set", e or expect(r == 0, "PR_CAP_AMBIENT_IS_SET says %d" % r))


def unshare_all(R):
    flags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWPID
    R["ret"], R["err"] = in_child(lambda: sc(272, flags))
    R["cgroup"] = in_child(lambda: sc(272, CLONE_NEWCGROUP)[1])
    control(R, "with-userns", in_child(lambda: userns(flags)))


def setns_agent(R):
    R["errs"], R["same"] = {}, {}
    for n in os.listdir("/proc/1/ns"):
        if os.readlink("/proc/1/ns/" + n) == os.readlink("/proc/self/ns/" + n) and n == "user":
            # Joining the user namespace one is in is EINVAL on Linux too.
            R["same"][n] = sc(308, os.open("/proc/1/ns/" + n, os.O_RDONLY), 0)[1]
            continue
        fd, e = tryio(os.open, "/proc/1/ns/" + n, os.O_RDONLY)
        R["errs"][n] = e or sc(308, fd, 0)[1]


def userns_uts_control(R):
    """sethostname works in a UTS namespace of one's own user namespace."""
    control(R, "own-uts", in_child(lambda: userns(CLONE_NEWUTS) or sc(170, cstr("rtown"), 5)[1] or
                                   expect(os.uname().nodename == "rtown", "hostname did not change")))


def userns_host_time(R):
    def inner():
        e = userns()
        tv = struct.pack("qq", int(time.time()) + 7200, 0)
        return {"ns": e, "errs": {"settimeofday": sc(164, tv, None)[1], "clock_settime": sc(227, 0, tv)[1],
                                  "sethostname": sc(170, cstr("pwned"), 5)[1]}}
    R.update(in_child(inner))
    userns_uts_control(R)


def timens_realtime(R):
    def inner():
        return {"ns": sc(272, 0x80)[1], "err": sc(227, 0, struct.pack("qq", int(time.time()) + 7200, 0))[1]}
    R.update(in_child(inner))


def cgroup_release_agent(R):
    def inner():
        e = userns(CLONE_NEWNS)
        os.makedirs("/tmp/rtcg", exist_ok=True)
        m = e or mount("cgroup", "/tmp/rtcg", "cgroup", 0, "memory")
        w = m or tryio(lambda: open("/tmp/rtcg/release_agent", "r+").write("/tmp/pwn"))[1]
        n = m or tryio(lambda: open("/tmp/rtcg/notify_on_release", "r+").write("1"))[1]
        return {"mount": m, "err": w, "notify": n}
    R.update(in_child(inner))
    control(R, "mount", R.get("mount"))


def io_uring(R, flags=0):
    p = ctypes.create_string_buffer(struct.pack("II", 0, flags) + b"\0" * 112, 120)
    call(R, 425, 8, p)


def userfaultfd(R):
    R["errs"] = {"syscall": sc(323, 0)[1], "user-mode": sc(323, 1)[1], "dev": openerr("/dev/userfaultfd", os.O_RDWR)}


def bpf_map(R):
    a = ctypes.create_string_buffer(struct.pack("IIII", 1, 4, 4, 1) + b"\0" * 112, 128)
    call(R, 321, 0, a, 128)


def bpf_prog(R):
    insns = ctypes.create_string_buffer(b"\xb7\0\0\0\0\0\0\0\x95\0\0\0\0\0\0\0", 16)
    lic = ctypes.create_string_buffer(b"GPL")
    a = ctypes.create_string_buffer(struct.pack("IIQQ", 1, 2, ctypes.addressof(insns), ctypes.addressof(lic)) + b"\0" * 104, 128)
    call(R, 321, 5, a, 128)


def perf_event(R):
    a = ctypes.create_string_buffer(struct.pack("IIQ", 0, 128, 0) + b"\0" * 112, 128)
    R["errs"] = {"self": sc(298, a, 0, -1, -1, 0)[1], "cpu0": sc(298, a, -1, 0, -1, 0)[1]}


def keyctl(R):
    R["errs"] = {"add_key": sc(248, cstr("user"), cstr("rt"), cstr("data"), 4, -3)[1],
                 "request_key": sc(249, cstr("user"), cstr("rt"), None, 0)[1],
                 "read": sc(250, 11, -4, None, 0)[1], "/proc/keys": openerr("/proc/keys")}


def init_module(R):
    b = ctypes.create_string_buffer(b"\x7fELF" + b"\0" * 60, 64)
    call(R, 175, b, 64, cstr(""))


def finit_module(R):
    call(R, 313, os.open("/usr/bin/true", os.O_RDONLY), cstr(""), 0)


def delete_module(R):
    call(R, 176, cstr("ext4"), 0)


def kexec(R):
    fd = os.open("/usr/bin/true", os.O_RDONLY)
    R["errs"] = {"kexec_load": sc(246, 0, 0, None, 0)[1], "kexec_file_load": sc(320, fd, fd, 1, cstr(""), 2)[1]}


def reboot(R):
    call(R, 169, 0xfee1dead, 672274793, 0, None)


def swapon(R):
    with open("/tmp/rtswap", "wb") as f:
        f.write(b"\0" * 65536)
    call(R, 167, cstr("/tmp/rtswap"), 0)


def acct(R):
    call(R, 163, cstr("/tmp/rtacct"))


def iopl(R):
    R["errs"] = {"iopl": sc(172, 3)[1], "ioperm": sc(173, 0x80, 1, 1)[1]}


def modify_ldt(R):
    call(R, 154, 1, ctypes.create_string_buffer(16), 16)


def syslog(R):
    b = ctypes.create_string_buffer(1 << 16)
    n, R["err"] = sc(103, 3, b, 1 << 16)
    R["log"] = b.raw[:max(n, 0)].decode("latin-1")
    control(R, "read", expect(n > 0, "syslog read nothing"))


def uname(R):
    R["v"] = " ".join(os.uname()) + readf("/proc/version")


def sethostname(R):
    R["errs"] = {"sethostname": sc(170, cstr("pwned"), 5)[1], "setdomainname": sc(171, cstr("pwned"), 5)[1]}
    R["hostname"] = os.uname().nodename
    userns_uts_control(R)


def set_time(R, nr):
    """settimeofday (164) or clock_settime (227) two hours ahead."""
    tv = struct.pack("qq", int(time.time()) + 7200, 0)
    before = time.time()
    call(R, nr, *((tv, None) if nr == 164 else (0, tv)))
    R["jump"] = time.time() - before


def adjtimex(R):
    tx = struct.pack("Iiq", 1 | 2, 0, 500000) + b"\0" * 192
    R["errs"] = {"adjtimex": sc(159, tx)[1], "clock_adjtime": sc(305, 0, tx)[1]}


def sched_fifo(R):
    call(R, 144, 0, 1, struct.pack("i", 99))
    R["policy"] = sc(145, 0)[0]
    control(R, "sched-other", sc(144, 0, 0, struct.pack("i", 0))[1])


def rlimit_raise(R):
    R["errs"] = {}
    for k in (resource.RLIMIT_NPROC, resource.RLIMIT_NOFILE):
        s, h = resource.getrlimit(k)
        R["errs"][str(k)] = sc(302, 0, k, struct.pack("QQ", h + 1, h + 1), None)[1]
        control(R, "same-%d" % k, sc(302, 0, k, struct.pack("QQ", s, h), None)[1])


def prctl_set_mm(R):
    call(R, 157, 35, 1, 0x400000, 0, 0)


def socket_err(fam, ty, proto=0):
    s, e = tryio(socket.socket, fam, ty, proto)
    if s:
        s.close()
    return e


def raw_socket(R, family):
    R["err"] = socket_err(family, socket.SOCK_RAW, socket.IPPROTO_RAW)
    control(R, "icmp-dgram", socket_err(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP))


def packet_socket(R):
    R["errs"] = {str(t): socket_err(17, t, 0x0300) for t in (socket.SOCK_RAW, socket.SOCK_DGRAM)}


def socket_families(R, families):
    R["errs"] = {}
    for name, num in families.items():
        for ty in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_RAW, socket.SOCK_SEQPACKET):
            R["errs"]["%s/%d" % (name, ty)] = socket_err(num, ty)
    control(R, "unix", socket_err(socket.AF_UNIX, socket.SOCK_STREAM))


def netlink_families(R):
    R["errs"] = {n: socket_err(socket.AF_NETLINK, socket.SOCK_RAW, p) for n, p in (
        ("audit", 9), ("netfilter", 12), ("xfrm", 6), ("generic", 16), ("connector", 11), ("crypto", 21),
        ("scsi", 7), ("rdma", 20))}
    control(R, "route", socket_err(socket.AF_NETLINK, socket.SOCK_RAW, 0))


def ifconfig(R):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    name = b"eth0".ljust(16, b"\0")

    def state():
        out = {}
        for n, req in (("addr", 0x8915), ("flags", 0x8913), ("mtu", 0x8921), ("mac", 0x8927)):
            v, e = tryio(fcntl.ioctl, s, req, name + b"\0" * 24)
            out[n] = e or v[16:24].hex()
        return out

    before = state()
    addr = struct.pack("HH4s", socket.AF_INET, 0, socket.inet_aton("10.245.0.2")).ljust(24, b"\0")
    R["errs"] = {}
    for n, req, arg in (("addr", 0x8916, name + addr), ("flags", 0x8914, name + struct.pack("H", 0).ljust(24, b"\0")),
                        ("mac", 0x8924, name + struct.pack("H", 1).ljust(24, b"\x41")),
                        ("mtu", 0x8922, name + struct.pack("i", 9000).ljust(24, b"\0"))):
        R["errs"][n] = tryio(fcntl.ioctl, s, req, arg)[1]
    R["changed"] = [k for k, v in state().items() if before[k] != v]
    # The getters take the same request structure: the setters' refusal is
    # not a malformed request.
    control(R, "getters", ", ".join("%s: %s" % (k, v) for k, v in before.items() if len(v) != 16))


def tun(R):
    fd, e = tryio(os.open, "/dev/net/tun", os.O_RDWR)
    R["err"] = e or tryio(fcntl.ioctl, fd, 0x400454ca, b"rt0".ljust(16, b"\0") + struct.pack("H", 1).ljust(24, b"\0"))[1]


def new_mount_api(R):
    attr = ctypes.create_string_buffer(32)
    R["errs"] = {"fsopen": sc(430, cstr("tmpfs"), 0)[1], "fspick": sc(433, -100, cstr("/"), 0)[1],
                 "open_tree": sc(428, -100, cstr("/"), 1)[1],
                 "move_mount": sc(429, -100, cstr("/tmp"), -100, cstr("/mnt"), 0)[1],
                 "mount_setattr": sc(442, -100, cstr("/"), 0, attr, 32)[1]}


def obsolete_syscalls(R):
    b = ctypes.create_string_buffer(256)
    R["errs"] = {"uselib": sc(134, cstr("/usr/bin/true"))[1], "ustat": sc(136, 0, b)[1], "sysfs": sc(139, 1, cstr("proc"))[1],
                 "_sysctl": sc(156, b)[1], "create_module": sc(174, cstr("x"), 64)[1], "get_kernel_syms": sc(177, b)[1],
                 "query_module": sc(178, cstr("x"), 0, b, 0, b)[1], "nfsservctl": sc(180, 0, b, b)[1],
                 "lookup_dcookie": sc(212, 1, b, 256)[1], "quotactl": sc(179, 0x800001, cstr("/dev/vda"), 0, b)[1],
                 "vhangup": sc(153)[1]}


def fanotify(R):
    call(R, 300, 0, 0)


def memfd_secret(R):
    call(R, 447, 0)


def lsm(R):
    b = ctypes.create_string_buffer(64)
    sz = ctypes.c_uint(64)
    R["errs"] = {"lsm_get_self_attr": sc(459, 100, b, ctypes.byref(sz), 0)[1], "landlock_add_rule": sc(445, -1, 1, b, 0)[1]}


# Odd arguments: the sentry must refuse them with the errno Linux gives,
# and the same call with good arguments must work (the control).

def odd_syscall_numbers(R):
    R["errs"] = {str(n): sc(n)[1] for n in (999, -1, 0x40000000 | 39, 512, 100000)}
    control(R, "getpid", expect(sc(39)[0] == os.getpid(), "syscall 39 is not getpid"))


def odd_kernel_pointers(R):
    fd = os.open("/etc/passwd", os.O_RDONLY)
    r, w = os.pipe()
    os.write(w, b"abc")
    R["errs"] = {"read": sc(0, fd, 0xffffffff81000000, 16)[1], "write": sc(1, w, 0xffff888000000000, 16)[1],
                 "pipe-read": sc(0, r, 0xffffffffff600000, 3)[1]}
    b = ctypes.create_string_buffer(16)
    control(R, "read", expect(sc(0, r, b, 3)[0] == 3 and b.value == b"abc", "a read into a good buffer failed"))


def odd_mmap(R):
    R["errs"] = {}
    for n, a, ln, f in (("zero", 0, 4096, 0x32), ("kernel", 0xffff800000000000, 4096, 0x32), ("huge", 0, 1 << 62, 0x22)):
        R["errs"][n] = sc(9, a, ln, 3, f, -1, 0)[1]
    control(R, "anon", sc(9, 0, 4096, 3, 0x22, -1, 0)[1])


def odd_iovecs(R):
    fd = os.open("/etc/passwd", os.O_RDONLY)
    iov = struct.pack("Qq", 0x1000, -1)
    R["errs"] = {"count": sc(19, fd, iov, 1 << 20)[1], "neglen": sc(19, fd, iov, 1)[1]}
    b = ctypes.create_string_buffer(8)
    control(R, "readv", expect(sc(19, fd, struct.pack("QQ", ctypes.addressof(b), 8), 1)[0] == 8, "readv of a good iovec failed"))


def odd_futex(R):
    R["errs"] = {"wait": sc(202, 0xdead0000, 0, 0, None, 0, 0)[1],
                 "requeue-kernel": sc(202, 0xffffffff81000000, 4, 1, 1, 0xffffffff82000000, 0)[1]}
    word = ctypes.c_int(0)
    control(R, "wake", sc(202, ctypes.addressof(word), 1, 1, None, 0, 0)[1])


def odd_clone_flags(R):
    b = ctypes.create_string_buffer(b"\xff" * 88, 88)
    R["errs"] = {"clone": sc(56, 0x7fffffffffffff00, 0, 0, 0, 0)[1], "clone3": sc(435, b, 88)[1]}
    pid, e = sc(56, signal.SIGCHLD, 0, 0, 0, 0)
    if pid == 0:
        os._exit(7)
    if not e:
        _, st = os.waitpid(pid, 0)
        e = expect(os.WIFEXITED(st) and os.WEXITSTATUS(st) == 7, "the child of a plain clone did not exit 7")
    control(R, "clone-sigchld", e)


def odd_select(R):
    R["errs"] = {"select": sc(23, 1 << 30, None, None, None, struct.pack("qq", 0, 0))[1],
                 "poll": sc(7, 0x1000, (1 << 20) + 1, 0)[1]}
    control(R, "select", sc(23, 0, None, None, None, struct.pack("qq", 0, 0))[1])


def survives(fn, seconds):
    """Runs fn(counter) in a throwaway child for at most seconds; returns
    how it ended, how many calls it made and whether the sandbox still
    works after."""
    counter = mmap.mmap(-1, 8, mmap.MAP_SHARED)
    pid = os.fork()
    if pid == 0:
        fn(counter)
        os._exit(0)
    deadline = time.time() + seconds
    st, how = None, "exit"
    while time.time() < deadline:
        p, s = os.waitpid(pid, os.WNOHANG)
        if p:
            st = s
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        how = "killed at the deadline"
    if st is not None and os.WIFSIGNALED(st):
        how = "signal %d" % os.WTERMSIG(st)
    after = os.fork()
    if after == 0:
        os.execv("/bin/true", ["true"])
    _, st2 = os.waitpid(after, 0)
    return {"ended": how, "calls": struct.unpack("q", counter[:8])[0], "agent": agent_alive(),
            "fork_exec": os.WIFEXITED(st2) and os.WEXITSTATUS(st2) == 0}


def odd_ioctls(R):
    def fuzz(counter):
        random.seed(7)
        fds = [os.open("/dev/null", os.O_RDWR), os.pipe()[0], socket.socket().fileno(), os.open("/dev/ptmx", os.O_RDWR)]
        for i in range(2000):
            sc(16, random.choice(fds), random.getrandbits(32), random.getrandbits(64))
            counter[:8] = struct.pack("q", i + 1)
        r, w = os.pipe()
        os.write(w, b"ok")
        os.write(fds[0], b"x")
        if os.read(r, 2) != b"ok":
            os._exit(3)
    R.update(survives(fuzz, 15))


def odd_sigreturn(R):
    pid = os.fork()
    if pid == 0:
        sc(15)
        os._exit(0)
    _, st = os.waitpid(pid, 0)
    R["killed"] = os.WIFSIGNALED(st)
    R["agent"] = agent_alive()


# As the default user.

def user_kill_agent(R, target="agent"):
    pid = 1 if target == "agent" else pid_of(target)
    R["errs"] = {s: tryio(os.kill, pid, getattr(signal, s))[1] for s in ("SIGKILL", "SIGTERM", "SIGHUP")}
    pid, _ = sleeper()
    control(R, "own-child", tryio(os.kill, pid, signal.SIGTERM)[1])
    reap(pid)


def user_setuid(R):
    R["errs"] = {"setuid": sc(105, 0)[1], "setresuid": sc(117, 0, 0, 0)[1], "setgroups": sc(116, 1, struct.pack("I", 0))[1]}
    control(R, "same-uid", sc(105, os.getuid())[1])


SKIP = {9, 10, 11, 12, 15, 25, 34, 56, 57, 58, 59, 60, 61, 62, 101, 129, 157, 158, 200, 231, 234, 297, 317, 322, 424,
        435, 7, 23, 35, 202, 230, 270, 271, 281, 232, 233, 0, 17, 19, 295, 45, 47, 299, 43, 288, 22, 293, 130, 128,
        73, 72, 290, 284, 283, 286, 287, 28, 26, 149, 151, 216}


def user_fuzz(R):
    def fuzz(counter, seed):
        random.seed(seed)
        # A random alarm, setitimer or timer_create arms a timer whose
        # default action ends the child: that is the child's own doing,
        # not the sandbox's, and it cut runs short before 1000 calls.
        for s in (signal.SIGALRM, signal.SIGVTALRM, signal.SIGPROF):
            signal.signal(s, signal.SIG_IGN)
        # Its standard descriptors share their open files with the harness,
        # whose stdout carries every attempt's result: a random call must
        # not write into that pipe or change its flags, so here they are
        # /dev/null (the fuzz's own result goes through counter).
        null = os.open("/dev/null", os.O_RDWR)
        for f in (0, 1, 2):
            os.dup2(null, f)
        for f in range(3, 1024):
            tryio(os.close, f)
        nrs = [n for n in range(0, 460) if n not in SKIP]
        for i in range(20000):
            sc(random.choice(nrs), *[random.choice((0, 1, -1, 4096, random.getrandbits(64), random.getrandbits(16)))
                                     for _ in range(6)])
            counter[:8] = struct.pack("q", i + 1)
    R.update(survives_restarting(fuzz, 8, 20000))


def survives_restarting(fn, seconds, want):
    """Runs fn(counter, seed) in throwaway children for at most seconds in
    all: a child whose count stops moving for a second (a random call that
    blocks: a wait, a read, a lock) is killed and the next one goes on from
    a new seed, until want calls were made. Returns the calls summed over
    the children, how the last ended, how many blocked, and whether the
    sandbox still works after."""
    deadline = time.time() + seconds
    total, blocked, how = 0, 0, "exit"
    while total < want and time.time() < deadline:
        counter = mmap.mmap(-1, 8, mmap.MAP_SHARED)
        seed = random.getrandbits(32)
        pid = os.fork()
        if pid == 0:
            fn(counter, seed)
            os._exit(0)
        last, moved, st, how = -1, time.time(), None, "exit"
        while True:
            p, s = os.waitpid(pid, os.WNOHANG)
            if p:
                st = s
                break
            n = struct.unpack("q", counter[:8])[0]
            if n != last:
                last, moved = n, time.time()
            if time.time() - moved > 1 or time.time() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                how = "killed: a call blocked" if time.time() <= deadline else "killed at the deadline"
                blocked += 1
                break
            time.sleep(0.02)
        if st is not None and os.WIFSIGNALED(st):
            how = "signal %d" % os.WTERMSIG(st)
        total += struct.unpack("q", counter[:8])[0]
    after = os.fork()
    if after == 0:
        os.execv("/bin/true", ["true"])
    _, st2 = os.waitpid(after, 0)
    return {"ended": how, "calls": total, "blocked": blocked, "agent": agent_alive(),
            "fork_exec": os.WIFEXITED(st2) and os.WEXITSTATUS(st2) == 0}