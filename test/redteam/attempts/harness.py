"""Runs a group of red-team attempts inside a sandbox.

usage: python3 harness.py group.json

group.json lists {"id", "py": "module.function", "args": {...}}. Each
attempt runs in a forked child of its own session, so that a crash, a hang
or stray children stay contained, for at most RT_TIMEOUT seconds (20); the
child's whole session is killed after it. One line "RTRESULT {json}" is
printed per attempt, with the dict R the attempt filled.
"""

import importlib
import json
import os
import select
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def run_one(fn, args, timeout):
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        try:
            os.setsid()
        except OSError:
            pass
        R = {}
        try:
            fn(R, **args)
        except BaseException as e:  # the attempt's own failure is a result too
            R["exc"] = "%s: %s" % (type(e).__name__, e)
        with os.fdopen(wfd, "wb") as w:
            w.write(json.dumps(R, default=str).encode())
        os._exit(0)
    os.close(wfd)
    buf, deadline, timed_out = b"", time.time() + timeout, False
    while True:
        left = deadline - time.time()
        if left <= 0:
            timed_out = True
            break
        rd, _, _ = select.select([rfd], [], [], left)
        if not rd:
            timed_out = True
            break
        chunk = os.read(rfd, 65536)
        if not chunk:
            break
        buf += chunk
    os.close(rfd)
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass
    _, st = os.waitpid(pid, 0)
    try:
        R = json.loads(buf)
    except ValueError:
        R = {"harness": "no result", "status": st, "raw": buf[:300].decode("latin-1")}
    if timed_out:
        R["timeout"] = True
    return R


def main():
    with open(sys.argv[1]) as f:
        attempts = json.load(f)
    timeout = float(os.environ.get("RT_TIMEOUT", "20"))
    for a in attempts:
        mod, name = a["py"].rsplit(".", 1)
        fn = getattr(importlib.import_module(mod), name)
        R = run_one(fn, a.get("args") or {}, timeout)
        print("RTRESULT " + json.dumps({"id": a["id"], "r": R}), flush=True)


if __name__ == "__main__":
    main()
