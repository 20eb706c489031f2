"""R and Java, as E2B's code interpreter runs them (issue 25): language
"r" (IRkernel) and "java" (JJava here, IJava on E2B), through the SDK's
run_code and contexts, sync and async. What E2B's own tests of these
languages check (e2b-dev/code-interpreter python/tests: default kernels,
env vars) holds here, and so do plots, data frames, errors, timeouts and
restarts. Each runs in both modes except where it says."""

import asyncio
import base64
import os

import pytest
from e2b.exceptions import TimeoutException
from e2b_code_interpreter import AsyncSandbox, Sandbox

DEBUG = os.environ.get("E2B_DEBUG") == "true"


def test_r_cells(sandbox):
    execution = sandbox.run_code('print("Hello, World!")', language="r")
    assert execution.logs.stdout == ['[1] "Hello, World!"\n']
    assert execution.error is None
    # IRkernel sends a value as a display, not as the cell's result.
    value = sandbox.run_code("x <- 20; x + 22", language="r")
    assert [r.text for r in value.results] == ["[1] 42"] and value.text is None
    # The default context keeps its state.
    assert sandbox.run_code("cat(x)", language="r").logs.stdout == ["20"]
    failed = sandbox.run_code('stop("boom")', language="r")
    assert failed.error.name == "ERROR" and "boom" in failed.error.value, failed.error
    assert 'stop("boom")' in failed.error.traceback


def test_r_plot_and_data_frame(sandbox):
    plot = sandbox.run_code("plot(1:10, main = 'ten')", language="r")
    assert plot.error is None, plot.error
    assert len(plot.results) == 1 and base64.b64decode(plot.results[0].png).startswith(b"\x89PNG")
    frame = sandbox.run_code('data.frame(a = 1:2, b = c("x", "y"))', language="r")
    assert "<table" in frame.results[0].html and "1 1 x" in frame.results[0].text
    assert "html" in frame.results[0].formats()


def test_java_cells(sandbox):
    execution = sandbox.run_code('System.out.println("Hello, World!")', language="java")
    # IJava (E2B) sends println's text and its newline apart; JJava together.
    assert execution.logs.stdout == ["Hello, World!\n"]
    assert sandbox.run_code("int n = 21;", language="java").error is None
    assert sandbox.run_code("n * 2", language="java").text == "42"
    failed = sandbox.run_code('throw new IllegalStateException("bad")', language="java")
    assert "IllegalStateException" in failed.error.value and "bad" in failed.error.value, failed.error
    assert "java.lang.IllegalStateException: bad" in failed.error.traceback
    compile_error = sandbox.run_code('int x = "s";', language="java")
    assert compile_error.error.name == "CompilationException"
    assert "incompatible types" in compile_error.error.traceback


def test_env_vars_per_execution(sandbox):
    """E2B's test_env_vars_per_execution for r and java."""
    r = sandbox.run_code("Sys.getenv('FOO')", envs={"FOO": "bar"}, language="r")
    assert r.results[0].text.strip() == '[1] "bar"'
    r_empty = sandbox.run_code("Sys.getenv('FOO', unset = 'default')", language="r")
    assert r_empty.results[0].text.strip() == '[1] "default"'
    java = sandbox.run_code('System.getProperty("FOO")', envs={"FOO": "bar"}, language="java")
    assert java.text.strip() == "bar"
    java_empty = sandbox.run_code('System.getProperty("FOO", "default")', language="java")
    assert java_empty.text.strip() == "default"
    # Values are data, whatever they hold.
    odd = "it's \"q\" \\u0022 \\ $HOME\nline"
    got = sandbox.run_code("cat(Sys.getenv('ODD'))", envs={"ODD": odd}, language="r")
    assert "".join(got.logs.stdout) == odd
    got = sandbox.run_code('System.out.print(System.getProperty("ODD"))', envs={"ODD": odd}, language="java")
    assert "".join(got.logs.stdout) == odd


def test_env_vars_on_sandbox():
    """E2B's test_env_vars_on_sandbox and test_env_vars_overwrite for r
    and java: the sandbox's env vars, a request's over them, then the
    sandbox's again. Needs a sandbox created with envs."""
    if DEBUG:
        pytest.skip("needs a new sandbox: runs in TestSDKsThroughSpaced")
    sbx = Sandbox.create(envs={"TEST_ENV_VAR": "supertest"})
    try:
        assert sbx.run_code("Sys.getenv('TEST_ENV_VAR')", language="r").results[0].text.strip() == '[1] "supertest"'
        over = sbx.run_code("Sys.getenv('TEST_ENV_VAR')", language="r", envs={"TEST_ENV_VAR": "overwrite"})
        assert over.results[0].text.strip() == '[1] "overwrite"'
        assert sbx.run_code("Sys.getenv('TEST_ENV_VAR')", language="r").results[0].text.strip() == '[1] "supertest"'
        get = 'System.getProperty("TEST_ENV_VAR")'
        assert sbx.run_code(get, language="java").text.strip() == "supertest"
        assert sbx.run_code(get, language="java", envs={"TEST_ENV_VAR": "overwrite"}).text.strip() == "overwrite"
        assert sbx.run_code(get, language="java").text.strip() == "supertest"
    finally:
        sbx.kill()


def test_contexts_timeout_restart(sandbox, workdir):
    for language, cwd, set_code, get_code, slow in [
        ("r", "cat(getwd())", "kept <- 42", "cat(kept)", "Sys.sleep(30)"),
        ("java", 'System.out.print(new java.io.File("x").getAbsoluteFile().getParent())',
         "int kept = 42;", "System.out.print(kept)", "Thread.sleep(30000)"),
    ]:
        ctx = sandbox.create_code_context(cwd=workdir, language=language)
        try:
            assert ctx.language == language and ctx.cwd == workdir
            assert ctx.id in [c.id for c in sandbox.list_code_contexts()]
            assert sandbox.run_code(cwd, context=ctx).logs.stdout == [workdir]
            assert sandbox.run_code(set_code, context=ctx).error is None
            with pytest.raises(TimeoutException):
                sandbox.run_code(slow, context=ctx, timeout=3)
            # The server interrupted the cell; the context kept its state.
            assert sandbox.run_code(get_code, context=ctx).logs.stdout == ["42"]
            sandbox.restart_code_context(ctx)
            assert sandbox.run_code(get_code, context=ctx).error is not None
        finally:
            sandbox.remove_code_context(ctx)
        assert ctx.id not in [c.id for c in sandbox.list_code_contexts()]


def test_async_sdk(sandbox):
    """The async SDK: both languages, streamed callbacks, a context."""

    async def main():
        sbx = await AsyncSandbox.connect(sandbox.sandbox_id) if not DEBUG else await AsyncSandbox.create()
        lines = []
        execution = await sbx.run_code(
            'for (i in 1:3) cat(i, "\\n")', language="r", on_stdout=lambda m: lines.append(m.line)
        )
        assert execution.error is None and "".join(lines) == "1 \n2 \n3 \n"
        ctx = await sbx.create_code_context(language="java")
        try:
            assert (await sbx.run_code('String.join("-", "a", "b")', context=ctx)).text == "a-b"
            env = await sbx.run_code('System.getProperty("K")', context=ctx, envs={"K": "v"})
            assert env.text == "v"
        finally:
            await sbx.remove_code_context(ctx)

    asyncio.run(main())
