"""The async client: the same flows, over the SDK's async transport (and the
WatchDir server-stream, which only the async client and JS use)."""

import asyncio
import time

import pytest

from e2b import (
    AsyncSandbox,
    CommandExitException,
    FileNotFoundException,
    FilesystemEventType,
    FileType,
    PtySize,
    SandboxNotFoundException,
    SandboxQuery,
    SandboxState,
)


async def test_run_and_errors(async_sandbox: AsyncSandbox):
    r = await async_sandbox.commands.run("echo out; echo err >&2")
    assert (r.stdout, r.stderr, r.exit_code) == ("out\n", "err\n", 0)
    with pytest.raises(CommandExitException) as e:
        await async_sandbox.commands.run("exit 7")
    assert e.value.exit_code == 7


async def test_streaming_callbacks(async_sandbox: AsyncSandbox):
    # The command waits for a file written only once its first line has
    # arrived: a stream held back to the end never ends (no timing).
    seen = []
    first = asyncio.Event()

    def on_stdout(line):
        seen.append(line)
        first.set()

    handle = await async_sandbox.commands.run(
        "echo 1; while [ ! -e /tmp/go-on ]; do sleep 0.05; done; echo 2",
        background=True,
        on_stdout=on_stdout,
        timeout=60,
    )
    await asyncio.wait_for(first.wait(), 60)
    assert seen == ["1\n"]
    await async_sandbox.files.write("/tmp/go-on", "")
    await handle.wait()
    assert seen == ["1\n", "2\n"]


async def test_background_connect_stdin_list_kill(async_sandbox: AsyncSandbox):
    bg = await async_sandbox.commands.run("sleep 1; echo bg", background=True)
    again = await async_sandbox.commands.connect(bg.pid)
    assert (await again.wait()).stdout == "bg\n"

    cat = await async_sandbox.commands.run("cat", background=True, stdin=True)
    await async_sandbox.commands.send_stdin(cat.pid, "piped\n")
    await async_sandbox.commands.close_stdin(cat.pid)
    assert (await cat.wait()).stdout == "piped\n"

    sleeper = await async_sandbox.commands.run("sleep 60", background=True)
    assert sleeper.pid in [p.pid for p in await async_sandbox.commands.list()]
    assert await async_sandbox.commands.kill(sleeper.pid) is True
    with pytest.raises(CommandExitException):
        await sleeper.wait()


async def test_pty(async_sandbox: AsyncSandbox):
    out = bytearray()
    h = await async_sandbox.pty.create(PtySize(rows=24, cols=80), on_data=lambda d: out.extend(d))
    await async_sandbox.pty.resize(h.pid, PtySize(rows=30, cols=100))
    await async_sandbox.pty.send_stdin(h.pid, b"stty size; echo async-$((6*7)); exit\n")
    await h.wait()
    text = out.decode(errors="replace")
    assert "30 100" in text and "async-42" in text


async def test_files(async_sandbox: AsyncSandbox):
    files = async_sandbox.files
    await files.write("/tmp/a/x.txt", "hello")
    assert await files.read("/tmp/a/x.txt") == "hello"
    assert [(e.name, e.type) for e in await files.list("/tmp/a")] == [("x.txt", FileType.FILE)]
    assert await files.exists("/tmp/a/x.txt")
    assert (await files.get_info("/tmp/a/x.txt")).size == 5
    assert await files.make_dir("/tmp/a/d") is True
    assert await files.make_dir("/tmp/a/d") is False
    await files.rename("/tmp/a/x.txt", "/tmp/a/d/y.txt")
    assert await files.read("/tmp/a/d/y.txt") == "hello"
    await files.remove("/tmp/a")
    assert not await files.exists("/tmp/a")
    with pytest.raises(FileNotFoundException):
        await files.read("/tmp/a/d/y.txt")


async def test_watch_dir_stream(async_sandbox: AsyncSandbox):
    await async_sandbox.files.make_dir("/tmp/w")
    events = []
    got = asyncio.Event()
    sub_seen = asyncio.Event()

    def on_event(e):
        events.append(e)
        if e.name == "sub" and e.type == FilesystemEventType.CREATE:
            sub_seen.set()
        if e.type == FilesystemEventType.REMOVE:
            got.set()

    handle = await async_sandbox.files.watch_dir("/tmp/w", on_event=on_event, recursive=True)
    try:
        await async_sandbox.files.make_dir("/tmp/w/sub")
        # A recursive watch reaches a new directory when its CREATE event is
        # handled (inotify, as E2B's envd): what is made and removed in it
        # before that is not seen; what is made and kept is reported then.
        await asyncio.wait_for(sub_seen.wait(), 10)
        await async_sandbox.files.write("/tmp/w/sub/f.txt", "x")
        await async_sandbox.files.remove("/tmp/w/sub/f.txt")
        await asyncio.wait_for(got.wait(), 10)
    finally:
        await handle.stop()
    names = {(e.name, e.type) for e in events}
    assert ("sub/f.txt", FilesystemEventType.CREATE) in names, events
    assert ("sub/f.txt", FilesystemEventType.REMOVE) in names, events


async def test_lifecycle(test_id):
    sbx = await AsyncSandbox.create(metadata={"sandbox_test_id": test_id}, timeout=120)
    try:
        info = await sbx.get_info()
        assert info.state == SandboxState.RUNNING
        assert info.metadata["sandbox_test_id"] == test_id
        await sbx.set_timeout(60)
        listed = await AsyncSandbox.list(query=SandboxQuery(metadata={"sandbox_test_id": test_id})).next_items()
        assert [s.sandbox_id for s in listed] == [sbx.sandbox_id]
        # The first sample comes an interval or two after the create.
        deadline = time.monotonic() + 15
        metrics = await sbx.get_metrics()
        while not metrics and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            metrics = await sbx.get_metrics()
        assert metrics and metrics[-1].mem_total > 0
        other = await AsyncSandbox.connect(sbx.sandbox_id)
        assert (await other.commands.run("echo c")).stdout == "c\n"
    finally:
        assert await sbx.kill() is True
    assert await sbx.is_running() is False
    with pytest.raises(SandboxNotFoundException):
        await AsyncSandbox.get_info(sbx.sandbox_id)
