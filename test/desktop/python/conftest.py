# The unmodified E2B Desktop SDK against spaced (desktop_test.go sets
# E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY and builds the template).
# Helpers read the screen: screenshots are decoded with Pillow, and a check
# compares pixels, not exit codes.
import io
import os
import time

import pytest
from e2b_desktop import Sandbox
from PIL import Image, ImageChops


@pytest.fixture(scope="session")
def desktop():
    """One desktop at the SDK's default resolution, shared by the tests that
    leave it as they found it (each closes what it opened)."""
    assert os.environ.get("E2B_API_URL"), "run through desktop_test.go"
    sbx = Sandbox.create()
    yield sbx
    sbx.kill()


def shot(sbx) -> Image.Image:
    """The screen now, as an RGB image (from the SDK's screenshot())."""
    data = sbx.screenshot()
    assert bytes(data[:8]) == b"\x89PNG\r\n\x1a\n", "screenshot() is not a PNG"
    return Image.open(io.BytesIO(bytes(data))).convert("RGB")


def changed(a: Image.Image, b: Image.Image, box=None):
    """The bounding box (left, top, right, bottom) of the pixels that differ
    between a and b, within box if given (then in box's coordinates offset
    back to the screen's), or None."""
    if box:
        a, b = a.crop(box), b.crop(box)
    bb = ImageChops.difference(a, b).getbbox()
    if bb and box:
        bb = (bb[0] + box[0], bb[1] + box[1], bb[2] + box[0], bb[3] + box[1])
    return bb


def wait_for(what, fn, timeout=60, interval=0.3):
    """fn() polled until it returns something true; that value. Fails naming
    what it waited for. (A bound on waiting, not a timed assertion.)"""
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout}s for {what}")
        time.sleep(interval)


def settled(sbx, box=None, tries=20):
    """A screenshot taken once two in a row agree (within box): what an
    action did has been drawn."""
    prev = shot(sbx)
    for _ in range(tries):
        time.sleep(0.3)
        cur = shot(sbx)
        if changed(prev, cur, box) is None:
            return cur
        prev = cur
    pytest.fail("the screen did not settle")


def window_geometry(sbx, wid):
    """(x, y, width, height) of window wid on the screen, and the height of
    the window manager's title bar above it, from xwininfo (xdotool's
    getwindowgeometry counts the frame's offset twice)."""
    out = sbx.commands.run(f"xwininfo -id {wid}").stdout
    v = {k.strip(): val.strip() for k, _, val in (line.partition(":") for line in out.splitlines()) if val}
    return (int(v["Absolute upper-left X"]), int(v["Absolute upper-left Y"]),
            int(v["Width"]), int(v["Height"])), int(v["Relative upper-left Y"])


def count(sbx, process):
    """How many processes named exactly process run in the sandbox."""
    r = sbx.commands.run(f"pgrep -cx {process} || true")
    return int(r.stdout.strip() or 0)
