"""Sandbox lifecycle, control plane and access control through the sync client."""

import datetime
import time

import httpx
import pytest

from conftest import API_KEY, API_URL, SANDBOX_URL
from e2b import (
    AuthenticationException,
    Sandbox,
    SandboxException,
    SandboxNotFoundException,
    SandboxQuery,
    SandboxState,
)


def test_get_info_and_set_timeout(sandbox: Sandbox, test_id):
    info = sandbox.get_info()
    assert info.sandbox_id == sandbox.sandbox_id
    assert info.template_id == "base"
    assert info.state == SandboxState.RUNNING
    assert info.metadata == {"sandbox_test_id": test_id}
    assert info.cpu_count >= 1 and info.memory_mb >= 128
    assert info.envd_version == "0.6.13"
    # Default lifetime is 300 s.
    assert 290 <= (info.end_at - info.started_at).total_seconds() <= 310

    sandbox.set_timeout(30)
    end = sandbox.get_info().end_at
    left = (end - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
    assert 20 < left <= 31


def test_set_timeout_zero_kills_now(sandbox: Sandbox):
    # E2B's spec allows timeout 0 (minimum 0): the sandbox's life ends now.
    sandbox.set_timeout(0)
    assert sandbox.is_running() is False
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_info(sandbox.sandbox_id)


def test_set_timeout_zero_pauses_by_lifecycle(test_id):
    sbx = Sandbox.create(lifecycle={"on_timeout": "pause"}, metadata={"sandbox_test_id": test_id})
    try:
        sbx.commands.run("echo kept > /tmp/kept")
        sbx.set_timeout(0)
        assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.PAUSED
        back = Sandbox.connect(sbx.sandbox_id)
        assert back.files.read("/tmp/kept") == "kept\n"
    finally:
        Sandbox.kill(sbx.sandbox_id)


def test_list_with_metadata_filter_and_pages(test_id):
    a = Sandbox.create(metadata={"sandbox_test_id": test_id, "n": "1"})
    b = Sandbox.create(metadata={"sandbox_test_id": test_id, "n": "2"})
    try:
        found = Sandbox.list(query=SandboxQuery(metadata={"sandbox_test_id": test_id})).next_items()
        assert {s.sandbox_id for s in found} == {a.sandbox_id, b.sandbox_id}
        assert all(s.state == SandboxState.RUNNING for s in found)

        only = Sandbox.list(query=SandboxQuery(metadata={"sandbox_test_id": test_id, "n": "2"})).next_items()
        assert [s.sandbox_id for s in only] == [b.sandbox_id]

        pages = Sandbox.list(query=SandboxQuery(metadata={"sandbox_test_id": test_id}), limit=1)
        ids = []
        while pages.has_next:
            items = pages.next_items()
            assert len(items) <= 1
            ids += [s.sandbox_id for s in items]
        assert sorted(ids) == sorted([a.sandbox_id, b.sandbox_id])

        paused = Sandbox.list(query=SandboxQuery(metadata={"sandbox_test_id": test_id}, state=[SandboxState.PAUSED]))
        assert paused.next_items() == []
    finally:
        a.kill()
        b.kill()


def test_connect_then_kill(sandbox: Sandbox):
    again = Sandbox.connect(sandbox.sandbox_id)
    assert again.commands.run("echo again").stdout == "again\n"
    assert again.is_running()

    assert Sandbox.kill(sandbox.sandbox_id) is True
    assert sandbox.is_running() is False
    assert Sandbox.kill(sandbox.sandbox_id) is False
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_info(sandbox.sandbox_id)
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(sandbox.sandbox_id)
    with pytest.raises(SandboxNotFoundException):
        sandbox.set_timeout(60)


def test_timeout_expiry():
    sbx = Sandbox.create(timeout=2)
    assert sbx.is_running()
    deadline = time.monotonic() + 15
    while sbx.is_running() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert sbx.is_running() is False
    with pytest.raises(SandboxNotFoundException):
        sbx.get_info()


def test_unknown_sandbox_and_wrong_key():
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_info("nosuchsandbox0000000")
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect("nosuchsandbox0000000")
    assert Sandbox.kill("nosuchsandbox0000000") is False
    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key="e2b_" + "1" * 40)


