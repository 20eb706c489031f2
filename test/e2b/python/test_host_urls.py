"""get_host() URLs on one machine, with no DNS server of one's own (issue 14, item 7),
through the sync and the async client.

spaced reached at 127.0.0.1:PORT reports the domain "localhost:PORT", so
get_host(port) is "<port>-<id>.localhost:PORT". Names under .localhost are
loopback (RFC 6761): curl and browsers resolve them so themselves; the
request reaches spaced, which routes it by its Host to the port in the
sandbox, and wakes a paused auto-resume sandbox first.
"""

import asyncio
import socket
import subprocess
import time
from urllib.parse import urlsplit

import httpx

from conftest import SANDBOX_URL
from e2b import AsyncSandbox, Sandbox, SandboxState


def curl(url):
    """GET url with curl, which resolves *.localhost to loopback itself."""
    r = subprocess.run(
        ["curl", "-sS", "--noproxy", "*", "--max-time", "20", "-w", "\n%{http_code} %{remote_ip}", url],
        capture_output=True, text=True, timeout=30,
    )
    body, _, status = r.stdout.rpartition("\n")
    code, _, ip = status.partition(" ")
    return int(code or 0), body, ip


def serve(sbx, text):
    sbx.files.write("/tmp/www/index.html", text)
    sbx.commands.run("cd /tmp/www && python3 -m http.server 8000", background=True)


def test_get_host_url_reaches_a_port_in_the_sandbox(sandbox: Sandbox):
    port = urlsplit(SANDBOX_URL).port
    host = sandbox.get_host(8000)
    assert host == f"8000-{sandbox.sandbox_id}.localhost:{port}"
    serve(sandbox, "served by host name")
    deadline = time.monotonic() + 15
    while True:
        code, body, ip = curl(f"http://{host}/index.html")
        if code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert (code, body) == (200, "served by host name")
    assert ip in ("127.0.0.1", "::1")
    # envd by host name as well; a port nothing listens on is E2B's 502.
    assert curl(f"http://{sandbox.get_host(49983)}/health")[0] == 204
    code, body, _ = curl(f"http://{sandbox.get_host(8001)}/")
    assert code == 502 and "port is not open" in body


def test_host_name_resolves_through_the_system(test_id):
    # curl resolves *.localhost itself; most clients (httpx, a browser's
    # helpers, anything on getaddrinfo) ask the system, which answers it only
    # with nss-myhostname (install-deps.sh's serve profile). httpx here asks
    # getaddrinfo: without the module the name does not resolve at all.
    port = urlsplit(SANDBOX_URL).port
    sbx = Sandbox.create(network={"allow_public_traffic": False}, metadata={"sandbox_test_id": test_id})
    try:
        serve(sbx, "served by name, privately")
        name = f"8000-{sbx.sandbox_id}.localhost"
        addrs = {a[4][0] for a in socket.getaddrinfo(name, port, proto=socket.IPPROTO_TCP)}
        assert addrs and addrs <= {"127.0.0.1", "::1"}, addrs
        url = f"http://{name}:{port}/index.html"
        token = {"e2b-traffic-access-token": sbx.traffic_access_token}
        assert sbx.traffic_access_token
        with httpx.Client(timeout=20, trust_env=False) as c:
            deadline = time.monotonic() + 15
            while True:
                r = c.get(url, headers=token)
                if r.status_code == 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert (r.status_code, r.text) == (200, "served by name, privately")
            # The same name without the token is refused: the port is private.
            assert c.get(url).status_code == 403
    finally:
        sbx.kill()


def test_get_host_url_wakes_a_paused_auto_resume_sandbox(test_id):
    sbx = Sandbox.create(lifecycle={"on_timeout": "pause", "auto_resume": True}, metadata={"sandbox_test_id": test_id})
    try:
        serve(sbx, "woken by traffic")
        host = sbx.get_host(8000)
        deadline = time.monotonic() + 15
        while curl(f"http://{host}/index.html")[0] != 200:
            assert time.monotonic() < deadline, "the server in the sandbox never answered"
            time.sleep(0.2)
        assert sbx.pause() is True
        assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.PAUSED
        # The request itself resumes the sandbox; the server was restored
        # with its memory and answers it.
        start = time.monotonic()
        assert curl(f"http://{host}/index.html")[:2] == (200, "woken by traffic")
        assert time.monotonic() - start < 10
        assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.RUNNING
    finally:
        Sandbox.kill(sbx.sandbox_id)


def test_a_paused_sandbox_without_auto_resume_stays_paused(sandbox: Sandbox):
    serve(sandbox, "x")
    host = sandbox.get_host(8000)
    assert sandbox.pause() is True
    code, body, _ = curl(f"http://{host}/index.html")
    assert code == 502 and "was not found" in body
    assert Sandbox.get_info(sandbox.sandbox_id).state == SandboxState.PAUSED


# The same through the async client (AsyncSandbox.get_host builds the same
# names); curl runs in a thread so the event loop is never blocked.


async def acurl(url):
    return await asyncio.to_thread(curl, url)


async def aserve(sbx, text):
    await sbx.files.write("/tmp/www/index.html", text)
    await sbx.commands.run("cd /tmp/www && python3 -m http.server 8000", background=True)


async def await_served(host, deadline_s=15):
    deadline = time.monotonic() + deadline_s
    while True:
        code, body, ip = await acurl(f"http://{host}/index.html")
        if code == 200 or time.monotonic() > deadline:
            return code, body, ip
        await asyncio.sleep(0.2)


async def test_get_host_url_reaches_a_port_in_the_sandbox_async(async_sandbox: AsyncSandbox):
    port = urlsplit(SANDBOX_URL).port
    host = async_sandbox.get_host(8000)
    assert host == f"8000-{async_sandbox.sandbox_id}.localhost:{port}"
    await aserve(async_sandbox, "served by host name")
    code, body, ip = await await_served(host)
    assert (code, body) == (200, "served by host name")
    assert ip in ("127.0.0.1", "::1")
    assert (await acurl(f"http://{async_sandbox.get_host(49983)}/health"))[0] == 204
    code, body, _ = await acurl(f"http://{async_sandbox.get_host(8001)}/")
    assert code == 502 and "port is not open" in body


async def test_get_host_url_wakes_a_paused_auto_resume_sandbox_async(test_id):
    sbx = await AsyncSandbox.create(
        lifecycle={"on_timeout": "pause", "auto_resume": True}, metadata={"sandbox_test_id": test_id}
    )
    try:
        await aserve(sbx, "woken by traffic")
        host = sbx.get_host(8000)
        assert (await await_served(host))[0] == 200, "the server in the sandbox never answered"
        assert await sbx.pause() is True
        assert (await AsyncSandbox.get_info(sbx.sandbox_id)).state == SandboxState.PAUSED
        start = time.monotonic()
        assert (await acurl(f"http://{host}/index.html"))[:2] == (200, "woken by traffic")
        assert time.monotonic() - start < 10
        assert (await AsyncSandbox.get_info(sbx.sandbox_id)).state == SandboxState.RUNNING
    finally:
        await AsyncSandbox.kill(sbx.sandbox_id)


async def test_a_paused_sandbox_without_auto_resume_stays_paused_async(async_sandbox: AsyncSandbox):
    await aserve(async_sandbox, "x")
    host = async_sandbox.get_host(8000)
    assert await async_sandbox.pause() is True
    code, body, _ = await acurl(f"http://{host}/index.html")
    assert code == 502 and "was not found" in body
    assert (await AsyncSandbox.get_info(async_sandbox.sandbox_id)).state == SandboxState.PAUSED
