"""File metadata, symlinks, PTY resize and error texts as E2B's envd gives
them, through the sync and the async client.

The expectations are envd's (e2b-dev/infra packages/envd): metadata is the
file's user.e2b.* xattrs, replaced as a whole by every upload; a symlink's
target is resolved to the end and absolute (a broken link names itself);
error messages are envd's texts, which the SDKs pass on as the exception's
message.
"""

import asyncio
import threading
import time

import httpx
import pytest

from e2b import (
    AsyncSandbox,
    CommandExitException,
    FileNotFoundException,
    FileType,
    InvalidArgumentException,
    NotFoundException,
    PtySize,
    Sandbox,
    SandboxException,
)
from e2b.sandbox.filesystem.filesystem import WriteEntry


def test_metadata_round_trip_and_overwrite(sandbox: Sandbox):
    files = sandbox.files
    md = {"author": "mish", "purpose": "upload"}
    assert files.write("meta.txt", "one", metadata=md).metadata == md
    assert files.get_info("meta.txt").metadata == md
    # Keys are lower-cased by the sandbox, as envd does.
    assert files.write("upper.txt", "x", metadata={"Owner": "Ana"}).metadata == {"owner": "Ana"}
    # Listing and renaming carry it.
    listed = {e.name: e.metadata for e in files.list("/home/user")}
    assert listed["meta.txt"] == md and listed["upper.txt"] == {"owner": "Ana"}
    assert files.rename("meta.txt", "moved.txt").metadata == md
    # An overwrite replaces the whole set: fewer keys, then none.
    assert files.write("moved.txt", "two", metadata={"author": "ana"}).metadata == {"author": "ana"}
    assert files.get_info("moved.txt").metadata == {"author": "ana"}
    info = files.write("moved.txt", "three")
    assert info.metadata is None
    assert files.get_info("moved.txt").metadata is None
    assert files.read("moved.txt") == "three"
    # write_files applies one map to every file (octet-stream uploads too).
    infos = files.write_files([WriteEntry(path="/tmp/m1.txt", data="1"), WriteEntry(path="/tmp/m2.txt", data="2")],
                              metadata={"batch": "b1"})
    assert [i.metadata for i in infos] == [{"batch": "b1"}] * 2
    assert files.write("/tmp/m3.txt", "3", metadata={"k": "v"}, use_octet_stream=True).metadata == {"k": "v"}


def test_metadata_from_xattrs_and_refusals(sandbox: Sandbox, raw):
    sandbox.files.write("/tmp/x.txt", "x")
    # An xattr set inside the sandbox in the user.e2b. namespace is metadata too.
    sandbox.commands.run("python3 -c \"import os; os.setxattr('/tmp/x.txt', 'user.e2b.origin', b'inside'); "
                         "os.setxattr('/tmp/x.txt', 'user.other', b'no')\"")
    assert sandbox.files.get_info("/tmp/x.txt").metadata == {"origin": "inside"}

    # The SDK checks keys and values first; spaced refuses what gets past it
    # with envd's 400 and text, and writes nothing.
    with pytest.raises(InvalidArgumentException):
        sandbox.files.write("/tmp/never.txt", "x", metadata={"bad key": "v"})
    r = raw.post("/files", params={"path": "/tmp/never.txt"}, content=b"x",
                 headers={"E2b-Sandbox-Id": sandbox.sandbox_id, "X-Access-Token": sandbox._envd_access_token,
                          "Content-Type": "application/octet-stream",
                          "X-Metadata-Big": "v" * 5000})
    assert r.status_code == 400, r.text
    assert r.json()["message"] == "invalid metadata: total metadata size 5012 exceeds 4096 bytes"
    assert not sandbox.files.exists("/tmp/never.txt")


def test_symlink_entries(sandbox: Sandbox):
    sandbox.files.write("/home/user/links/target.txt", "t")
    sandbox.commands.run("ln -s target.txt rel && ln -s /home/user/links/rel chain && "
                         "ln -s missing broken && ln -s /home/user/links dirlink", cwd="/home/user/links")
    for name in ("rel", "chain"):
        info = sandbox.files.get_info(f"/home/user/links/{name}")
        # Newer envd marks the link (is_symlink) and the Python SDK reports SYMLINK;
        # the target is resolved to the end, absolute.
        assert info.type == FileType.SYMLINK, info
        assert info.symlink_target == "/home/user/links/target.txt", info
        assert info.permissions == "Lrwxrwxrwx"
        assert info.mode == 0o644  # the target's permission bits
    broken = sandbox.files.get_info("/home/user/links/broken")
    assert broken.type == FileType.SYMLINK and broken.symlink_target == "/home/user/links/broken", broken
    assert broken.mode == 0
    assert sandbox.files.get_info("/home/user/links/dirlink").symlink_target == "/home/user/links"
    assert sandbox.files.get_info("/home/user/links/target.txt").symlink_target is None
    # The SDK leaves out of a listing what has no type: the broken link.
    listed = {e.name: e.symlink_target for e in sandbox.files.list("/home/user/links")}
    assert listed == {"target.txt": None, "rel": "/home/user/links/target.txt",
                      "chain": "/home/user/links/target.txt", "dirlink": "/home/user/links"}


