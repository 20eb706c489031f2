"""Snapshots and filesystem-only pauses through the async client."""

import asyncio

import pytest

from e2b import AsyncSandbox, SandboxState

BOOT_ID = "/proc/sys/kernel/random/boot_id"


async def sleeping(sbx):
    return (await sbx.commands.run("pgrep -fx 'sleep 1000' || true")).stdout.split()


async def ids(paginator):
    return [s.snapshot_id for s in await paginator.next_items()]


async def test_snapshot_create_from_list_delete(async_sandbox: AsyncSandbox, test_id):
    await async_sandbox.files.write("/home/user/shared.txt", "shared snapshot content")
    bg = await async_sandbox.commands.run("sleep 1000", background=True)

    full = await AsyncSandbox.create_snapshot(async_sandbox.sandbox_id)
    disk = await async_sandbox.create_snapshot(name=f"async-{test_id}", mode="filesystem")
    assert disk.snapshot_id == f"async-{test_id}:default" and disk.names == [f"async-{test_id}"]
    try:
        a, b = await asyncio.gather(AsyncSandbox.create(full.snapshot_id), AsyncSandbox.create(disk.snapshot_id))
        try:
            assert await a.files.read("/home/user/shared.txt") == "shared snapshot content"
            assert await b.files.read("/home/user/shared.txt") == "shared snapshot content"
            assert str(bg.pid) in await sleeping(a)  # memory and processes came along
            assert await sleeping(b) == []  # the disk only
        finally:
            await a.kill()
            await b.kill()
        mine = await ids(async_sandbox.list_snapshots())
        assert sorted(mine) == sorted([full.snapshot_id, disk.snapshot_id])
        assert await ids(AsyncSandbox.list_snapshots(name=f"async-{test_id}")) == [disk.snapshot_id]
        assert full.snapshot_id in await ids(AsyncSandbox.list_snapshots())
    finally:
        assert await AsyncSandbox.delete_snapshot(full.snapshot_id) is True
        assert await AsyncSandbox.delete_snapshot(disk.snapshot_id) is True
    assert await AsyncSandbox.delete_snapshot(full.snapshot_id) is False
    assert await ids(async_sandbox.list_snapshots()) == []


async def test_pause_filesystem_only_and_lifecycle(test_id):
    sbx = await AsyncSandbox.create(metadata={"sandbox_test_id": test_id})
    try:
        await sbx.files.write("/home/user/marker.txt", "persisted")
        await sbx.commands.run("sleep 1000", background=True)
        boot = (await sbx.files.read(BOOT_ID)).strip()
        assert await sbx.pause(keep_memory=False) is True
        assert not await sbx.is_running()
        resumed = await sbx.connect()
        assert await resumed.files.read("/home/user/marker.txt") == "persisted"
        assert (await resumed.files.read(BOOT_ID)).strip() != boot
        assert await sleeping(resumed) == []
    finally:
        await AsyncSandbox.kill(sbx.sandbox_id)

    # on_timeout with the deprecated keep_memory: the same filesystem-only pause.
    sbx = await AsyncSandbox.create(timeout=4, lifecycle={"on_timeout": {"action": "pause", "keep_memory": False}},
                                    metadata={"sandbox_test_id": test_id})
    try:
        await sbx.files.write("/home/user/kept.txt", "kept")
        for _ in range(60):
            if (await AsyncSandbox.get_info(sbx.sandbox_id)).state == SandboxState.PAUSED:
                break
            await asyncio.sleep(0.5)
        else:
            pytest.fail("not paused at its timeout")
        again = await AsyncSandbox.connect(sbx.sandbox_id, on_resume="reboot")
        assert await again.files.read("/home/user/kept.txt") == "kept"
    finally:
        await AsyncSandbox.kill(sbx.sandbox_id)
