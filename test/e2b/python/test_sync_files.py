"""Files through the sync client."""

import time

import httpx
import pytest

from e2b import FileNotFoundException, FileType, FilesystemEventType, Sandbox
from e2b.sandbox.filesystem.filesystem import WriteEntry


def test_write_read_text_and_bytes(sandbox: Sandbox):
    info = sandbox.files.write("/home/user/a.txt", "hello ✓")
    assert info.path == "/home/user/a.txt"
    assert info.name == "a.txt"
    assert sandbox.files.read("/home/user/a.txt") == "hello ✓"

    data = bytes(range(256)) * 64
    sandbox.files.write("bin/data.bin", data)  # relative to the home dir, parents made
    assert sandbox.files.read("/home/user/bin/data.bin", format="bytes") == data
    assert sandbox.commands.run("stat -c %U /home/user/bin/data.bin").stdout == "user\n"


def test_write_files_and_empty_file(sandbox: Sandbox):
    infos = sandbox.files.write_files(
        [WriteEntry(path="/tmp/w/one.txt", data="1"), WriteEntry(path="/tmp/w/two.txt", data=b"22")]
    )
    assert sorted(i.name for i in infos) == ["one.txt", "two.txt"]
    assert sandbox.files.read("/tmp/w/two.txt") == "22"
    sandbox.files.write("/tmp/empty", "")
    assert sandbox.files.read("/tmp/empty") == ""


def test_list_exists_get_info(sandbox: Sandbox):
    sandbox.files.make_dir("/tmp/l/sub")
    sandbox.files.write("/tmp/l/f.txt", "abc")
    entries = sandbox.files.list("/tmp/l")
    assert sorted((e.name, e.type) for e in entries) == [("f.txt", FileType.FILE), ("sub", FileType.DIR)]
    deep = sandbox.files.list("/tmp/l", depth=2)
    assert len(deep) == 2

    assert sandbox.files.exists("/tmp/l/f.txt")
    assert not sandbox.files.exists("/tmp/l/nope")
    info = sandbox.files.get_info("/tmp/l/f.txt")
    assert info.size == 3
    assert info.type == FileType.FILE
    assert info.permissions == "-rw-r--r--"


def test_make_dir_rename_remove(sandbox: Sandbox):
    assert sandbox.files.make_dir("/tmp/m/a/b") is True
    assert sandbox.files.make_dir("/tmp/m/a/b") is False  # already there
    sandbox.files.write("/tmp/m/a/b/x.txt", "x")
    moved = sandbox.files.rename("/tmp/m/a/b/x.txt", "/tmp/m/c/y.txt")
    assert moved.path == "/tmp/m/c/y.txt"
    assert not sandbox.files.exists("/tmp/m/a/b/x.txt")
    assert sandbox.files.read("/tmp/m/c/y.txt") == "x"
    sandbox.files.remove("/tmp/m")
    assert not sandbox.files.exists("/tmp/m")


def test_missing_file_errors(sandbox: Sandbox):
    with pytest.raises(FileNotFoundException):
        sandbox.files.read("/tmp/does-not-exist")
    with pytest.raises(FileNotFoundException):
        sandbox.files.get_info("/tmp/does-not-exist")
    with pytest.raises(FileNotFoundException):
        sandbox.files.list("/tmp/does-not-exist")


def test_watch_dir(sandbox: Sandbox):
    sandbox.files.make_dir("/tmp/watched")
    handle = sandbox.files.watch_dir("/tmp/watched")
    try:
        sandbox.files.write("/tmp/watched/new.txt", "x")
        sandbox.files.remove("/tmp/watched/new.txt")
        events = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            events += handle.get_new_events()
            types = {e.type for e in events if e.name == "new.txt"}
            if FilesystemEventType.CREATE in types and FilesystemEventType.REMOVE in types:
                break
            time.sleep(0.2)
        assert {FilesystemEventType.CREATE, FilesystemEventType.REMOVE} <= {e.type for e in events}, events
        assert all(e.name == "new.txt" for e in events), events
    finally:
        handle.stop()


def test_watch_dir_recursive_sees_writes_in_new_nested_dirs(sandbox: Sandbox):
    # E2B's test_watch_recursive_directory_after_nested_folder_addition, two
    # levels deep: the directories (one make_dir, mkdir -p) and the write come
    # at once, so the nested directories' watches may come after the write.
    # The file's WRITE must still be reported, not only its CREATE.
    sandbox.files.make_dir("/tmp/rw")
    handle = sandbox.files.watch_dir("/tmp/rw", recursive=True)
    try:
        sandbox.files.make_dir("/tmp/rw/a/b")
        sandbox.files.write("/tmp/rw/a/b/f.txt", "written")
        want = {("a", FilesystemEventType.CREATE), ("a/b", FilesystemEventType.CREATE),
                ("a/b/f.txt", FilesystemEventType.WRITE)}
        seen = set()
        deadline = time.monotonic() + 10
        while not want <= seen and time.monotonic() < deadline:
            seen |= {(e.name, e.type) for e in handle.get_new_events()}
            time.sleep(0.2)
        assert want <= seen, seen
    finally:
        handle.stop()


def test_upload_and_download_urls(sandbox: Sandbox):
    up = sandbox.upload_url("/home/user/uploaded.txt")
    # The URLs name no sandbox: spaced finds it by the signature.
    r = httpx.post(up, files={"file": ("uploaded.txt", b"via url")})
    assert r.status_code == 200, r.text
    assert sandbox.files.read("/home/user/uploaded.txt") == "via url"

    down = sandbox.download_url("/home/user/uploaded.txt", use_signature_expiration=60)
    r = httpx.get(down)
    assert r.status_code == 200
    assert r.content == b"via url"

    tampered = down.replace("uploaded.txt", "other.txt")
    assert httpx.get(tampered).status_code == 401


def test_octet_stream_gzip_stream_and_metadata(sandbox: Sandbox):
    import io
    import os

    big = os.urandom(3 << 20)  # a few MiB, streamed both ways through the proxy
    sandbox.files.write("/tmp/big.bin", io.BytesIO(big))  # file-like: octet-stream upload
    assert sandbox.files.read("/tmp/big.bin", format="bytes") == big
    chunks = b"".join(sandbox.files.read("/tmp/big.bin", format="stream"))
    assert chunks == big

    sandbox.files.write("/tmp/z.txt", "zipped " * 1000, gzip=True)
    assert sandbox.files.read("/tmp/z.txt", gzip=True) == "zipped " * 1000

    sandbox.files.write("/tmp/meta.txt", "m", metadata={"owner": "tests"})
    assert sandbox.files.get_info("/tmp/meta.txt").metadata == {"owner": "tests"}