# A foreground program that prints the window size at each SIGWINCH (a
# shell's trap would not fire: the signal goes to the foreground job).
WINCH = (b"python3 -c \"import os, signal, time; signal.signal(signal.SIGWINCH, lambda *a: "
         b"print('winch=%d %d' % os.get_terminal_size()[::-1], flush=True)); print('ready', flush=True); "
         b"time.sleep(60)\"\n")


def test_pty_resize_while_running_and_errors(sandbox: Sandbox):
    out = bytearray()
    h = sandbox.pty.create(PtySize(rows=24, cols=80))
    reader = threading.Thread(target=lambda: [out.extend(p) for _, _, p in h if p], daemon=True)
    reader.start()
    sandbox.pty.send_stdin(h.pid, WINCH)
    deadline = time.monotonic() + 10
    while b"ready\r\n" not in out and time.monotonic() < deadline:
        time.sleep(0.05)
    sandbox.pty.resize(h.pid, PtySize(rows=50, cols=132))
    while b"winch=50 132" not in out and time.monotonic() < deadline:
        time.sleep(0.05)
    assert b"winch=50 132" in out, out.decode(errors="replace")
    assert sandbox.pty.kill(h.pid) is True
    reader.join(10)
    # envd forgets a process when it ends: a resize of it is not found.
    with pytest.raises(NotFoundException, match=f"process with pid {h.pid} not found"):
        sandbox.pty.resize(h.pid, PtySize(rows=10, cols=10))
    # A process without a terminal cannot be resized: envd's text.
    cmd = sandbox.commands.run("sleep 30", background=True)
    with pytest.raises(SandboxException, match="error resizing tty: tty not assigned to process"):
        sandbox.pty.resize(cmd.pid, PtySize(rows=10, cols=10))
    cmd.kill()


def test_error_texts(sandbox: Sandbox, raw):
    with pytest.raises(FileNotFoundException, match="^path '/tmp/nothing' does not exist$"):
        sandbox.files.read("/tmp/nothing")
    with pytest.raises(FileNotFoundException, match="^file not found: lstat /tmp/nothing: no such file or directory$"):
        sandbox.files.get_info("/tmp/nothing")
    with pytest.raises(FileNotFoundException, match="^directory not found: "):
        sandbox.files.list("/tmp/nothing")
    with pytest.raises(InvalidArgumentException, match="^path '/tmp' is a directory$"):
        sandbox.files.read("/tmp")

    sandbox.files.write("/tmp/signed.txt", "s")
    url = sandbox.download_url("/tmp/signed.txt", use_signature_expiration=1)
    assert httpx.get(url).text == "s"
    time.sleep(2.2)
    r = httpx.get(url)
    assert r.status_code == 401 and r.json() == {"code": 401, "message": "signature is already expired"}, r.text
    r = httpx.get(url.replace("signed.txt", "other.txt"))
    assert r.status_code == 401
    # Without the token or with another one: envd's texts.
    r = raw.get("/files", params={"path": "/tmp/signed.txt"}, headers={"E2b-Sandbox-Id": sandbox.sandbox_id})
    assert r.status_code == 401 and r.json()["message"] == "missing signature query parameter", r.text
    r = raw.get("/files", params={"path": "/tmp/signed.txt"},
                headers={"E2b-Sandbox-Id": sandbox.sandbox_id, "X-Access-Token": "wrong"})
    assert r.status_code == 401 and r.json()["message"] == "access token present in header but does not match"
    # An RPC with another sandbox's (or no) token: a Connect error with envd's text.
    r = raw.post("/process.Process/List", json={},
                 headers={"E2b-Sandbox-Id": sandbox.sandbox_id, "X-Access-Token": "wrong", "Connect-Protocol-Version": "1"})
    assert r.status_code == 401, r.text
    assert r.json()["message"] == "unauthorized access, please provide a valid access token or method signing if supported"


async def test_async_metadata_symlink_and_resize(async_sandbox: AsyncSandbox):
    files = async_sandbox.files
    assert (await files.write("/tmp/a.txt", "1", metadata={"k": "v"})).metadata == {"k": "v"}
    assert (await files.write("/tmp/a.txt", "2")).metadata is None
    assert (await files.get_info("/tmp/a.txt")).metadata is None
    await async_sandbox.commands.run("ln -s a.txt /tmp/l && ln -s gone /tmp/b")
    link = await files.get_info("/tmp/l")
    assert link.type == FileType.SYMLINK and link.symlink_target == "/tmp/a.txt"
    assert (await files.get_info("/tmp/b")).symlink_target == "/tmp/b"

    out = bytearray()
    h = await async_sandbox.pty.create(PtySize(rows=24, cols=80), on_data=lambda d: out.extend(d))
    await async_sandbox.pty.send_stdin(h.pid, WINCH)
    deadline = time.monotonic() + 10
    while b"ready\r\n" not in out and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await async_sandbox.pty.resize(h.pid, PtySize(rows=33, cols=99))
    while b"winch=33 99" not in out and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert b"winch=33 99" in out, out.decode(errors="replace")
    assert await async_sandbox.pty.kill(h.pid) is True
    with pytest.raises(CommandExitException):
        await h.wait()
    with pytest.raises(NotFoundException):
        await async_sandbox.pty.resize(h.pid, PtySize(rows=10, cols=10))
    with pytest.raises(FileNotFoundException, match="^path '/tmp/nothing' does not exist$"):
        await files.read("/tmp/nothing")
