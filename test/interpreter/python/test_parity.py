"""What E2B's code interpreter does that a user moving from it relies on
(issue 25): the default contexts listed from the start, contexts in any
directory of the sandbox, images Pillow saves and box-and-whisker charts
as results. Each runs in both modes (debug: the local server; through
spaced: the code-interpreter-v1 template), except where it says."""

import os
import uuid

import pytest
from e2b.exceptions import SandboxException
from e2b_code_interpreter import Sandbox
from e2b_code_interpreter.charts import BoxAndWhiskerChart, ChartType

DEBUG = os.environ.get("E2B_DEBUG") == "true"


def test_default_contexts_listed_at_create():
    """Right after create the list holds E2B's two default contexts,
    Python's and JavaScript's, with their fields, on a sandbox with a
    token, private ports and no internet (every SDK call carries a
    credential there)."""
    if DEBUG:
        pytest.skip("needs a new sandbox: runs in TestSDKsThroughSpaced")
    sbx = Sandbox.create(secure=True, allow_internet_access=False, network={"allow_public_traffic": False})
    try:
        listed = sbx.list_code_contexts()
        assert sorted(c.language for c in listed) == ["javascript", "python"], listed
        assert all(c.cwd == "/home/user" and c.id for c in listed), listed
        js = next(c for c in listed if c.language == "javascript")
        py = next(c for c in listed if c.language == "python")
        # They are the contexts run_code(language=...) uses: state set by
        # language shows through the listed context.
        sbx.run_code("globalThis.seen = 41", language="javascript")
        assert sbx.run_code("seen + 1", context=js).text == "42"
        sbx.run_code("seen = 41")
        assert sbx.run_code("seen + 1", context=py).text == "42"
        # Nothing more was made by running them.
        assert sorted(c.id for c in sbx.list_code_contexts()) == sorted([js.id, py.id])
    finally:
        sbx.kill()


def test_context_in_root_home(sandbox):
    """A context may work in any directory of the sandbox: kernels run as
    root, as E2B's do (in debug mode as the test's user, root here)."""
    for language, code in [
        ("python", "import os; open('made-here', 'w').write('x'); (os.getcwd(), os.getuid(), os.path.exists('/root/made-here'))"),
        ("javascript", "Deno.writeTextFileSync('made-here-js', 'x'); [Deno.cwd(), Deno.uid(), Deno.statSync('/root/made-here-js').isFile].join(' ')"),
    ]:
        ctx = sandbox.create_code_context(cwd="/root", language=language)
        try:
            assert ctx.cwd == "/root"
            execution = sandbox.run_code(code, context=ctx)
            assert execution.error is None, execution.error
            if language == "python":
                assert execution.text == "('/root', 0, True)", execution.text
            else:
                assert execution.text == "/root 0 true", execution.text
        finally:
            sandbox.remove_code_context(ctx)
    sandbox.run_code("import os; [os.remove(p) for p in ('/root/made-here', '/root/made-here-js')]")


def test_context_cwd_that_does_not_exist(sandbox):
    missing = f"/no-such-dir-{uuid.uuid4().hex[:8]}"
    before = [c.id for c in sandbox.list_code_contexts()]
    with pytest.raises(SandboxException) as refused:
        sandbox.create_code_context(cwd=missing)
    # A 4xx that names the directory (the SDK shows status and body).
    text = str(refused.value)
    assert text.startswith("400 Bad Request") and missing in text and "no such file or directory" in text, text
    assert [c.id for c in sandbox.list_code_contexts()] == before


PIL_IMAGE = """
import numpy
from PIL import Image
image = Image.fromarray((numpy.random.rand(16, 16, 3) * 255).astype('uint8')).convert('RGBA')
"""


def test_pillow_save_is_a_png_result(sandbox, workdir):
    """An image a cell saves to a file by name comes back as a PNG result
    (as on E2B), so do show() and an image as the cell's last value."""
    ctx = sandbox.create_code_context(cwd=workdir)
    try:
        saved = sandbox.run_code(PIL_IMAGE + "image.save('test.png')\nprint('Image saved.')", context=ctx)
        assert saved.error is None, saved.error
        assert len(saved.results) == 1 and saved.results[0].png, saved.results
        assert saved.logs.stdout == ["Image saved.\n"]
        # The file is written as well, and a save to a file object shows
        # nothing (E2B displays saves to a name only).
        check = sandbox.run_code(
            "import io, os\nbuf = io.BytesIO(); image.save(buf, 'PNG')\n(os.path.getsize('test.png') > 0, buf.tell() > 0)",
            context=ctx,
        )
        assert check.error is None, check.error
        assert [r.is_main_result for r in check.results] == [True] and check.text == "(True, True)"
        shown = sandbox.run_code("image.show()\nprint('Image shown.')", context=ctx)
        assert shown.error is None and shown.results and shown.results[0].png, shown
        last = sandbox.run_code("image", context=ctx)
        assert last.results and last.results[0].png
    finally:
        sandbox.remove_code_context(ctx)


BOX_CODE = """
import matplotlib.pyplot as plt

waits = {
    'north': [12, 15, 14, 10, 18, 13, 30],
    'south': [22, 25, 21, 27, 24],
    'east': [8, 9, 11, 7, 10, 12],
}
fig, ax = plt.subplots()
ax.set_title('Queue waits by depot')
ax.set_xlabel('Depot')
ax.set_ylabel('Minutes')
ax.boxplot(list(waits.values()), labels=list(waits.keys()), patch_artist=True)
plt.show()
"""


def test_box_and_whisker_chart(sandbox):
    """A box plot drawn with labels= (as E2B users' code does: matplotlib
    3.11 removed it) and filled boxes (patch_artist=True: e2b-charts, here
    as on E2B, reads a box plot from its box patches and takes one of bare
    lines for a line chart) comes back as a box_and_whisker chart with each
    box's statistics (linear quartiles, whiskers at 1.5 IQR: 30 is north's
    outlier)."""
    execution = sandbox.run_code(BOX_CODE)
    assert execution.error is None, execution.error
    chart = execution.results[0].chart
    assert isinstance(chart, BoxAndWhiskerChart), type(chart)
    assert chart.type == ChartType.BOX_AND_WHISKER
    assert chart.title == "Queue waits by depot"
    assert chart.x_label == "Depot" and chart.y_label == "Minutes"
    assert chart.x_unit is None and chart.y_unit is None
    boxes = chart.elements
    assert [b.label for b in boxes] == ["north", "south", "east"]
    assert [b.outliers for b in boxes] == [[30], [], []]
    assert [b.min for b in boxes] == [10, 21, 7]
    assert [b.first_quartile for b in boxes] == [12.5, 22, 8.25]
    assert [b.median for b in boxes] == [14, 24, 9.5]
    assert [b.third_quartile for b in boxes] == [16.5, 25, 10.75]
    assert [b.max for b in boxes] == [18, 27, 12]
    assert execution.results[0].png
