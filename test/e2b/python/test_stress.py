"""Connections follow the sandbox's life, and nothing hangs (issue 14, item 1).

Pause/connect/use cycles run beside a client reading a large command output
slowly, forks and creates, through the sync and the async client, and no SDK
call may wait more than LIMIT seconds: once, is_running() on a sandbox just
paused and reconnected hung for minutes (spaced reused a pooled connection
to the sandbox's old address). The first request after a kill, pause, resume
or fork reaches the new instance or gets E2B's error at once. A sandbox whose
agent is stuck (frozen here) does not hold is_running() until the SDK gives
up. And what the SDK raises when a sandbox is killed or paused under a
running command is E2B's: the connection drops at once, as E2B's envd's does
when its VM goes, and /health then says the sandbox is gone, so the SDK
raises its own "killed or reached its end of life" error.
"""

import asyncio
import os
import statistics
import subprocess
import threading
import time
import traceback

import pytest

from e2b import AsyncSandbox, Sandbox, SandboxNotRunningException

# Seconds any one call may take. The defect this hunts waited minutes. The
# slowest calls boot or restore a sandbox (create with the pool empty,
# connect, fork), which is CPU-bound: connect is the pause's teardown, then
# runsc's restore. It once took 6.3 s under the full CI load, of which up
# to 2 s were the egress set's refresh waiting for other sandboxes' pauses
# and kills, and a third of a core went to this test's own output (both
# fixed); on two cores shared with a full test run and other work (load
# 25-30) it still took up to 6.8 s.
LIMIT = 8.0
# Seconds the first request after a kill, pause, resume or fork may take:
# spaced closes the old instance's connections at once, so it is answered
# within a second.
NEXT_LIMIT = 3.0
DURATION = 20.0  # seconds of stress
KILLED = "The sandbox was killed or reached its end of life while the request was in flight."
# The slow reader's output, ~4 MB every 50 ms, of bytes made once: random
# data made without end took a third of a core, which every other call
# here waited behind.
MAKE_OUTPUT = "head -c 3000000 /dev/urandom | base64 -w 0 > /tmp/big"
ENDLESS_OUTPUT = "while :; do cat /tmp/big; sleep 0.05; done"


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

    async def acall(self, label, aw):
        start = time.monotonic()
        try:
            return await aw
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


def check_stream_end(err):
    """What a command stream open when its sandbox was paused or killed ends
    with: the connection dropped, and the SDK's /health probe found the
    sandbox gone (paused without auto_resume is gone too)."""
    assert isinstance(err, SandboxNotRunningException), repr(err)
    assert str(err).endswith(KILLED), str(err)


def report(capsys, title, timings, failures, stuck):
    with capsys.disabled():
        print(f"\n{title} ({DURATION:.0f} s, limit {LIMIT:.0f} s per call):\n{timings.report()}")
    assert not stuck, "a worker is still stuck"
    assert not failures, "\n".join(failures)
    assert not timings.slow(), f"calls slower than {LIMIT} s: {timings.slow()}"


def test_no_call_waits_beside_pauses_slow_readers_forks_and_creates(test_id, capsys):
    timings = Timings()
    stop, failed = threading.Event(), threading.Event()
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
        # An endless output read in small bites with pauses: the agent and
        # spaced hold it back for this client alone.
        sbx = create()
        sbx.commands.run(MAKE_OUTPUT)
        read = [0]

        def bite(chunk):
            read[0] += len(chunk)
            if not stop.is_set():
                time.sleep(0.02)  # then it drains what the kernel buffered, at once

        h = sbx.commands.run(ENDLESS_OUTPUT, background=True, timeout=0, retain_output=False)
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
        check_stream_end(outcome[0])

    def cycles(n):
        sbx = create()
        i = 0
        # Two cycles at least, however slow the machine: the second pauses
        # a resumed sandbox.
        while not failed.is_set() and (i < 2 or not stop.is_set()):
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
            assert got, "the stream of a paused sandbox ended cleanly"
            check_stream_end(got[0])

            timings.call("connect", sbx.connect)
            assert timings.call("is_running", sbx.is_running) is True
            assert timings.call("commands.run", sbx.commands.run, f"echo {n}-{i}").stdout == f"{n}-{i}\n"
            timings.call("files.write", sbx.files.write, "/home/user/cycle.txt", f"{n}-{i}")
            assert timings.call("files.read", sbx.files.read, "/home/user/cycle.txt") == f"{n}-{i}"
            # The process survived the pause with its memory: end it.
            assert timings.call("commands.kill", sbx.commands.kill, bg.pid) is True
            i += 1

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
            failed.set()
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
    report(capsys, "stress", timings, failures, [t for t in threads if t.is_alive()])


