"""Fixtures for running the unmodified E2B Python SDK against spaced.

The SDK is pointed at spaced only through the environment, as a user would:
E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY (test/e2b/e2b_test.go sets them).
"""

import os
import uuid

import httpx
import pytest

from e2b import AsyncSandbox, Sandbox

for var in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY"):
    if not os.environ.get(var):
        raise RuntimeError(f"{var} must be set (run through test/e2b/e2b_test.go)")

API_URL = os.environ["E2B_API_URL"]
SANDBOX_URL = os.environ["E2B_SANDBOX_URL"]
API_KEY = os.environ["E2B_API_KEY"]


@pytest.fixture
def test_id():
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def sandbox(test_id):
    sbx = Sandbox.create(metadata={"sandbox_test_id": test_id})
    try:
        yield sbx
    finally:
        try:
            sbx.kill()
        except Exception:
            pass


@pytest.fixture
async def async_sandbox(test_id):
    sbx = await AsyncSandbox.create(metadata={"sandbox_test_id": test_id})
    try:
        yield sbx
    finally:
        try:
            await sbx.kill()
        except Exception:
            pass


@pytest.fixture
def raw():
    """A plain HTTP client for requests the SDK would never send."""
    with httpx.Client(base_url=SANDBOX_URL, timeout=30) as c:
        yield c


@pytest.fixture
def api():
    with httpx.Client(base_url=API_URL, timeout=30, headers={"X-API-KEY": API_KEY}) as c:
        yield c
