"""A sandbox's metrics over time and its logs, sync and async.

Metrics through the SDK's get_metrics (GET /sandboxes/{id}/metrics) and the
SDK's generated client for GET /sandboxes/metrics; logs through the SDK's
generated client (the SDK has no logs method): GET /v2/sandboxes/{id}/logs,
which E2B's dashboard and CLI read, and the older GET /sandboxes/{id}/logs.
spaced samples every running sandbox from the host every
SPACE_METRICS_INTERVAL (1 s in this suite).
"""

import asyncio
import datetime
import json
import time

import pytest

from e2b import AsyncSandbox, CommandExitException, Sandbox, SandboxNotFoundException
from e2b.api.client.api.sandboxes import (
    get_sandboxes_metrics,
    get_sandboxes_sandbox_id_logs,
    get_v_2_sandboxes_sandbox_id_logs,
)
from e2b.api.client.models import LogLevel, LogsDirection
from e2b.api.client_async import get_api_client as get_async_api_client
from e2b.api.client_sync import get_api_client
from e2b.connection_config import ConnectionConfig


def wait_metrics(sbx, ok, timeout=30):
    """Polls get_metrics until ok(metrics) holds, and returns them."""
    deadline = time.monotonic() + timeout
    while True:
        metrics = sbx.get_metrics()
        if ok(metrics):
            return metrics
        assert time.monotonic() < deadline, f"metrics never as wanted: {metrics}"
        time.sleep(0.5)


def fields(entry):
    return entry.fields.additional_properties


