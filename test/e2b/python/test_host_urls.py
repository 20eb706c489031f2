"""get_host() URLs on one machine, with no DNS server of one's own (issue 14, item 7).

spaced reached at 127.0.0.1:PORT reports the domain "localhost:PORT", so
get_host(port) is "<port>-<id>.localhost:PORT". Names under .localhost are
loopback (RFC 6761): curl and browsers resolve them so themselves; the
request reaches spaced, which routes it by its Host to the port in the
sandbox, and wakes a paused auto-resume sandbox first.
"""

import subprocess
import time
from urllib.parse import urlsplit

from conftest import SANDBOX_URL
from e2b import Sandbox, SandboxState


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