async def test_no_call_waits_beside_pauses_slow_readers_forks_and_creates_async(test_id, capsys):
    """The same through the async client: every worker a task on one event loop."""
    timings = Timings()
    stop = asyncio.Event()
    failures = []
    made = []
    meta = {"sandbox_test_id": test_id}

    async def create():
        sbx = await timings.acall("create", AsyncSandbox.create(metadata=meta))
        made.append(sbx.sandbox_id)
        return sbx

    async def slow_reader():
        sbx = await create()
        await sbx.commands.run(MAKE_OUTPUT)
        read = [0]

        async def bite(chunk):
            read[0] += len(chunk)
            if not stop.is_set():
                await asyncio.sleep(0.02)

        h = await sbx.commands.run(ENDLESS_OUTPUT, background=True, timeout=0, retain_output=False, on_stdout=bite)
        waiting = asyncio.ensure_future(h.wait())
        await stop.wait()
        assert not waiting.done(), f"the slow read ended early: {waiting}"
        assert read[0] > 0, "the slow reader got nothing"
        killed = time.monotonic()
        await timings.acall("kill", AsyncSandbox.kill(sbx.sandbox_id))
        done, _ = await asyncio.wait([waiting], timeout=LIMIT)
        assert done, "the stream of a killed sandbox did not end"
        timings.add("stream end after kill", time.monotonic() - killed)
        check_stream_end(waiting.exception())

    async def cycles(n):
        sbx = await create()
        i = 0
        while not failures and (i < 2 or not stop.is_set()):
            bg = await timings.acall("commands.run bg", sbx.commands.run("sleep 600", background=True))
            waiting = asyncio.ensure_future(bg.wait())
            assert await timings.acall("pause", sbx.pause()) is True
            paused = time.monotonic()
            done, _ = await asyncio.wait([waiting], timeout=LIMIT)
            assert done, "a command stream open at the pause did not end"
            timings.add("stream end after pause", time.monotonic() - paused)
            assert waiting.exception() is not None, "the stream of a paused sandbox ended cleanly"
            check_stream_end(waiting.exception())

            await timings.acall("connect", sbx.connect())
            assert await timings.acall("is_running", sbx.is_running()) is True
            out = await timings.acall("commands.run", sbx.commands.run(f"echo {n}-{i}"))
            assert out.stdout == f"{n}-{i}\n"
            await timings.acall("files.write", sbx.files.write("/home/user/cycle.txt", f"{n}-{i}"))
            assert await timings.acall("files.read", sbx.files.read("/home/user/cycle.txt")) == f"{n}-{i}"
            assert await timings.acall("commands.kill", sbx.commands.kill(bg.pid)) is True
            i += 1

    async def forks_and_creates():
        parent = await create()
        while not stop.is_set():
            for f in await timings.acall("fork", parent.fork(count=1)):
                made.append(f.sandbox_id)
                assert (await timings.acall("commands.run", f.commands.run("true"))).exit_code == 0
                await timings.acall("kill", f.kill())
            s = await create()
            assert await timings.acall("is_running", s.is_running()) is True
            await timings.acall("kill", s.kill())

    async def guard(aw):
        try:
            await aw
        except BaseException:  # noqa: BLE001 - every failure is reported
            failures.append(traceback.format_exc())
            stop.set()

    workers = [slow_reader()] + [cycles(n) for n in range(3)] + [forks_and_creates()]
    tasks = [asyncio.ensure_future(guard(w)) for w in workers]
    try:
        await asyncio.wait_for(stop.wait(), DURATION)
    except asyncio.TimeoutError:
        pass
    stop.set()
    _, stuck = await asyncio.wait(tasks, timeout=60)
    for t in stuck:
        t.cancel()
    for sid in made:
        try:
            await AsyncSandbox.kill(sid)
        except Exception:  # noqa: BLE001 - best effort
            pass
    report(capsys, "stress (async)", timings, failures, stuck)


def first_request_after(what, f, *args):
    """Runs the first request after a kill, pause, resume or fork and checks
    it was answered within NEXT_LIMIT; returns what it returned or raised."""
    start = time.monotonic()
    try:
        out = f(*args)
    except Exception as e:  # noqa: BLE001 - the caller checks it
        out = e
    took = time.monotonic() - start
    assert took < NEXT_LIMIT, f"the first {f.__name__} after {what} took {took:.1f} s"
    return out


def test_the_first_request_after_a_pause_resume_fork_or_kill(test_id):
    sbx = Sandbox.create(metadata={"sandbox_test_id": test_id})
    try:
        # Connections to the instance in use: spaced's pool holds them.
        sbx.files.write("/home/user/f.txt", "kept")
        assert sbx.commands.run("true").exit_code == 0 and sbx.is_running() is True

        assert sbx.pause() is True
        assert first_request_after("a pause", sbx.is_running) is False
        err = first_request_after("a pause", sbx.files.read, "/home/user/f.txt")
        assert isinstance(err, SandboxNotRunningException) and "was not found" in str(err), repr(err)
        err = first_request_after("a pause", sbx.commands.run, "true")
        assert isinstance(err, SandboxNotRunningException) and "was not found" in str(err), repr(err)

        sbx.connect()  # a new instance of the same sandbox
        assert first_request_after("a resume", sbx.files.read, "/home/user/f.txt") == "kept"
        assert first_request_after("a resume", sbx.commands.run, "echo x").stdout == "x\n"

        (child,) = sbx.fork(count=1)
        try:
            assert first_request_after("a fork", sbx.commands.run, "echo parent").stdout == "parent\n"
            assert first_request_after("a fork", child.files.read, "/home/user/f.txt") == "kept"
        finally:
            child.kill()

        assert sbx.kill() is True
        assert first_request_after("a kill", sbx.is_running) is False
        err = first_request_after("a kill", sbx.commands.run, "true")
        assert isinstance(err, SandboxNotRunningException) and "was not found" in str(err), repr(err)
    finally:
        Sandbox.kill(sbx.sandbox_id)


