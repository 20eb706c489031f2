import time

import pytest
from e2b_code_interpreter import Sandbox
from e2b_code_interpreter.charts import BarChart, LineChart
from e2b.exceptions import NotFoundException, TimeoutException


def test_value(sandbox):
    execution = sandbox.run_code("1 + 1")
    assert execution.text == "2"
    assert execution.error is None
    assert execution.execution_count >= 1


def test_print(sandbox):
    execution = sandbox.run_code("print('hello')\nimport sys; print('warn', file=sys.stderr)")
    assert execution.logs.stdout == ["hello\n"]
    assert execution.logs.stderr == ["warn\n"]


def test_error(sandbox):
    execution = sandbox.run_code("def f():\n    raise ValueError('boom')\nf()")
    assert execution.error is not None
    assert execution.error.name == "ValueError"
    assert execution.error.value == "boom"
    assert "line 2" in execution.error.traceback


def test_dataframe(sandbox):
    execution = sandbox.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
    result = execution.results[0]
    assert result.is_main_result
    assert result.data == {"a": [1, 2], "b": ["x", "y"]}
    assert "<table" in result.html
    assert "data" in result.formats() and "html" in result.formats()


def test_charts(sandbox):
    execution = sandbox.run_code(
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [4, 5, 6]); plt.title('line'); plt.xlabel('x'); plt.show()\n"
        "plt.bar(['a', 'b'], [3, 4]); plt.title('bars'); plt.show()"
    )
    assert execution.error is None
    assert len(execution.results) == 2
    line, bar = execution.results
    assert line.png and bar.png
    assert isinstance(line.chart, LineChart), type(line.chart)
    assert line.chart.title == "line" and line.chart.x_label == "x"
    assert [tuple(p) for p in line.chart.elements[0].points] == [(1, 4), (2, 5), (3, 6)]
    assert isinstance(bar.chart, BarChart), type(bar.chart)
    assert [(e.label, e.value) for e in bar.chart.elements] == [("a", 3), ("b", 4)]


def test_several_displays(sandbox):
    execution = sandbox.run_code(
        "import pandas as pd\n"
        "from IPython.display import HTML, Markdown, display\n"
        "display(1)\n"
        "display('two')\n"
        "display(HTML('<b>three</b>'), Markdown('# four'))\n"
        "display(pd.DataFrame({'n': [5]}))\n"
        "6"
    )
    assert execution.error is None
    results = execution.results
    assert [r.is_main_result for r in results] == [False] * 5 + [True], results
    assert [r.text for r in results[:2]] == ["1", "two"]
    assert results[2].html == "<b>three</b>"
    assert results[3].markdown == "# four"
    assert results[4].data == {"n": [5]} and "<table" in results[4].html
    assert execution.text == "6"


def test_two_contexts_at_once(sandbox, workdir):
    """Each cell waits for the other's file: they finish only if both run
    at the same time, in contexts of their own."""
    from concurrent.futures import ThreadPoolExecutor

    a = sandbox.create_code_context(cwd=workdir)
    b = sandbox.create_code_context(cwd=workdir)
    try:
        cell = (
            "import os, time\n"
            "me, other = {!r}, {!r}\n"
            "open(me, 'w').close()\n"
            "for _ in range(600):\n"
            "    if os.path.exists(other):\n"
            "        break\n"
            "    time.sleep(0.05)\n"
            "who = me\n"
            "os.path.exists(other)"
        )
        with ThreadPoolExecutor(2) as pool:
            runs = [
                pool.submit(sandbox.run_code, cell.format("a", "b"), context=a),
                pool.submit(sandbox.run_code, cell.format("b", "a"), context=b),
            ]
            texts = [r.result().text for r in runs]
        assert texts == ["True", "True"], texts
        assert sandbox.run_code("who", context=a).text == "a"
        assert sandbox.run_code("who", context=b).text == "b"
    finally:
        sandbox.remove_code_context(a)
        sandbox.remove_code_context(b)


def test_callbacks_in_order(sandbox):
    events = []
    execution = sandbox.run_code(
        "import sys, time\nprint('one', flush=True)\ntime.sleep(0.3)\ndisplay(5)\n"
        "print('two', file=sys.stderr, flush=True)\n'end'",
        on_stdout=lambda m: events.append(("stdout", m.line)),
        on_stderr=lambda m: events.append(("stderr", m.line)),
        on_result=lambda r: events.append(("result", r.text)),
    )
    assert events == [("stdout", "one\n"), ("result", "5"), ("stderr", "two\n"), ("result", "end")]
    assert execution.text == "end"


