"""Snapshots and filesystem-only pauses through the sync client.

A snapshot is taken of a running sandbox, which runs on; any number of
sandboxes start from it by passing its ID (or name) as the template. By
default it keeps memory and processes (a sandbox from it goes on from
them); mode="filesystem" keeps the disk only (a sandbox from it boots
afresh). A pause with keep_memory=False (mode="filesystem") keeps the disk
only: the processes end and a resume boots a fresh sandbox on that disk.
"""

import time

import httpx
import pytest

from conftest import API_KEY, API_URL
from e2b import (
    InvalidArgumentException,
    Sandbox,
    SandboxException,
    SandboxNotFoundException,
    SandboxQuery,
    SandboxState,
)

BOOT_ID = "/proc/sys/kernel/random/boot_id"


def detail(sandbox_id):
    """GET /sandboxes/{id} as sent (pauseMode is not in the SDK's SandboxInfo)."""
    r = httpx.get(f"{API_URL}/sandboxes/{sandbox_id}", headers={"X-API-KEY": API_KEY}, timeout=30)
    r.raise_for_status()
    return r.json()


def alive(sbx, pid):
    """Whether the background `sleep 1000` with this pid runs in sbx (a fresh
    boot may give its pid to another process)."""
    pids = sbx.commands.run("pgrep -fx 'sleep 1000' || true").stdout.split()
    return "alive" if str(pid) in pids else "gone"


def wait_paused(sandbox_id, seconds=30):
    deadline = time.time() + seconds
    while Sandbox.get_info(sandbox_id).state != SandboxState.PAUSED:
        assert time.time() < deadline, "not paused at its timeout"
        time.sleep(0.5)


def ids(paginator):
    return [s.snapshot_id for s in paginator.next_items()]


def test_full_snapshot_makes_running_copies(sandbox: Sandbox, test_id):
    sandbox.files.write("/home/user/shared.txt", "from the source")
    bg = sandbox.commands.run("sleep 1000", background=True)
    boot = sandbox.files.read(BOOT_ID).strip()

    snap = sandbox.create_snapshot()
    assert snap.snapshot_id and snap.names == []
    # The source runs on, its process too.
    assert sandbox.is_running()
    assert alive(sandbox, bg.pid) == "alive"

    copies = [Sandbox.create(snap.snapshot_id, metadata={"sandbox_test_id": test_id}) for _ in range(2)]
    try:
        for c in copies:
            assert c.sandbox_id != sandbox.sandbox_id
            assert c.get_info().state == SandboxState.RUNNING
            assert c.files.read("/home/user/shared.txt") == "from the source"
            # Memory and processes came along: the same boot, the same process.
            assert c.files.read(BOOT_ID).strip() == boot
            assert alive(c, bg.pid) == "alive"
        copies[0].files.write("/home/user/shared.txt", "changed in one copy")
        assert copies[1].files.read("/home/user/shared.txt") == "from the source"
        assert sandbox.files.read("/home/user/shared.txt") == "from the source"

        assert snap.snapshot_id in ids(Sandbox.list_snapshots())
        assert ids(sandbox.list_snapshots()) == [snap.snapshot_id]
        assert ids(Sandbox.list_snapshots(sandbox_id=sandbox.sandbox_id)) == [snap.snapshot_id]
        assert ids(Sandbox.list_snapshots(sandbox_id=copies[0].sandbox_id)) == []
        assert ids(Sandbox.list_snapshots(name=snap.snapshot_id)) == [snap.snapshot_id]
    finally:
        for c in copies:
            c.kill()
        assert Sandbox.delete_snapshot(snap.snapshot_id) is True
    assert Sandbox.delete_snapshot(snap.snapshot_id) is False
    with pytest.raises(SandboxException) as e:
        Sandbox.create(snap.snapshot_id)
    assert e.value.status_code == 404


def test_named_filesystem_snapshot(sandbox: Sandbox, test_id):
    name = f"snap-{test_id}"
    sandbox.files.write("/home/user/app.txt", "v1")
    bg = sandbox.commands.run("sleep 1000", background=True)
    boot = sandbox.files.read(BOOT_ID).strip()

    snap = sandbox.create_snapshot(name=name, mode="filesystem")
    assert snap.snapshot_id == f"{name}:default" and snap.names == [name]
    try:
        c = Sandbox.create(name, metadata={"sandbox_test_id": test_id})
        try:
            assert c.files.read("/home/user/app.txt") == "v1"
            # Only the disk: a fresh boot, without the source's process.
            assert c.files.read(BOOT_ID).strip() != boot
            assert alive(c, bg.pid) == "gone"
            assert c.commands.run("whoami && pwd").stdout == "user\n/home/user\n"
        finally:
            c.kill()

        # Same name again: it replaces the first; another tag is another snapshot.
        sandbox.files.write("/home/user/app.txt", "v2")
        again = Sandbox.create_snapshot(sandbox.sandbox_id, name=name, mode="filesystem")
        assert again.snapshot_id == f"{name}:default"
        tagged = sandbox.create_snapshot(name=f"{name}:v2")
        assert tagged.snapshot_id == f"{name}:v2" and tagged.names == [name]
        assert sorted(ids(Sandbox.list_snapshots(name=name))) == [f"{name}:default", f"{name}:v2"]
        assert ids(Sandbox.list_snapshots(name=f"{name}:v2")) == [f"{name}:v2"]
        assert ids(Sandbox.list_snapshots(name=f"{name}-does-not-exist")) == []
        c = Sandbox.create(f"{name}:default")
        try:
            assert c.files.read("/home/user/app.txt") == "v2"
        finally:
            c.kill()
        # Paging: one per page.
        pages = Sandbox.list_snapshots(name=name, limit=1)
        first, second = pages.next_items(), pages.next_items()
        assert len(first) == 1 and len(second) == 1 and first != second
        assert not pages.has_next or pages.next_items() == []
    finally:
        assert Sandbox.delete_snapshot(name) is True  # every tag of the name
    assert ids(Sandbox.list_snapshots(name=name)) == []


