"""Volumes through the sync client: Volume.create/get_info/list/connect/destroy,
the volume content API (E2B_VOLUME_API_URL, the volume's bearer token) and
volume_mounts at Sandbox.create. spaced allows one sandbox at a time to
mount a volume read-write (the SDKs' mounts are read-write), so a second
sandbox mounting it while the first runs is refused with a 409.

The suite's spaced makes volumes of 64 MB (SPACE_VOLUME_DEFAULT_MB).
"""

import uuid

import pytest

from e2b import (
    Sandbox,
    SandboxException,
    Volume,
    VolumeException,
    VolumeFileType,
    VolumeNotFoundException,
    VolumePathNotFoundException,
)


@pytest.fixture
def volume():
    vol = Volume.create(f"py-{uuid.uuid4().hex[:10]}")
    try:
        yield vol
    finally:
        Volume.destroy(vol.volume_id)


def test_create_get_list_destroy():
    name = f"py-{uuid.uuid4().hex[:10]}"
    vol = Volume.create(name)
    assert vol.name == name and vol.volume_id and vol.token
    info = Volume.get_info(vol.volume_id)
    assert (info.volume_id, info.name, info.token) == (vol.volume_id, name, vol.token)
    assert name in [v.name for v in Volume.list()]
    again = Volume.connect(vol.volume_id)
    assert again.name == name and again.token == vol.token
    with pytest.raises(VolumeException):
        Volume.create(name)  # names are unique
    with pytest.raises(VolumeException):
        Volume.create("not a valid name")
    assert Volume.destroy(vol.volume_id) is True
    assert Volume.destroy(vol.volume_id) is False
    with pytest.raises(VolumeNotFoundException):
        Volume.get_info(vol.volume_id)


def test_content_without_a_sandbox(volume):
    e = volume.write_file("/hello.txt", "hello", mode=0o640)
    assert e.type == VolumeFileType.FILE and e.name == "hello.txt" and e.path == "/hello.txt"
    assert e.size == 5 and e.mode == 0o640 and e.uid == 1000
    assert volume.read_file("/hello.txt") == "hello"
    assert volume.read_file("hello.txt", format="bytes") == b"hello"
    assert b"".join(volume.read_file("/hello.txt", format="stream")) == b"hello"
    volume.write_file("/hello.txt", b"replaced")
    assert volume.read_file("/hello.txt") == "replaced"

    d = volume.make_dir("/a/b/c", force=True)
    assert d.type == VolumeFileType.DIRECTORY and d.path == "/a/b/c"
    volume.write_file("/a/b/c/f.txt", "deep", uid=1001, gid=1002)
    top = {e.name: e.type for e in volume.list("/")}
    assert top == {"a": VolumeFileType.DIRECTORY, "hello.txt": VolumeFileType.FILE}
    deep = [e.path for e in volume.list("/a", depth=3)]
    assert deep == ["/a/b", "/a/b/c", "/a/b/c/f.txt"]
    f = volume.get_info("/a/b/c/f.txt")
    assert (f.uid, f.gid, f.size) == (1001, 1002, 4)
    assert volume.exists("/a/b") and not volume.exists("/nope")
    assert volume.update_metadata("/hello.txt", mode=0o600).mode == 0o600

    with pytest.raises(VolumePathNotFoundException):
        volume.read_file("/nope.txt")
    with pytest.raises(VolumePathNotFoundException):
        volume.write_file("/no/such/dir/f", "x")
    with pytest.raises(VolumePathNotFoundException):
        volume.make_dir("/x/y")  # parents need force
    volume.remove("/a")
    assert not volume.exists("/a/b/c/f.txt")
    with pytest.raises(VolumePathNotFoundException):
        volume.remove("/a")

    # The volume's token opens this volume only.
    other = Volume.create(f"py-{uuid.uuid4().hex[:10]}")
    try:
        stranger = Volume(volume.volume_id, volume.name, token=other.token)
        with pytest.raises(Exception) as e:
            stranger.read_file("/hello.txt")
        assert "401" in str(e.value) or "token" in str(e.value).lower()
    finally:
        Volume.destroy(other.volume_id)


def test_mounted_volume_persists_and_has_one_writer(volume):
    volume.write_file("/from-api.txt", "from the API")
    writer = Sandbox.create(volume_mounts={"/mnt/data": volume})
    try:
        assert writer.files.read("/mnt/data/from-api.txt") == "from the API"
        writer.files.write("/mnt/data/hello.txt", "written by the writer")
        writer.commands.run("echo from a command > /mnt/data/cmd.txt")
        assert volume.read_file("/cmd.txt") == "from a command\n"
        info = writer.get_info()
        assert [(m["name"], m["path"]) for m in info.volume_mounts] == [(volume.name, "/mnt/data")]

        # One writer at a time.
        with pytest.raises(SandboxException) as e:
            Sandbox.create(volume_mounts={"/mnt/data": volume.name})
        assert "409" in str(e.value) and "one sandbox at a time" in str(e.value)
        # Not deleted while mounted.
        with pytest.raises(VolumeException):
            Volume.destroy(volume.volume_id)

        # The size limit (64 MB here): ENOSPC inside, 507 through the API.
        r = writer.commands.run("dd if=/dev/zero of=/mnt/data/big bs=1M count=80 2>&1 || true")
        assert "No space left" in r.stdout
        writer.commands.run("rm -f /mnt/data/big")
        with pytest.raises(VolumeException) as e:
            volume.write_file("/big", b"\0" * (80 << 20))
        assert "507" in str(e.value)

        # A symlink planted in the volume is never followed on the host.
        writer.commands.run("ln -s /etc/passwd /mnt/data/evil && ln -s ../../../../etc /mnt/data/up")
        with pytest.raises(Exception) as e:
            volume.read_file("/evil")
        assert "root:x:0:0" not in str(e.value)
        with pytest.raises(Exception):
            volume.read_file("/up/passwd")
        assert volume.get_info("/evil").type == VolumeFileType.SYMLINK
        assert volume.get_info("/evil").target == "/etc/passwd"
    finally:
        writer.kill()

    reader = Sandbox.create(volume_mounts={"/home/user/data": volume.name})
    try:
        assert reader.files.read("/home/user/data/hello.txt") == "written by the writer"
    finally:
        reader.kill()


def test_bad_mount_paths(volume):
    for path in ["/etc", "/usr/local/bin", "/proc", "/", "relative"]:
        with pytest.raises(Exception) as e:
            Sandbox.create(volume_mounts={path: volume})
        assert "400" in str(e.value), path
    with pytest.raises(Exception) as e:
        Sandbox.create(volume_mounts={"/mnt/x": "no-such-volume"})
    assert "404" in str(e.value) or "not found" in str(e.value).lower()
