"""Who may use the code interpreter's contexts, through spaced only (the
local debug-mode server runs without auth).

The SDK's context calls (create, list, restart, remove) send no access
token; on a sandbox whose ports are public (the default) they carry no
credential at all, so the interpreter treats them as anonymous: they see
and act only on contexts made the same way, and may make few. On a
sandbox with private ports they carry the traffic token, which spaced's
proxy turns into the interpreter's token: they are the owner's."""

import os

import httpx
import pytest
from e2b.exceptions import NotFoundException, SandboxException
from e2b_code_interpreter import Sandbox
from e2b_code_interpreter.models import Context

if os.environ.get("E2B_DEBUG") == "true":
    pytest.skip("needs spaced's proxy and a sandbox's token: runs in TestSDKsThroughSpaced", allow_module_level=True)


def raw(sbx, method, path, token=None, traffic=None, json=None):
    """A request to the interpreter through spaced's proxy, as the SDK
    makes them, with the headers chosen here."""
    headers = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49999"}
    if token:
        headers["X-Access-Token"] = token
    if traffic:
        headers["E2B-Traffic-Access-Token"] = traffic
    return httpx.request(method, sbx._jupyter_url + path, headers=headers, json=json, timeout=60)


def ids(contexts):
    return [c.id for c in contexts]


def test_public_sandbox_contexts_are_confined():
    sbx = Sandbox.create()
    try:
        token = sbx._envd_access_token
        assert token and not sbx.traffic_access_token
        # A context made with the token (as spaced's native API makes them),
        # and the default ones (Python's, JavaScript's): the owner sees all.
        made = raw(sbx, "POST", "/contexts", token=token, json={})
        assert made.status_code == 200, made.text
        owned = made.json()["id"]
        listed = raw(sbx, "GET", "/contexts", token=token)
        assert listed.status_code == 200 and owned in [c["id"] for c in listed.json()]
        default = [c["id"] for c in listed.json() if c["id"] != owned]
        assert len(default) == 2, listed.json()

        # The SDK's calls, without a token, cannot see, restart or delete them.
        for id in [owned] + default:
            assert id not in ids(sbx.list_code_contexts())
            with pytest.raises(NotFoundException):
                sbx.restart_code_context(id)
            with pytest.raises(NotFoundException):
                sbx.remove_code_context(id)
        # A wrong token is refused outright.
        assert raw(sbx, "GET", "/contexts", token="wrong").status_code == 401

        # Positive controls: the context is untouched and runs code
        # (run_code sends the token), and the SDK's own contexts are its to
        # list and remove.
        sbx.run_code("kept = 1", context=Context(owned, "python", "/home/user"))
        assert sbx.run_code("kept + 1", context=Context(owned, "python", "/home/user")).text == "2"
        mine = sbx.create_code_context()
        assert ids(sbx.list_code_contexts()) == [mine.id]
        sbx.remove_code_context(mine)
        assert raw(sbx, "DELETE", "/contexts/" + owned, token=token).status_code == 200
    finally:
        sbx.kill()


def test_public_sandbox_context_cap():
    """code-interpreter-v1 has 1 GiB: 2 contexts may be made without a
    token (and 8 in all)."""
    sbx = Sandbox.create()
    try:
        first, second = sbx.create_code_context(), sbx.create_code_context()
        with pytest.raises(SandboxException) as refused:
            sbx.create_code_context()
        assert "429" in str(refused.value) and "without an access token" in str(refused.value)
        # The refusal started nothing; the owner still has room.
        assert sorted(ids(sbx.list_code_contexts())) == sorted([first.id, second.id])
        made = raw(sbx, "POST", "/contexts", token=sbx._envd_access_token, json={})
        assert made.status_code == 200, made.text
        # Room again once one goes.
        sbx.remove_code_context(first)
        third = sbx.create_code_context()
        assert sbx.run_code("3", context=third).text == "3"
    finally:
        sbx.kill()


def test_private_sandbox_contexts_are_the_owners():
    sbx = Sandbox.create(network={"allow_public_traffic": False})
    try:
        traffic = sbx.traffic_access_token
        assert traffic
        # Every SDK call carries the traffic token, so the contexts are the
        # owner's: the list shows the default context too.
        ctx = sbx.create_code_context()
        listed = ids(sbx.list_code_contexts())
        assert ctx.id in listed and len(listed) >= 2, listed
        sbx.run_code("x = 5", context=ctx)
        sbx.restart_code_context(ctx)
        assert sbx.run_code("x", context=ctx).error.name == "NameError"
        sbx.remove_code_context(ctx)
        assert ctx.id not in ids(sbx.list_code_contexts())
        # Without the traffic token the proxy lets nothing through.
        assert raw(sbx, "GET", "/contexts").status_code == 403
        assert raw(sbx, "GET", "/contexts", traffic=traffic).status_code == 200
    finally:
        sbx.kill()