async def afirst_request_after(what, aw):
    start = time.monotonic()
    try:
        out = await aw
    except Exception as e:  # noqa: BLE001 - the caller checks it
        out = e
    took = time.monotonic() - start
    assert took < NEXT_LIMIT, f"the first request after {what} took {took:.1f} s"
    return out


async def test_the_first_request_after_a_pause_resume_fork_or_kill_async(test_id):
    sbx = await AsyncSandbox.create(metadata={"sandbox_test_id": test_id})
    try:
        await sbx.files.write("/home/user/f.txt", "kept")
        assert (await sbx.commands.run("true")).exit_code == 0 and await sbx.is_running() is True

        assert await sbx.pause() is True
        assert await afirst_request_after("a pause", sbx.is_running()) is False
        err = await afirst_request_after("a pause", sbx.files.read("/home/user/f.txt"))
        assert isinstance(err, SandboxNotRunningException) and "was not found" in str(err), repr(err)
        err = await afirst_request_after("a pause", sbx.commands.run("true"))
        assert isinstance(err, SandboxNotRunningException) and "was not found" in str(err), repr(err)

        await sbx.connect()
        assert await afirst_request_after("a resume", sbx.files.read("/home/user/f.txt")) == "kept"
        assert (await afirst_request_after("a resume", sbx.commands.run("echo x"))).stdout == "x\n"

        (child,) = await sbx.fork(count=1)
        try:
            assert (await afirst_request_after("a fork", sbx.commands.run("echo parent"))).stdout == "parent\n"
            assert await afirst_request_after("a fork", child.files.read("/home/user/f.txt")) == "kept"
        finally:
            await child.kill()

        assert await sbx.kill() is True
        assert await afirst_request_after("a kill", sbx.is_running()) is False
        err = await afirst_request_after("a kill", sbx.commands.run("true"))
        assert isinstance(err, SandboxNotRunningException) and "was not found" in str(err), repr(err)
    finally:
        await AsyncSandbox.kill(sbx.sandbox_id)


def runsc(*args):
    """Runs runsc on the daemon's sandboxes (e2b_test.go says where they are)."""
    cmd = [os.environ["SPACE_TEST_RUNSC"], "--root", os.environ["SPACE_TEST_RUNSC_ROOT"], *args]
    subprocess.run(cmd, check=True, capture_output=True, timeout=30)


# A stuck agent: the sandbox frozen (runsc pause) is live to spaced, but
# nothing in it answers. spaced answers /health within its bound for an
# agent's health (5 s, the SDKs' own health probe's) with a 502 that is not
# "not found", so is_running() is False long before the SDK's 60 s request
# timeout.
STUCK_LIMIT = 5.0 + NEXT_LIMIT


def test_a_stuck_agent_does_not_hold_is_running(sandbox: Sandbox, raw):
    assert sandbox.is_running() is True
    runsc("pause", sandbox.sandbox_id)
    try:
        start = time.monotonic()
        assert sandbox.is_running() is False
        assert time.monotonic() - start < STUCK_LIMIT
        r = raw.get("/health", headers={"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": "49983"})
        assert (r.status_code, r.json()["message"]) == (502, "The sandbox did not answer in time")
    finally:
        runsc("resume", sandbox.sandbox_id)
    assert sandbox.is_running() is True
    assert sandbox.commands.run("echo back").stdout == "back\n"


async def test_a_stuck_agent_does_not_hold_is_running_async(async_sandbox: AsyncSandbox):
    runsc("pause", async_sandbox.sandbox_id)
    try:
        start = time.monotonic()
        assert await async_sandbox.is_running() is False
        assert time.monotonic() - start < STUCK_LIMIT
    finally:
        runsc("resume", async_sandbox.sandbox_id)
    assert await async_sandbox.is_running() is True


def test_kill_under_a_running_command(sandbox: Sandbox):
    threading.Timer(1.0, Sandbox.kill, args=(sandbox.sandbox_id,)).start()
    start = time.monotonic()
    with pytest.raises(SandboxNotRunningException) as e:
        sandbox.commands.run("sleep 60")
    assert time.monotonic() - start < 1.0 + LIMIT
    check_stream_end(e.value)
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
    check_stream_end(e.value)