def test_pause_connect_resumes_with_memory(test_id):
    sbx = Sandbox.create(metadata={"sandbox_test_id": test_id})
    try:
        sbx.files.write("/home/user/kept.txt", "before pause")
        bg = sbx.commands.run("sleep 1000", background=True)
        assert sbx.pause() is True
        assert sbx.pause() is False  # already paused
        info = Sandbox.get_info(sbx.sandbox_id)
        assert info.state == SandboxState.PAUSED
        paused = Sandbox.list(query=SandboxQuery(metadata={"sandbox_test_id": test_id}, state=[SandboxState.PAUSED]))
        assert [s.sandbox_id for s in paused.next_items()] == [sbx.sandbox_id]

        again = Sandbox.connect(sbx.sandbox_id)
        assert again.get_info().state == SandboxState.RUNNING
        assert again.files.read("/home/user/kept.txt") == "before pause"
        # The background process survived: it is still running after the resume.
        assert again.commands.run(f"kill -0 {bg.pid} && echo alive").stdout == "alive\n"
    finally:
        Sandbox.kill(sbx.sandbox_id)


def test_fork(sandbox: Sandbox):
    sandbox.files.write("/home/user/origin.txt", "parent")
    forks = sandbox.fork(count=2)
    try:
        assert len(forks) == 2
        for f in forks:
            assert isinstance(f, Sandbox), f
            assert f.sandbox_id != sandbox.sandbox_id
            assert f.files.read("/home/user/origin.txt") == "parent"
            f.files.write("/home/user/origin.txt", f.sandbox_id)
        assert sandbox.files.read("/home/user/origin.txt") == "parent"
    finally:
        for f in forks:
            if isinstance(f, Sandbox):
                f.kill()


def test_auto_pause_on_timeout(test_id):
    sbx = Sandbox.create(timeout=3, lifecycle={"on_timeout": "pause"}, metadata={"sandbox_test_id": test_id})
    try:
        sbx.files.write("/home/user/kept.txt", "kept")
        deadline = time.time() + 30
        while Sandbox.get_info(sbx.sandbox_id).state != SandboxState.PAUSED:
            assert time.time() < deadline, "not paused at its timeout"
            time.sleep(0.5)
        again = Sandbox.connect(sbx.sandbox_id, timeout=60)
        assert again.files.read("/home/user/kept.txt") == "kept"
    finally:
        Sandbox.kill(sbx.sandbox_id)


def test_auto_resume_on_traffic(test_id):
    sbx = Sandbox.create(timeout=3, lifecycle={"on_timeout": "pause", "auto_resume": True},
                         metadata={"sandbox_test_id": test_id})
    try:
        sbx.files.write("/home/user/kept.txt", "kept")
        deadline = time.time() + 30
        while Sandbox.get_info(sbx.sandbox_id).state != SandboxState.PAUSED:
            assert time.time() < deadline, "not paused at its timeout"
            time.sleep(0.5)
        # No connect: the request itself wakes the sandbox.
        assert sbx.files.read("/home/user/kept.txt") == "kept"
        assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.RUNNING
    finally:
        Sandbox.kill(sbx.sandbox_id)


def test_network_fields_are_stored_and_reported():
    sbx = Sandbox.create(
        allow_internet_access=True,
        network={"allow_out": ["1.1.1.1"], "deny_out": ["0.0.0.0/0"]},
    )
    try:
        info = sbx.get_info()
        assert info.allow_internet_access is True
        assert info.network["allow_out"] == ["1.1.1.1"]
        assert info.network["deny_out"] == ["0.0.0.0/0"]
        r = httpx.post(f"{API_URL}/v2/sandboxes", headers={"X-API-KEY": API_KEY},
                       json={"templateID": "base", "allow_internet_access": True, "timeout": 10})
        assert r.status_code == 201
        httpx.delete(f"{API_URL}/sandboxes/{r.json()['sandboxID']}", headers={"X-API-KEY": API_KEY})
    finally:
        sbx.kill()


