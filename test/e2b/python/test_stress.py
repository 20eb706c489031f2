"""Connections follow the sandbox's life (issue 14, item 1).

Pause/connect/use cycles run beside a client reading a large command output
slowly, forks and creates, and no SDK call may wait more than LIMIT seconds:
once, is_running() on a sandbox just paused and reconnected hung for minutes
(spaced reused a pooled connection to the sandbox's old address). And what
the SDK raises when a sandbox is killed or paused under a running command is
E2B's: its stream ends at once with "the connection to sandbox <id> ended
before the stream completed", and /health then says the sandbox is gone.
"""

import asyncio
import statistics
import threading
import time
import traceback

import pytest

from e2b import AsyncSandbox, Sandbox, SandboxException, SandboxNotRunningException

# Seconds any one call may take. The defect this hunts waited minutes; a
# resume of a sandbox under the full CI load (every suite at once on two
# cores) took 6.3 s once, which is slow but no hang.
LIMIT = 15.0
DURATION = 25.0  # seconds of stress
KILLED = "The sandbox was killed or reached its end of life while the request was in flight."


class Timings:
    def __init__(self):
        self.lock = threading.Lock()
        self.calls = {}

    def call(self, label, f, *args, **kwargs):
        start = time.monotonic()
        try:
            return f(*args, **kwargs)
        finally:
            self.add(label, time.monotonic() - start)

    def add(self, label, took):
        with self.lock:
            self.calls.setdefault(label, []).append(took)

    def report(self):
        lines = []
        for label, xs in sorted(self.calls.items()):
            lines.append(f"  {label:<22} n={len(xs):<4} p50={statistics.median(xs):.3f}s max={max(xs):.3f}s")
        return "\n".join(lines)

    def slow(self):
        return {label: max(xs) for label, xs in self.calls.items() if max(xs) > LIMIT}


