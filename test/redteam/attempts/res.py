"""Resource attempts: each runs in a sandbox of its own, as root, and
measures what it got; resources_test.go compares that with the limits
and watches the host's cgroups meanwhile."""

import errno
import os
import resource
import signal
import sys
import threading
import time

from rt import tasks_of, tryio, wait_for

# The classic bomb: in gVisor its shells exit about as fast as they fork,
# so it peaks at a few tasks; the loop holds what it gets and runs into
# the limit.
CLASSIC_BOMB = "bomb() { bomb | bomb & }; bomb"
SHELL_BOMB = "while :; do sleep 30 & done"
PYTHON_BOMB = """
import os, time
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
"""


def start_as(uid, argv):
    """Starts argv as uid in a process group of its own; returns its pid."""
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        if uid != 0:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        os.execvp(argv[0], argv)
    return pid


def kill_group(pgid):
    for _ in range(200):
        if tryio(os.killpg, pgid, signal.SIGKILL)[1]:
            break
        time.sleep(0.01)
    while tryio(os.waitpid, -1, os.WNOHANG)[0] not in (None, (0, 0)):
        pass


def bomb_peak(uid, argv, seconds):
    pgid = start_as(uid, argv)
    peak, end = 0, time.time() + seconds
    while time.time() < end:
        peak = max(peak, tasks_of(uid)[1])
        time.sleep(0.02)
    kill_group(pgid)
    return peak


def fork_bomb(R, uid, shell, seconds=15):
    """Runs a fork bomb as uid and counts the tasks uid holds meanwhile,
    for a second after it reached the limit or at most seconds."""
    R["baseline"] = tasks_of(uid)[1]
    # The agent (pid 1, root) is a Go program: under the bomb its runtime
    # may start threads of its own that it keeps afterwards, so whether the
    # bomb's tasks are gone is judged without it.
    R["baseline_others"] = tasks_of(uid, skip=(1,))[1]
    R["limit"] = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    if shell:
        R["classic_peak"] = bomb_peak(uid, ["sh", "-c", CLASSIC_BOMB], 2)
    argv = ["sh", "-c", SHELL_BOMB] if shell else [sys.executable, "-c", PYTHON_BOMB]
    t0 = time.time()
    pgid = start_as(uid, argv)
    peak, probe = 0, ""
    reached = None
    while time.time() < t0 + seconds and (reached is None or time.time() < reached + 1):
        peak = max(peak, tasks_of(uid)[1])
        if reached is None and peak >= R["limit"]:
            reached = time.time()
        if uid == 0 and not probe and peak >= R["limit"]:
            # At the limit, a fork of root's own fails, with EAGAIN.
            try:
                pid = os.fork()
                if pid == 0:
                    os._exit(0)
                os.waitpid(pid, 0)
            except OSError as e:
                probe = errno.errorcode[e.errno]
        time.sleep(0.02)
    R["peak_tasks"], R["fork_at_limit"] = peak, probe
    R["bomb_seconds"] = time.time() - t0
    kill_group(pgid)
    R["recovered"] = wait_for(lambda: tasks_of(uid, skip=(1,))[1] <= R["baseline_others"] + 1, 15, 0.1)
    R["after"], R["after_others"] = tasks_of(uid)[1], tasks_of(uid, skip=(1,))[1]
    pid = start_as(uid, ["sh", "-c", "true & wait"])
    _, st = os.waitpid(pid, 0)
    R["fork_after"] = os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0


def threads_until_refused(R, cap=10000):
    ev = threading.Event()
    n, err = 0, ""
    try:
        while n < cap:
            threading.Thread(target=ev.wait, daemon=True).start()
            n += 1
    except RuntimeError as e:
        err = str(e)
    R["threads"], R["err"] = n, err
    R["tasks"] = tasks_of(os.getuid())[1]
    R["limit"] = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    ev.set()


def cpu_spin(R, procs, seconds):
    """Spins procs processes for seconds; CPU time they got against wall."""
    t0 = time.time()
    kids = []
    for _ in range(procs):
        pid = os.fork()
        if pid == 0:
            end = time.time() + seconds
            while time.time() < end:
                pass
            os._exit(0)
        kids.append(pid)
    for k in kids:
        os.waitpid(k, 0)
    t1 = time.time()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    R["start"], R["end"] = t0, t1
    R["cpu"] = ru.ru_utime + ru.ru_stime
    R["ratio"] = R["cpu"] / (t1 - t0)


def memory(R, chunks, mib):
    """Allocates and touches chunks of mib MiB in a child; how far it got."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        held = []
        for i in range(chunks):
            try:
                held.append(bytearray(mib << 20))
            except MemoryError:
                os.write(w, b"E")
                os._exit(3)
            os.write(w, b".")
        os._exit(0)
    os.close(w)
    got = b""
    while True:
        b = os.read(r, 64)
        if not b:
            break
        got += b
    _, st = os.waitpid(pid, 0)
    R["allocated_mib"] = got.count(b".") * mib
    R["memory_error"] = b"E" in got
    R["ended"] = "signal %d" % os.WTERMSIG(st) if os.WIFSIGNALED(st) else "exit %d" % os.WEXITSTATUS(st)


def open_files(R, cap=200000, hold=3, seconds=15):
    """Opens files (through the gofer) until refused, cap or the time is
    up ("time"), holding them a while for the host to count its own
    descriptors."""
    # The soft limit is 1,024: raised to the hard one first, as any
    # program may.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    fds, err = [], ""
    end = time.time() + seconds
    while len(fds) < cap:
        if time.time() >= end:
            err = "time"
            break
        try:
            fds.append(os.open("/etc/hostname" if len(fds) % 2 else "/usr/bin/python3.11", os.O_RDONLY))
        except OSError as e:
            err = errno.errorcode[e.errno]
            break
    R["opened"], R["err"] = len(fds), err
    time.sleep(hold)


def make_files(R, cap=100000, seconds=10):
    os.makedirs("/home/user/i", exist_ok=True)
    n, err = 0, ""
    end = time.time() + seconds
    while n < cap and time.time() < end:
        try:
            open("/home/user/i/%d" % n, "w").close()
            n += 1
        except OSError as e:
            err = errno.errorcode[e.errno]
            break
    R["created"], R["err"] = n, err