def _list_procs(raw, sandbox_id, token=None):
    headers = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "49983", "Content-Type": "application/json"}
    if token is not None:
        headers["X-Access-Token"] = token
    return raw.post("/process.Process/List", content=b"{}", headers=headers)


def test_access_tokens_are_enforced(raw, test_id):
    a = Sandbox.create(metadata={"sandbox_test_id": test_id})
    b = Sandbox.create(metadata={"sandbox_test_id": test_id})
    try:
        tok_a, tok_b = a._envd_access_token, b._envd_access_token
        assert tok_a and tok_b and tok_a != tok_b
        assert _list_procs(raw, a.sandbox_id, tok_a).status_code == 200
        assert _list_procs(raw, a.sandbox_id).status_code == 401
        assert _list_procs(raw, a.sandbox_id, "wrong").status_code == 401
        # One sandbox's token never opens another.
        assert _list_procs(raw, a.sandbox_id, tok_b).status_code == 401
        assert _list_procs(raw, b.sandbox_id, tok_a).status_code == 401
        files = {"E2b-Sandbox-Id": a.sandbox_id, "X-Access-Token": tok_b}
        assert raw.get("/files", params={"path": "/etc/hostname"}, headers=files).status_code == 401
        # /health is open, as in envd.
        assert raw.get("/health", headers={"E2b-Sandbox-Id": a.sandbox_id}).status_code == 204
    finally:
        a.kill()
        b.kill()
    assert raw.get("/health", headers={"E2b-Sandbox-Id": a.sandbox_id}).status_code == 502


def test_insecure_sandbox_through_the_v1_create(raw, api):
    r = api.post("/sandboxes", json={"templateID": "base", "timeout": 30, "secure": False})
    assert r.status_code == 201, r.text
    body = r.json()
    assert "envdAccessToken" not in body
    assert body["clientID"] and body["envdVersion"] == "0.6.13"
    sid = body["sandboxID"]
    try:
        assert _list_procs(raw, sid).status_code == 200
        sbx = Sandbox.connect(sid)
        assert sbx.commands.run("echo open").stdout == "open\n"
    finally:
        assert api.delete(f"/sandboxes/{sid}").status_code == 204


def test_host_routing_and_user_ports(sandbox: Sandbox, raw):
    host = sandbox.get_host(8000)
    assert host.startswith(f"8000-{sandbox.sandbox_id}.")
    sandbox.files.write("/tmp/www/index.html", "served from the sandbox")
    sandbox.commands.run("cd /tmp/www && python3 -m http.server 8000", background=True)
    deadline = time.monotonic() + 10
    while True:
        r = raw.get("/index.html", headers={"Host": host})
        if r.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert r.status_code == 200
    assert r.text == "served from the sandbox"
    by_header = raw.get("/index.html", headers={"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": "8000"})
    assert by_header.text == "served from the sandbox"
    envd = raw.get("/health", headers={"Host": f"49983-{sandbox.sandbox_id}.localhost"})
    assert envd.status_code == 204


def test_error_bodies_have_code_and_message(api):
    for method, path in [("GET", "/sandboxes/nosuchsandbox0000000"), ("DELETE", "/sandboxes/nosuchsandbox0000000"),
                         ("POST", "/sandboxes/nosuchsandbox0000000/pause"), ("GET", "/v2/sandboxes?limit=0")]:
        r = api.request(method, path)
        assert r.status_code >= 400
        body = r.json()
        assert body["code"] == r.status_code and body["message"], (path, body)
    r = httpx.get(f"{API_URL}/v2/sandboxes", headers={"X-API-KEY": "e2b_" + "2" * 40})
    assert r.status_code == 401 and r.json()["code"] == 401
    assert httpx.get(f"{API_URL}/health").status_code == 200
    assert httpx.get(f"{SANDBOX_URL}/healthz").status_code == 200  # the native API is still there
