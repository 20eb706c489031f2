"""Browser automation: Chromium in the desktop with its DevTools endpoint
(`chromium-cdp`, port 9222), driven from the host by Playwright's
connect_over_cdp through spaced's port routing, with the sandbox's traffic
token (the sandbox's ports are private). Pages come from inside the
sandbox, and from a host in a network namespace of the test's own
(desktop_test.go's cdpHosts) that the sandbox's egress policy allows; a
host it does not allow stays out of the browser's reach.

Then attempts on the desktop's ports from outside: noVNC (6080) and
DevTools (9222) without the token, with another sandbox's, and with a
made-up sandbox id; X11 (6000-6063) through port routing. Each with its
positive control: the same request with the token works."""

import io
import json
import os
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import pytest
from e2b import Sandbox as CoreSandbox
from e2b_desktop import Sandbox
from PIL import Image
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import sync_playwright

from conftest import wait_for

CDP_PORT = 9222
FORM_PORT = 8000
ALLOWED = os.environ.get("SPACE_CDP_ALLOWED", "")
DENIED = os.environ.get("SPACE_CDP_DENIED", "")

# The sandbox's own form server (loopback only: nothing outside reaches it
# but through the browser).
FORM_SERVER = r'''
import html, http.server, urllib.parse
class H(http.server.BaseHTTPRequestHandler):
    def reply(self, body):
        b = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def do_GET(self):
        self.reply('<!doctype html><title>form in the sandbox</title>'
                   '<form method="post" action="/submit"><input id="name" name="name">'
                   '<button id="go" type="submit">Send</button></form>')
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        name = urllib.parse.parse_qs(self.rfile.read(n).decode()).get("name", [""])[0]
        self.reply('<!doctype html><title>sent</title><p id="result">sandbox got %s</p>' % html.escape(name))
http.server.ThreadingHTTPServer(("127.0.0.1", FORM_PORT), H).serve_forever()
'''.replace("FORM_PORT", str(FORM_PORT))


def spaced():
    u = urlsplit(os.environ["E2B_SANDBOX_URL"])
    return u.hostname, u.port