def test_metrics_series(sandbox: Sandbox):
    sandbox.commands.run("head -c 16000000 /dev/urandom > /home/user/blob")
    # One CPU spins until some sample shows it (of all the sandbox's CPUs; at
    # least 10% of one: a host loaded by the other suites gave a 5 s spin under
    # 30% of one, CI run 27; an idle sandbox is under 1%), then it stops.
    spin = sandbox.commands.run("sh -c 'while :; do :; done'", background=True)
    metrics = wait_metrics(
        sandbox,
        lambda ms: len(ms) >= 3 and any(m.cpu_used_pct * m.cpu_count >= 10 for m in ms) and ms[-1].disk_used >= 16_000_000,
    )
    spin.kill()
    assert len(metrics) >= 3
    for m in metrics:
        assert m.cpu_count >= 1
        assert 0 <= m.cpu_used_pct <= 100
        assert 0 < m.mem_used < m.mem_total
        assert 0 <= m.disk_used <= m.disk_total
        assert m.timestamp.tzinfo is not None
    stamps = [m.timestamp for m in metrics]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert abs((stamps[-1] - datetime.datetime.now(datetime.timezone.utc)).total_seconds()) < 30

    # start and end (unix seconds) bound the series; the static form too.
    mid = stamps[len(stamps) // 2]
    later = Sandbox.get_metrics(sandbox.sandbox_id, start=mid)
    assert later and all(m.timestamp >= mid.replace(microsecond=0) for m in later)
    assert len(later) < len(Sandbox.get_metrics(sandbox.sandbox_id))
    future = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    assert Sandbox.get_metrics(sandbox.sandbox_id, start=future) == []
    assert Sandbox.get_metrics(sandbox.sandbox_id, end=stamps[0] - datetime.timedelta(seconds=1)) == []

    # The latest sample of several sandboxes at once.
    res = get_sandboxes_metrics.sync_detailed(
        client=get_api_client(ConnectionConfig()), sandbox_ids=[sandbox.sandbox_id, "nosuchsandbox"]
    )
    assert res.status_code == 200
    latest = res.parsed.sandboxes  # the generated model leaves it a dict of SandboxMetric dicts
    assert list(latest) == [sandbox.sandbox_id]
    assert latest[sandbox.sandbox_id]["memTotal"] == metrics[-1].mem_total

    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_metrics("nosuchsandbox")


def test_logs(sandbox: Sandbox):
    sandbox.commands.run("echo py-log-probe; exit 0")
    handle = sandbox.commands.run("sleep 0.1; exit 5", background=True)
    with pytest.raises(CommandExitException):
        handle.wait()
    client = get_api_client(ConnectionConfig())
    res = get_v_2_sandboxes_sandbox_id_logs.sync_detailed(sandbox.sandbox_id, client=client)
    assert res.status_code == 200
    logs = res.parsed.logs
    messages = [e.message for e in logs]
    created = [e for e in logs if e.message == "Sandbox created"]
    assert len(created) == 1 and fields(created[0])["source"] == "spaced", messages
    assert fields(created[0])["template"] == "base"
    started = [e for e in logs if fields(e).get("event_type") == "process_start" and "py-log-probe" in fields(e)["command"]]
    assert len(started) == 1, messages
    pid = fields(started[0])["pid"]
    assert started[0].message == f"Process with pid {pid} started"
    assert started[0].level == LogLevel.INFO and fields(started[0])["source"] == "agent"
    ended = [e for e in logs if e.message == f"Process with pid {handle.pid} ended"]
    assert len(ended) == 1 and fields(ended[0])["exit_code"] == "5"
    stamps = [e.timestamp for e in logs]
    assert stamps == sorted(stamps)

    # Newest first, limit, search, level.
    res = get_v_2_sandboxes_sandbox_id_logs.sync_detailed(
        sandbox.sandbox_id, client=client, direction=LogsDirection.BACKWARD, limit=2
    )
    assert [e.message for e in res.parsed.logs] == messages[::-1][:2]
    res = get_v_2_sandboxes_sandbox_id_logs.sync_detailed(sandbox.sandbox_id, client=client, search="py-log")
    assert res.parsed.logs == []  # the command is a field, not the message
    res = get_v_2_sandboxes_sandbox_id_logs.sync_detailed(
        sandbox.sandbox_id, client=client, search=f"pid {pid} "
    )
    assert [e.message for e in res.parsed.logs] == [f"Process with pid {pid} started", f"Process with pid {pid} ended"]
    res = get_v_2_sandboxes_sandbox_id_logs.sync_detailed(sandbox.sandbox_id, client=client, level=LogLevel.ERROR)
    assert all(e.level == LogLevel.ERROR for e in res.parsed.logs)
    # The cursor (unix milliseconds) with forward: from that line on.
    cursor = int(ended[0].timestamp.timestamp() * 1000)
    res = get_v_2_sandboxes_sandbox_id_logs.sync_detailed(sandbox.sandbox_id, client=client, cursor=cursor)
    assert res.parsed.logs and all(e.timestamp.timestamp() * 1000 >= cursor for e in res.parsed.logs)

    # The older endpoint: each line as JSON, and the same entries.
    res = get_sandboxes_sandbox_id_logs.sync_detailed(sandbox.sandbox_id, client=client, limit=1000)
    assert res.status_code == 200
    assert [json.loads(line.line)["message"] for line in res.parsed.logs] == messages
    assert [e.message for e in res.parsed.log_entries] == messages

    res = get_v_2_sandboxes_sandbox_id_logs.sync_detailed("nosuchsandbox", client=client)
    assert res.status_code == 404


def test_logs_kept_after_kill():
    sbx = Sandbox.create()
    sbx.commands.run("true")
    sbx.kill()
    res = get_v_2_sandboxes_sandbox_id_logs.sync_detailed(
        sbx.sandbox_id, client=get_api_client(ConnectionConfig()), direction=LogsDirection.BACKWARD, limit=1
    )
    assert res.status_code == 200
    assert [e.message for e in res.parsed.logs] == ["Sandbox killed"]


@pytest.mark.parametrize(
    "query,says",
    [
        ("direction=sideways", "direction"),
        ("level=loud", "level"),
        ("cursor=yesterday", "cursor"),
        ("limit=5000", "limit"),
    ],
)
def test_logs_bad_input(sandbox: Sandbox, api, query, says):
    r = api.get(f"/v2/sandboxes/{sandbox.sandbox_id}/logs?{query}")
    assert r.status_code == 400
    body = r.json()
    assert body["code"] == 400 and says in body["message"]


def test_metrics_bad_input(sandbox: Sandbox, api):
    r = api.get(f"/sandboxes/{sandbox.sandbox_id}/metrics?start=yesterday")
    assert r.status_code == 400 and "start" in r.json()["message"]
    r = api.get("/sandboxes/metrics")
    assert r.status_code == 400 and "sandbox_ids" in r.json()["message"]


async def test_async_metrics_and_logs(async_sandbox: AsyncSandbox):
    await async_sandbox.commands.run("echo async-probe")
    deadline = time.monotonic() + 30
    metrics = []
    while len(metrics) < 2:
        assert time.monotonic() < deadline, metrics
        await asyncio.sleep(0.5)
        metrics = await async_sandbox.get_metrics()
    assert metrics[0].timestamp < metrics[-1].timestamp
    assert all(0 < m.mem_used < m.mem_total and m.disk_total > 0 for m in metrics)
    static = await AsyncSandbox.get_metrics(async_sandbox.sandbox_id, start=metrics[-1].timestamp)
    assert static and static[0].timestamp >= metrics[-1].timestamp.replace(microsecond=0)

    client = get_async_api_client(ConnectionConfig())
    res = await get_v_2_sandboxes_sandbox_id_logs.asyncio_detailed(async_sandbox.sandbox_id, client=client)
    assert res.status_code == 200
    cmds = [fields(e).get("command", "") for e in res.parsed.logs]
    assert any("async-probe" in c for c in cmds), cmds

    with pytest.raises(SandboxNotFoundException):
        await AsyncSandbox.get_metrics("nosuchsandbox")
