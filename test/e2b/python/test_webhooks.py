"""Lifecycle webhooks (E2B's /events/webhooks) around sandboxes the SDK drives.

The SDK has no webhook methods: registration is a plain HTTP call with the
API key, as E2B's documentation shows. The receiver is an HTTP server of the
test's own on 127.0.0.1, an address the suite's spaced is told to allow
(SPACE_WEBHOOK_ALLOW in e2b_test.go); it checks each signature as E2B's
documentation tells a receiver to. Other tests' sandboxes reach the same
receiver when they run at once, so each test looks at its own sandbox.
"""

import base64
import hashlib
import asyncio
import http.server
import json
import threading
import time
import uuid

import httpx
import pytest

from conftest import API_KEY, API_URL
from e2b import AsyncSandbox, Sandbox

LIFE = [
    "sandbox.lifecycle.created",
    "sandbox.lifecycle.updated",
    "sandbox.lifecycle.paused",
    "sandbox.lifecycle.resumed",
    "sandbox.lifecycle.killed",
]


def verify(secret: str, body: bytes, signature: str) -> bool:
    digest = hashlib.sha256(secret.encode() + body).digest()
    return base64.b64encode(digest).decode().rstrip("=") == signature


class Receiver:
    def __init__(self, secret):
        self.secret, self.events, self.bad = secret, [], []
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                ok = verify(receiver.secret, body, self.headers.get("e2b-signature", "")) and \
                    self.headers.get("e2b-signature-version") == "v1" and self.headers.get("e2b-webhook-id")
                with receiver.lock:
                    (receiver.events if ok else receiver.bad).append(json.loads(body) if ok else body)
                self.send_response(200 if ok else 401)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def of(self, sandbox_id):
        with self.lock:
            return [e for e in self.events if e["sandboxId"] == sandbox_id]

    def wait(self, sandbox_id, n, seconds=60):
        deadline = time.time() + seconds
        while len(self.of(sandbox_id)) < n and time.time() < deadline:
            time.sleep(0.1)
        return self.of(sandbox_id)


@pytest.fixture
def receiver():
    secret = "whsec-" + uuid.uuid4().hex
    r = Receiver(secret)
    api = httpx.Client(base_url=API_URL, headers={"X-API-Key": API_KEY}, timeout=30)
    resp = api.post("/events/webhooks", json={
        "name": "sdk-test", "url": r.url, "enabled": True, "events": LIFE, "signatureSecret": secret,
    })
    assert resp.status_code == 201, resp.text
    hook = resp.json()
    assert hook["url"] == r.url and hook["enabled"] and sorted(hook["events"]) == sorted(LIFE)
    assert "signatureSecret" not in hook
    assert any(h["id"] == hook["id"] for h in api.get("/events/webhooks").json())
    try:
        yield r
    finally:
        assert api.delete(f"/events/webhooks/{hook['id']}").status_code == 200
        r.server.shutdown()
        api.close()


def check(events, sandbox_id, test_id):
    assert [e["type"] for e in events] == LIFE, events
    for e in events:
        assert e["version"] == "v2" and e["sandboxId"] == sandbox_id and e["sandboxTemplateId"] == "base"
        assert e["eventData"]["sandbox_metadata"]["sandbox_test_id"] == test_id
    assert len({e["id"] for e in events}) == len(events)
    for kind in ("sandbox.lifecycle.paused", "sandbox.lifecycle.killed"):
        ex = next(e for e in events if e["type"] == kind)["eventData"]["execution"]
        assert ex["vcpu_count"] >= 1 and ex["memory_mb"] > 0 and ex["execution_time"] >= 0
    assert "set_timeout" in events[1]["eventData"]


def test_webhook_gets_each_event_once_in_order(receiver, test_id):
    sbx = Sandbox.create(metadata={"sandbox_test_id": test_id})
    sbx.set_timeout(600)
    assert sbx.pause() is True
    sbx.connect()
    sbx.kill()
    receiver.wait(sbx.sandbox_id, len(LIFE))
    time.sleep(1)  # and nothing more comes
    check(receiver.of(sbx.sandbox_id), sbx.sandbox_id, test_id)
    assert not receiver.bad


async def test_webhook_async(receiver, test_id):
    sbx = await AsyncSandbox.create(metadata={"sandbox_test_id": test_id})
    await sbx.set_timeout(600)
    assert await sbx.pause() is True
    await sbx.connect()
    await sbx.kill()
    deadline = time.time() + 60
    while len(receiver.of(sbx.sandbox_id)) < len(LIFE) and time.time() < deadline:
        await asyncio.sleep(0.1)
    check(receiver.of(sbx.sandbox_id), sbx.sandbox_id, test_id)
    assert not receiver.bad


def test_webhook_refusals():
    api = httpx.Client(base_url=API_URL, headers={"X-API-Key": API_KEY}, timeout=30)
    for url in ("http://127.0.0.2:9/", "http://169.254.169.254/latest/meta-data", "http://[::1]:9/"):
        resp = api.post("/events/webhooks", json={"name": "x", "url": url, "signatureSecret": "s"})
        assert resp.status_code == 400 and "message" in resp.json(), resp.text
    resp = api.patch("/events/webhooks/nope", json={"enabled": False})
    assert resp.status_code == 404
