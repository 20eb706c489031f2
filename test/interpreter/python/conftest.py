# The unmodified SDK, in one of two modes (interpreter_test.go picks):
#   - E2B_DEBUG=true: Sandbox.create() calls no API and the code interpreter
#     is http://localhost:49999, where the test serves space-interpreter;
#   - through spaced (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY): a real
#     sandbox of the code-interpreter-v1 template, reached through spaced's
#     E2B proxy.
import os
import uuid

import pytest
from e2b_code_interpreter import Sandbox

DEBUG = os.environ.get("E2B_DEBUG") == "true"


@pytest.fixture(scope="session")
def sandbox():
    assert DEBUG or os.environ.get("E2B_API_URL"), "run through interpreter_test.go"
    sbx = Sandbox.create()
    yield sbx
    if not DEBUG:
        sbx.kill()


@pytest.fixture
def workdir(sandbox, tmp_path):
    """A directory for a context's cwd, where the kernels run."""
    if DEBUG:
        return str(tmp_path)
    path = f"/home/user/ctx-{uuid.uuid4().hex[:8]}"
    sandbox.files.make_dir(path)
    return path