def test_contexts(sandbox, workdir):
    ctx = sandbox.create_code_context(cwd=workdir)
    assert ctx.language == "python" and ctx.cwd == workdir
    assert ctx.id in [c.id for c in sandbox.list_code_contexts()]
    sandbox.run_code("x = 42", context=ctx)
    assert sandbox.run_code("x", context=ctx).text == "42"
    assert sandbox.run_code("import os; os.getcwd()", context=ctx).text == workdir
    # The default context does not share the state.
    assert sandbox.run_code("'x' in globals()").text == "False"
    sandbox.restart_code_context(ctx)
    assert sandbox.run_code("x", context=ctx).error.name == "NameError"
    sandbox.remove_code_context(ctx)
    assert ctx.id not in [c.id for c in sandbox.list_code_contexts()]
    with pytest.raises(NotFoundException):
        sandbox.remove_code_context(ctx.id)


def test_envs(sandbox):
    execution = sandbox.run_code("import os\nos.environ['SDK_VAR']", envs={"SDK_VAR": "it's set"})
    assert execution.text == "it's set"
    assert sandbox.run_code("import os\nos.environ.get('SDK_VAR', 'unset')").text == "unset"


def test_bash(sandbox, workdir):
    execution = sandbox.run_code("echo hello from bash", language="bash")
    assert execution.logs.stdout == ["hello from bash\n"]
    assert execution.error is None
    # run_code with a language uses that language's default context.
    sandbox.run_code("export SDK_BASH=kept", language="bash")
    assert sandbox.run_code("echo $SDK_BASH", language="bash").logs.stdout == ["kept\n"]
    failed = sandbox.run_code("ls /nonexistent-sdk", language="bash")
    assert failed.error.name == "ExitStatus" and failed.error.value == "2"

    ctx = sandbox.create_code_context(cwd=workdir, language="bash")
    assert ctx.language == "bash" and ctx.cwd == workdir
    assert sandbox.run_code("pwd", context=ctx).logs.stdout == [workdir + "\n"]
    assert sandbox.run_code("echo $SDK_BASH", context=ctx).logs.stdout == ["\n"]
    execution = sandbox.run_code('printf "%s\\n" "$SDK_VAR"', context=ctx, envs={"SDK_VAR": "it's set"})
    assert execution.logs.stdout == ["it's set\n"]
    assert sandbox.run_code('echo "${SDK_VAR-unset}"', context=ctx).logs.stdout == ["unset\n"]
    sandbox.remove_code_context(ctx)


def test_bash_timeout(sandbox):
    ctx = sandbox.create_code_context(language="bash")
    with pytest.raises(TimeoutException):
        sandbox.run_code("sleep 30; touch finished", context=ctx, timeout=2)
    start = time.monotonic()
    assert sandbox.run_code("ls finished", context=ctx).error.name == "ExitStatus"
    assert time.monotonic() - start < 5
    sandbox.remove_code_context(ctx)


def test_javascript(sandbox):
    execution = sandbox.run_code("console.log('hi'); 6 * 7", language="js")
    assert execution.text == "42"
    assert execution.logs.stdout == ["hi\n"]
    assert sandbox.run_code("const n: number = 21\nn * 2", language="typescript").text == "42"
    failed = sandbox.run_code("throw new TypeError('bad')", language="javascript")
    assert failed.error.name == "TypeError" and failed.error.value == "bad"
    assert sandbox.run_code("Deno.env.get('SDK_JS')", language="js", envs={"SDK_JS": "set"}).text == "set"


def test_timeout_then_next_cell(sandbox):
    ctx = sandbox.create_code_context()
    start = time.monotonic()
    with pytest.raises(TimeoutException):
        sandbox.run_code("import time\ntime.sleep(30)\nfinished = True", context=ctx, timeout=2)
    assert time.monotonic() - start < 10
    # The server interrupted the cell when the SDK closed the connection.
    start = time.monotonic()
    assert sandbox.run_code("'finished' in globals()", context=ctx).text == "False"
    assert time.monotonic() - start < 5
    sandbox.remove_code_context(ctx)


def test_insecure_sandbox(sandbox):
    """secure=False: the SDK sends no token; spaced's proxy gives the
    interpreter the sandbox's, as it does for envd. Through spaced only."""
    import os

    if os.environ.get("E2B_DEBUG") == "true":
        pytest.skip("needs spaced's proxy: runs in TestSDKsThroughSpaced")
    sbx = Sandbox.create(secure=False)
    try:
        assert sbx.run_code("6 * 7").text == "42"
    finally:
        sbx.kill()