def test_snapshot_refusals(sandbox: Sandbox):
    for name, status in [("team/app", 400), ("-app", 400), ("base", 409)]:
        with pytest.raises(SandboxException) as e:
            sandbox.create_snapshot(name=name)
        assert e.value.status_code == status, e.value
    assert ids(sandbox.list_snapshots()) == []
    with pytest.raises(SandboxException) as e:
        Sandbox.create("no-such-snapshot:v9")
    assert e.value.status_code == 404
    other = Sandbox.create()
    other.kill()
    with pytest.raises(SandboxNotFoundException):
        Sandbox.create_snapshot(other.sandbox_id)


def test_pause_filesystem_only(test_id):
    sbx = Sandbox.create(envs={"KEPT_ENV": "yes"}, metadata={"sandbox_test_id": test_id})
    try:
        sbx.files.write("/home/user/fs-only-marker.txt", "persisted")
        bg = sbx.commands.run("sleep 1000", background=True)
        boot = sbx.files.read(BOOT_ID).strip()

        assert sbx.pause(keep_memory=False) is True
        assert sbx.pause(keep_memory=False) is False  # already paused
        assert not sbx.is_running()
        assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.PAUSED
        assert detail(sbx.sandbox_id)["pauseMode"] == "filesystem"
        paused = Sandbox.list(query=SandboxQuery(metadata={"sandbox_test_id": test_id}, state=[SandboxState.PAUSED]))
        assert [s.sandbox_id for s in paused.next_items()] == [sbx.sandbox_id]

        resumed = sbx.connect()
        assert resumed.is_running() and resumed.sandbox_id == sbx.sandbox_id
        assert resumed.files.read("/home/user/fs-only-marker.txt") == "persisted"
        assert resumed.files.read(BOOT_ID).strip() != boot  # cold-booted
        assert alive(resumed, bg.pid) == "gone"
        assert resumed.commands.run("echo $KEPT_ENV; whoami").stdout == "yes\nuser\n"

        # mode="filesystem" is the same pause; on_resume="reboot" resumes it.
        assert resumed.pause(mode="filesystem") is True
        again = Sandbox.connect(sbx.sandbox_id, on_resume="reboot")
        assert again.files.read("/home/user/fs-only-marker.txt") == "persisted"
    finally:
        Sandbox.kill(sbx.sandbox_id)


def test_reboot_of_a_full_pause_is_refused(sandbox: Sandbox):
    bg = sandbox.commands.run("sleep 1000", background=True)
    assert sandbox.pause() is True
    assert detail(sandbox.sandbox_id)["pauseMode"] == "full"
    with pytest.raises(SandboxException) as e:
        Sandbox.connect(sandbox.sandbox_id, on_resume="reboot")
    assert e.value.status_code == 409 and "memory" in str(e.value)
    assert Sandbox.get_info(sandbox.sandbox_id).state == SandboxState.PAUSED
    again = sandbox.connect()
    assert alive(again, bg.pid) == "alive"


def test_lifecycle_filesystem_auto_pause(test_id):
    sbx = Sandbox.create(timeout=4, lifecycle={"on_timeout": {"action": "pause", "mode": "filesystem"}},
                         metadata={"sandbox_test_id": test_id})
    try:
        assert sbx.get_info().lifecycle == {"on_timeout": "pause", "auto_resume": False}
        sbx.files.write("/home/user/kept.txt", "kept")
        bg = sbx.commands.run("sleep 1000", background=True)
        wait_paused(sbx.sandbox_id)
        assert detail(sbx.sandbox_id)["pauseMode"] == "filesystem"
        again = Sandbox.connect(sbx.sandbox_id, timeout=60)
        assert again.files.read("/home/user/kept.txt") == "kept"
        assert alive(again, bg.pid) == "gone"
    finally:
        Sandbox.kill(sbx.sandbox_id)


def test_lifecycle_validation(api, test_id):
    # The SDK's own checks.
    with pytest.raises(InvalidArgumentException):
        Sandbox.create(lifecycle={"on_timeout": {"action": "pause", "mode": "filesystem"}, "auto_resume": True})
    with pytest.raises(InvalidArgumentException):
        Sandbox.create(lifecycle={"on_timeout": {"action": "kill", "mode": "filesystem"}})
    # spaced's, for a client that skips them.
    r = api.post("/v2/sandboxes", json={"templateID": "base", "autoPause": True, "autoPauseMemory": False,
                                        "autoResume": {"enabled": True}, "metadata": {"sandbox_test_id": test_id}})
    assert r.status_code == 400 and r.json()["code"] == 400 and "auto-resume" in r.json()["message"], r.text
    assert Sandbox.list(query=SandboxQuery(metadata={"sandbox_test_id": test_id})).next_items() == []


def test_auto_resume_skips_a_filesystem_pause(test_id):
    sbx = Sandbox.create(lifecycle={"on_timeout": "pause", "auto_resume": True}, metadata={"sandbox_test_id": test_id})
    try:
        sbx.files.write("/home/user/kept.txt", "kept")
        assert sbx.pause(keep_memory=False) is True
        # Traffic does not wake a sandbox that would boot afresh.
        assert sbx.is_running() is False
        with pytest.raises(Exception):
            sbx.files.read("/home/user/kept.txt", request_timeout=10)
        assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.PAUSED
        again = sbx.connect()
        assert again.files.read("/home/user/kept.txt") == "kept"
    finally:
        Sandbox.kill(sbx.sandbox_id)
