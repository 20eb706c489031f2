"""E2B's MCP gateway through the real SDK and the official MCP client.

Sandbox.create(mcp=...) makes a sandbox of the mcp-gateway template (the
SDK's default when mcp is given) and runs `mcp-gateway --config` in it;
the gateway's tools are then reached from the host through spaced's port
routing, at get_mcp_url() with get_mcp_token() as the bearer token, by the
`mcp` package's streamable HTTP client. Run by test/e2b/mcp_test.go, which
builds the template and points the SDK at spaced (E2B_API_URL,
E2B_SANDBOX_URL, E2B_API_KEY)."""

import json
import os
import uuid

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
import httpx2

from e2b import AsyncSandbox, Sandbox, SandboxException, SandboxQuery

for var in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY"):
    if not os.environ.get(var):
        raise RuntimeError(f"{var} must be set (run through test/e2b/mcp_test.go)")

CONFIG = {"time": {}, "filesystem": {"paths": ["/home/user"]}}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def plain(url: str) -> str:
    """get_mcp_url() is https://<port>-<id>.<domain>/mcp, as on E2B;
    spaced's listener here speaks plain HTTP."""
    assert url.startswith("https://"), url
    return "http://" + url[len("https://"):]


@pytest.fixture
def test_id():
    return f"mcp-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def sbx(test_id):
    s = Sandbox.create(mcp=CONFIG, metadata={"sandbox_test_id": test_id}, timeout=300)
    try:
        yield s
    finally:
        s.kill()


async def tools_and_calls(url: str, token: str, calls):
    """Lists the gateway's tools and makes calls with the MCP client."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        async with streamable_http_client(url, http_client=http) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = [t.name for t in (await session.list_tools()).tools]
                results = [await session.call_tool(name, args) for name, args in calls]
                return tools, results


def text(result) -> str:
    assert not result.is_error, result
    return "".join(c.text for c in result.content if c.type == "text")


async def test_tools_through_the_gateway(sbx: Sandbox):
    url = sbx.get_mcp_url()
    assert url == f"https://{sbx.get_host(50005)}/mcp"
    token = sbx.get_mcp_token()
    uuid.UUID(token)  # the SDK's own random token, not a platform secret
    # A fresh handle reads it from the sandbox, as the SDK does.
    assert Sandbox.connect(sbx.sandbox_id).get_mcp_token() == token

    sbx.files.write("/home/user/note.txt", "written by the SDK\n")
    tools, (now, note) = await tools_and_calls(plain(url), token, [
        ("get_current_time", {"timezone": "UTC"}),
        ("read_text_file", {"path": "/home/user/note.txt"}),
    ])
    # Both servers' tools, under their own names.
    for want in ("get_current_time", "convert_time", "read_text_file", "list_directory", "write_file"):
        assert want in tools, tools
    assert json.loads(text(now))["timezone"] == "UTC"
    assert text(note) == "written by the SDK\n"


async def test_the_gateway_needs_the_token(sbx: Sandbox):
    """Red team: no token, a wrong one, or the bare token (no Bearer) is a
    401 at the gateway; the right one (the control) gets an answer."""
    url, token = plain(sbx.get_mcp_url()), sbx.get_mcp_token()
    async with httpx.AsyncClient(timeout=60) as http:
        for auth in (None, "Bearer " + str(uuid.uuid4()), token, "Bearer " + token[:-1], "Basic " + token):
            headers = dict(MCP_HEADERS)
            if auth:
                headers["Authorization"] = auth
            r = await http.post(url, json=INIT, headers=headers)
            assert r.status_code == 401, (auth, r.status_code, r.text)
        r = await http.post(url, json=INIT, headers={**MCP_HEADERS, "Authorization": "Bearer " + token})
        assert r.status_code == 200, r.text
        assert "space-mcp-gateway" in r.text
    # The token file is root's: the sandbox's user cannot read it (control:
    # root can, as the SDK does).
    assert sbx.commands.run("cat /etc/mcp-gateway/.token", user="root").stdout == token
    with pytest.raises(SandboxException):
        sbx.commands.run("cat /etc/mcp-gateway/.token", user="user")
    # Nor do the MCP servers get it in their environment. The control: a
    # process given the variable is found the same way.
    sbx.commands.run("env GATEWAY_ACCESS_TOKEN=probe sleep 120", background=True, user="root")
    found = sbx.commands.run("for e in /proc/[0-9]*/environ; do if tr '\\0' '\\n' < $e | grep -q ^GATEWAY_ACCESS_TOKEN=; then "
                             "tr '\\0' ' ' < ${e%environ}cmdline; echo; fi; done 2>/dev/null", user="root").stdout
    assert found.split("\n")[:-1] == ["sleep 120 "], found


@pytest.mark.parametrize("template,mcp,why", [
    (None, {"invalid_server": {}}, 'unknown MCP server "invalid_server"'),
    (None, {"filesystem": {}}, 'MCP server "filesystem": paths is required'),
    (None, {"github/acme/tools": {"install_cmd": "true"}}, 'MCP server "github/acme/tools": runCmd is required'),
    # E2B's own test: a template without the gateway.
    ("base", {"time": {}}, "mcp-gateway"),
])
def test_a_failing_gateway_kills_the_sandbox(test_id, template, mcp, why):
    kwargs = {"template": template} if template else {}
    with pytest.raises(SandboxException) as e:
        Sandbox.create(mcp=mcp, metadata={"sandbox_test_id": test_id}, timeout=120, **kwargs)
    assert str(e.value).startswith("Failed to start MCP gateway"), str(e.value)
    assert why in str(e.value), str(e.value)
    assert Sandbox.list(query=SandboxQuery(metadata={"sandbox_test_id": test_id})).next_items() == []


async def test_async_sdk(test_id):
    s = await AsyncSandbox.create(mcp={"time": {}}, metadata={"sandbox_test_id": test_id})
    try:
        token = await s.get_mcp_token()
        tools, (res,) = await tools_and_calls(plain(s.get_mcp_url()), token,
                                              [("convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"})])
        assert sorted(tools) == ["convert_time", "get_current_time"]
        assert json.loads(text(res))["target"]["datetime"].endswith("21:00:00+09:00")
    finally:
        await s.kill()


ECHO_SERVER = """
from mcp.server.mcpserver import MCPServer