def test_no_call_waits_beside_pauses_slow_readers_forks_and_creates(test_id, capsys):
    timings = Timings()
    stop = threading.Event()
    failures = []
    made = []  # sandboxes to kill at the end
    made_lock = threading.Lock()
    meta = {"sandbox_test_id": test_id}

    def create():
        sbx = timings.call("create", Sandbox.create, metadata=meta)
        with made_lock:
            made.append(sbx.sandbox_id)
        return sbx

    def slow_reader():
        # An endless output (~4 MB every 50 ms) read in small bites with
        # pauses: the agent and spaced hold it back for this client alone.
        sbx = create()
        read = [0]

        def bite(chunk):
            read[0] += len(chunk)
            if not stop.is_set():
                time.sleep(0.02)  # then it drains what the kernel buffered, at once

        h = sbx.commands.run(
            "while :; do head -c 3000000 /dev/urandom | base64 -w 0; sleep 0.05; done",
            background=True, timeout=0, retain_output=False,
        )
        done = threading.Event()
        outcome = []

        def waiter():
            try:
                h.wait(on_stdout=bite)
                outcome.append(None)
            except Exception as e:  # noqa: BLE001 - reported below
                outcome.append(e)
            done.set()

        threading.Thread(target=waiter, daemon=True).start()
        stop.wait()
        assert not done.is_set(), f"the slow read ended early: {outcome}"
        assert read[0] > 0, "the slow reader got nothing"
        # Killed under it: the stream ends at once, with E2B's error.
        killed = time.monotonic()
        timings.call("kill", Sandbox.kill, sbx.sandbox_id)
        assert done.wait(LIMIT), "the stream of a killed sandbox did not end"
        timings.add("stream end after kill", time.monotonic() - killed)
        assert isinstance(outcome[0], SandboxNotRunningException), repr(outcome[0])
        assert "ended before the stream completed" in str(outcome[0]) and KILLED in str(outcome[0])

    def cycles(n):
        sbx = create()
        i = 0
        while not stop.is_set():
            # A command stream open across the pause: it must end, not hang.
            bg = timings.call("commands.run bg", sbx.commands.run, "sleep 600", background=True)
            ended = threading.Event()
            got = []

            def waiter(bg=bg, ended=ended, got=got):
                try:
                    bg.wait()
                except Exception as e:  # noqa: BLE001 - checked below
                    got.append(e)
                ended.set()

            threading.Thread(target=waiter, daemon=True).start()
            assert timings.call("pause", sbx.pause) is True
            paused = time.monotonic()
            assert ended.wait(LIMIT), "a command stream open at the pause did not end"
            timings.add("stream end after pause", time.monotonic() - paused)
            assert got and isinstance(got[0], SandboxException), repr(got)
            assert "ended before the stream completed" in str(got[0])

            timings.call("connect", sbx.connect)
            assert timings.call("is_running", sbx.is_running) is True
            assert timings.call("commands.run", sbx.commands.run, f"echo {n}-{i}").stdout == f"{n}-{i}\n"
            timings.call("files.write", sbx.files.write, "/home/user/cycle.txt", f"{n}-{i}")
            assert timings.call("files.read", sbx.files.read, "/home/user/cycle.txt") == f"{n}-{i}"
            # The process survived the pause with its memory: end it.
            assert timings.call("commands.kill", sbx.commands.kill, bg.pid) is True
            i += 1
        assert i >= 2, f"only {i} pause/connect cycles in {DURATION} s"

    def forks_and_creates():
        parent = create()
        while not stop.is_set():
            for f in timings.call("fork", parent.fork, count=1):
                with made_lock:
                    made.append(f.sandbox_id)
                assert timings.call("commands.run", f.commands.run, "true").exit_code == 0
                timings.call("kill", f.kill)
            s = create()
            assert timings.call("is_running", s.is_running) is True
            timings.call("kill", s.kill)

    def guard(f, *args):
        try:
            f(*args)
        except BaseException:  # noqa: BLE001 - every failure is reported
            failures.append(traceback.format_exc())
            stop.set()

    threads = [threading.Thread(target=guard, args=(slow_reader,))]
    threads += [threading.Thread(target=guard, args=(cycles, n)) for n in range(3)]
    threads += [threading.Thread(target=guard, args=(forks_and_creates,))]
    for t in threads:
        t.start()
    stop.wait(DURATION)
    stop.set()
    for t in threads:
        t.join(60)
    for sid in made:
        try:
            Sandbox.kill(sid)
        except Exception:  # noqa: BLE001 - best effort
            pass
    with capsys.disabled():
        print(f"\nstress ({DURATION:.0f} s, limit {LIMIT:.0f} s per call):\n{timings.report()}")
    assert not [t for t in threads if t.is_alive()], "a worker is still stuck"
    assert not failures, "\n".join(failures)
    assert not timings.slow(), f"calls slower than {LIMIT} s: {timings.slow()}"


def test_kill_under_a_running_command(sandbox: Sandbox):
    threading.Timer(1.0, Sandbox.kill, args=(sandbox.sandbox_id,)).start()
    start = time.monotonic()
    with pytest.raises(SandboxNotRunningException) as e:
        sandbox.commands.run("sleep 60")
    assert time.monotonic() - start < 1.0 + LIMIT
    assert str(e.value) == (
        f"the connection to sandbox {sandbox.sandbox_id} ended before the stream completed: {KILLED}"
    )
    assert sandbox.is_running() is False


async def test_kill_under_a_running_command_async(async_sandbox: AsyncSandbox):
    async def kill_soon():
        await asyncio.sleep(1.0)
        await AsyncSandbox.kill(async_sandbox.sandbox_id)

    killer = asyncio.create_task(kill_soon())
    start = time.monotonic()
    with pytest.raises(SandboxNotRunningException) as e:
        await async_sandbox.commands.run("sleep 60")
    await killer
    assert time.monotonic() - start < 1.0 + LIMIT
    assert str(e.value) == (
        f"the connection to sandbox {async_sandbox.sandbox_id} ended before the stream completed: {KILLED}"
    )