def through(sandbox_id, port, path, token=None, host=None):
    """GET path from port of a sandbox through spaced's port routing (by
    E2b-Sandbox-Id and E2b-Sandbox-Port, or by a Host of <port>-<id>):
    (status, body)."""
    h, p = spaced()
    headers = {}
    if host:
        headers["Host"] = host
    else:
        headers.update({"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": str(port)})
    if token:
        headers["E2b-Traffic-Access-Token"] = token
    req = urllib.request.Request(f"http://{h}:{p}{path}", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def hits(ip):
    """How many requests the test host at ip has served (asked from the
    host, which reaches the namespace directly)."""
    with urllib.request.urlopen(f"http://{ip}/hits", timeout=10) as r:
        return int(r.read())


def set_egress(sandbox_id, allow):
    """The sandbox's egress policy through the native API: only allow."""
    h, p = spaced()
    req = urllib.request.Request(
        f"http://{h}:{p}/v1/sandboxes/{sandbox_id}/network", method="PUT",
        data=json.dumps({"allow": allow}).encode(),
        headers={"Authorization": "Bearer " + os.environ["E2B_API_KEY"], "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 204, r.status


@pytest.fixture(scope="module")
def cdp_box():
    """A desktop with private ports, Chromium under chromium-cdp, the form
    server, and an egress policy that allows ALLOWED only."""
    assert ALLOWED and DENIED, "run through desktop_test.go (it makes the test hosts)"
    sbx = Sandbox.create(network={"allow_public_traffic": False})
    try:
        assert sbx.traffic_access_token, "a private sandbox has a traffic token"
        sbx.files.write("/home/user/form_server.py", FORM_SERVER)
        sbx.commands.run("python3 /home/user/form_server.py", background=True)
        sbx.commands.run("chromium-cdp about:blank >/tmp/chromium-cdp.log 2>&1", background=True)
        wait_for("DevTools through spaced", lambda: through(
            sbx.sandbox_id, CDP_PORT, "/json/version", sbx.traffic_access_token)[0] == 200, timeout=90)
        set_egress(sbx.sandbox_id, [ALLOWED])
        yield sbx
    finally:
        sbx.kill()


@pytest.fixture(scope="module")
def page(cdp_box):
    """A new tab of the sandbox's Chromium, driven by Playwright over CDP
    through spaced. The endpoint is spaced's own address: Chromium accepts
    DevTools requests whose Host is an IP or localhost, and spaced hands a
    user's port the Host the client used."""
    h, p = spaced()
    headers = {"E2b-Sandbox-Id": cdp_box.sandbox_id, "E2b-Sandbox-Port": str(CDP_PORT),
               "E2b-Traffic-Access-Token": cdp_box.traffic_access_token}
    with sync_playwright() as pw:
        browser = pw.chromium.connect_over_cdp(f"http://{h}:{p}", headers=headers, timeout=60000)
        assert browser.contexts, "the running browser's default context"
        tab = browser.contexts[0].new_page()
        yield tab
        tab.close()
        browser.close()


def fill_and_send(page, url, name):
    page.goto(url, timeout=30000)
    page.fill("#name", name)
    page.click("#go")
    return page.locator("#result").inner_text(timeout=30000)


def check_png(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    img = Image.open(io.BytesIO(data)).convert("RGB")
    assert img.width > 100 and img.height > 100, img.size
    # The result's text is on the page: not one flat colour.
    assert len(img.getcolors(1 << 20) or [0, 0]) > 1, "a blank screenshot"
    return img


def test_cdp_form_in_sandbox(page):
    got = fill_and_send(page, f"http://localhost:{FORM_PORT}/", "space <b>agent</b>")
    assert got == "sandbox got space <b>agent</b>", got
    check_png(page.screenshot())


def test_cdp_allowed_host(page):
    before = hits(ALLOWED)
    got = fill_and_send(page, f"http://{ALLOWED}/", "over the policy")
    assert got == f"{ALLOWED} got over the policy", got
    assert hits(ALLOWED) >= before + 2, "the allowed host served the form and its submit"
    check_png(page.screenshot(full_page=True))


def test_cdp_denied_host(page):
    before = hits(DENIED)
    try:
        page.goto(f"http://{DENIED}/", timeout=30000)
        title = page.title()
    except PlaywrightError as e:
        title = f"navigation failed: {e.message.splitlines()[0]}"
    print(f"denied host {DENIED} from the sandbox's browser: {title}")
    assert title != f"form at {DENIED}", "the browser loaded the denied host's page"
    assert hits(DENIED) == before, "the denied host got a request from the sandbox"
    # Positive control: the same browser, right after, still reaches the
    # allowed host (so "blocked" is the policy, not a broken browser). A
    # new tab: Chromium's error page in this one navigates by itself.
    tab = page.context.new_page()
    try:
        tab.goto(f"http://{ALLOWED}/", timeout=30000)
        assert tab.title() == f"form at {ALLOWED}", tab.title()
    finally:
        tab.close()


def test_desktop_ports_need_the_token(cdp_box):
    """noVNC and DevTools of a private desktop: refused without its traffic
    token and with another sandbox's; served with its own."""
    sid, token = cdp_box.sandbox_id, cdp_box.traffic_access_token
    cdp_box.stream.start()
    other = CoreSandbox.create("base", network={"allow_public_traffic": False})
    try:
        assert other.traffic_access_token and other.traffic_access_token != token
        wait_for("noVNC's page with the token",
                 lambda: through(sid, 6080, "/vnc.html", token)[0] == 200, timeout=60)
        for port, path, marker in [(6080, "/vnc.html", "noVNC"), (CDP_PORT, "/json/version", "webSocketDebuggerUrl")]:
            status, body = through(sid, port, path, token)
            assert status == 200 and marker in body, (port, status, body[:200])
            host = f"{port}-{sid}.space.localhost"
            status, body = through(sid, port, path, token, host=host)
            assert status == 200 and marker in body, (port, "by Host", status, body[:200])
            for label, tok, h in [("no token", None, None), ("no token, by Host", None, host),
                                  ("another sandbox's token", other.traffic_access_token, None),
                                  ("a wrong token", token[:-4] + "0000", None)]:
                status, body = through(sid, port, path, tok, host=h)
                print(f"port {port} {label}: {status} {body[:100]!r}")
                assert status == 403 and marker not in body, (port, label, status, body[:200])
        # A sandbox id that is no sandbox: the answer for any that is not
        # running, with or without a token.
        status, body = through("a" * 20, CDP_PORT, "/json/version", token)
        print(f"unknown sandbox id: {status} {body[:100]!r}")
        assert status == 502 and "not found" in body.lower(), (status, body[:200])
    finally:
        other.kill()
        cdp_box.stream.stop()


def test_x11_not_reachable_over_tcp(cdp_box):
    """X11 listens on no TCP port: 6000-6063 through port routing (with the
    token) find nothing. Positive controls: envd's port and DevTools answer
    through the same routing."""
    sid, token = cdp_box.sandbox_id, cdp_box.traffic_access_token
    status, _ = through(sid, 49983, "/health")
    assert status in (200, 204), f"envd's /health through port routing: {status}"
    assert through(sid, CDP_PORT, "/json/version", token)[0] == 200
    open_ports = []
    for port in range(6000, 6064):
        status, body = through(sid, port, "/", token)
        if status != 502 or "port is not open" not in body:
            open_ports.append((port, status, body[:100]))
    assert not open_ports, open_ports
