"""Volumes through the async client (AsyncVolume, AsyncSandbox)."""

import uuid

import pytest

from e2b import (
    AsyncSandbox,
    AsyncVolume,
    SandboxException,
    VolumeFileType,
    VolumePathNotFoundException,
)


async def test_async_volume_round_trip():
    vol = await AsyncVolume.create(f"pya-{uuid.uuid4().hex[:10]}")
    try:
        info = await AsyncVolume.get_info(vol.volume_id)
        assert info.name == vol.name and info.token == vol.token
        assert vol.name in [v.name for v in await AsyncVolume.list()]

        await vol.make_dir("/work/in", force=True)
        e = await vol.write_file("/work/in/a.txt", "async")
        assert e.type == VolumeFileType.FILE and e.size == 5
        assert await vol.read_file("/work/in/a.txt") == "async"
        chunks = [c async for c in await vol.read_file("/work/in/a.txt", format="stream")]
        assert b"".join(chunks) == b"async"
        assert [x.name for x in await vol.list("/work")] == ["in"]
        with pytest.raises(VolumePathNotFoundException):
            await vol.get_info("/missing")

        sbx = await AsyncSandbox.create(volume_mounts={"/mnt/v": vol})
        try:
            assert await sbx.files.read("/mnt/v/work/in/a.txt") == "async"
            await sbx.files.write("/mnt/v/from-sandbox.txt", "hi")
            assert await vol.read_file("/from-sandbox.txt") == "hi"
            with pytest.raises(SandboxException) as e:
                await AsyncSandbox.create(volume_mounts={"/mnt/v": vol})
            assert "409" in str(e.value)
        finally:
            await sbx.kill()

        again = await AsyncSandbox.create(volume_mounts={"/data": vol.name})
        try:
            assert (await again.commands.run("cat /data/from-sandbox.txt")).stdout == "hi"
        finally:
            await again.kill()
        await vol.remove("/work")
        assert not await vol.exists("/work/in")
    finally:
        assert await AsyncVolume.destroy(vol.volume_id) is True
