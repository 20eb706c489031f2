"""A cell that asks for more memory than the sandbox has fails inside its
kernel (MemoryError, from the kernel's RLIMIT_AS), and the sandbox, its
agent and the next cell go on. Through spaced only: the local debug-mode
server runs kernels on the host, with the host's memory."""

import os

import pytest
from e2b_code_interpreter import Sandbox


def test_memory_hog_fails_in_its_kernel():
    if os.environ.get("E2B_DEBUG") == "true":
        pytest.skip("needs a real sandbox: runs in TestSDKsThroughSpaced")
    sbx = Sandbox.create()
    try:
        total = int(sbx.commands.run("awk '/MemTotal/ {print $2}' /proc/meminfo").stdout) * 1024
        hog = sbx.run_code(f"x = bytearray({total * 2})")
        assert hog.error is not None and hog.error.name == "MemoryError", hog
        # The kernel lives on (its state too), and so do the sandbox and its agent.
        assert sbx.run_code("y = 41\ny + 1").text == "42"
        assert sbx.is_running()
        assert sbx.commands.run("echo alive").stdout == "alive\n"
    finally:
        sbx.kill()
