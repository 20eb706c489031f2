# The SDK runs in E2B_DEBUG mode: Sandbox.create() calls no API and the
# code interpreter is http://localhost:49999, where interpreter_test.go
# serves space-interpreter.
import os

import pytest
from e2b_code_interpreter import Sandbox


@pytest.fixture(scope="session")
def sandbox():
    assert os.environ.get("E2B_DEBUG") == "true", "run through interpreter_test.go"
    return Sandbox.create()
