"""What spaced does not support answers a clear 501 through the SDK, never a
sandbox that silently behaves differently: an idempotent create
(`idempotency_key=`, served in cluster mode only; the
suite runs one spaced) and the network settings spaced does not act on
(`egress_proxy` and the rest), at create and at update_network.
The SDK raises SandboxException with spaced's text, and nothing is made."""

import pytest

from e2b import AsyncSandbox, Sandbox, SandboxException, SandboxQuery

# (create keyword arguments, what spaced's 501 names)
REFUSED = [
    pytest.param({"idempotency_key": "space-test-key-1"},
                 "idempotent creates (Idempotency-Key, idempotency_key) are not supported by a single spaced (only in cluster mode)", id="idempotency-key"),
    pytest.param({"network": {"egress_proxy": {"address": "proxy.example.com:1080"}}},
                 "network.egressProxy (tunnelling egress through a SOCKS5 proxy) is not supported by spaced", id="egress-proxy"),
    pytest.param({"network": {"dns_servers": ["1.1.1.1"]}},
                 "network.dnsServers is not supported by spaced", id="dns-servers"),
    pytest.param({"network": {"mask_request_host": "${PORT}-app.example.com"}},
                 "network.maskRequestHost is not supported by spaced", id="mask-request-host"),
    pytest.param({"network": {"https_ports": [3000]}},
                 "network.httpsPorts is not supported by spaced", id="https-ports"),
]


def check(e: pytest.ExceptionInfo, text: str):
    assert e.value.status_code == 501, e.value
    assert str(e.value).startswith(f"501: {text}"), str(e.value)


@pytest.mark.parametrize("kwargs,text", REFUSED)
def test_create_refused(test_id, kwargs, text):
    with pytest.raises(SandboxException) as e:
        Sandbox.create(metadata={"sandbox_test_id": test_id}, **kwargs)
    check(e, text)
    assert Sandbox.list(query=SandboxQuery(metadata={"sandbox_test_id": test_id})).next_items() == []


@pytest.mark.parametrize("kwargs,text", REFUSED)
async def test_create_refused_async(test_id, kwargs, text):
    with pytest.raises(SandboxException) as e:
        await AsyncSandbox.create(metadata={"sandbox_test_id": test_id}, **kwargs)
    check(e, text)
    assert await AsyncSandbox.list(query=SandboxQuery(metadata={"sandbox_test_id": test_id})).next_items() == []


def test_update_network_refused(sandbox: Sandbox):
    """The update refuses a proxy too, and the sandbox keeps its policy."""
    def deny_out():
        return (sandbox.get_info().network or {}).get("deny_out") or []

    assert deny_out() == []
    with pytest.raises(SandboxException) as e:
        sandbox.update_network({"deny_out": ["0.0.0.0/0"], "egress_proxy": {"address": "proxy.example.com:1080"}})
    check(e, "network.egressProxy (tunnelling egress through a SOCKS5 proxy) is not supported by spaced")
    assert deny_out() == []
    # The control: the same update without the proxy is taken.
    sandbox.update_network({"deny_out": ["0.0.0.0/0"]})
    assert deny_out() == ["0.0.0.0/0"]