server = MCPServer("echo")


@server.tool()
def shout(text: str) -> str:
    \"\"\"Upper-cases text.\"\"\"
    return text.upper() + "!"


server.run()
"""


async def test_a_custom_server(test_id):
    """A github/<owner>/<repo> server whose repository is already in the
    sandbox (the gateway clones it only when it is not: the sandboxes here
    have no way out): its install command runs in the clone, then its run
    command is the stdio server, with its envs. The gateway is started the
    way the SDK starts it, and a failing run command fails the start with
    its output."""
    s = Sandbox.create("mcp-gateway", metadata={"sandbox_test_id": test_id})
    try:
        repo = "/opt/mcp-gateway/github/acme/echo"
        s.commands.run(f"mkdir -p {repo}", user="root")
        s.files.write(f"{repo}/server.py", ECHO_SERVER, user="root")
        config = {"github/acme/echo": {"install_cmd": "touch installed", "run_cmd": "exec $PY server.py",
                                       "envs": {"PY": "/opt/space/mcp/venv/bin/python"}}}
        token = str(uuid.uuid4())
        s.commands.run(f"mcp-gateway --config '{json.dumps(config)}'", user="root", envs={"GATEWAY_ACCESS_TOKEN": token})
        assert s.files.exists(f"{repo}/installed")
        tools, (res,) = await tools_and_calls(plain(s.get_mcp_url()), token, [("shout", {"text": "hi"})])
        assert tools == ["shout"]
        assert text(res) == "HI!"

        bad = {"github/acme/echo": {"run_cmd": "echo broken server >&2; exit 7"}}
        with pytest.raises(SandboxException) as e:
            s.commands.run(f"mcp-gateway --addr :50006 --config '{json.dumps(bad)}'", user="root", envs={"GATEWAY_ACCESS_TOKEN": token})
        assert 'MCP server "github/acme/echo"' in str(e.value.stderr) and "broken server" in str(e.value.stderr), e.value.stderr
    finally:
        s.kill()
