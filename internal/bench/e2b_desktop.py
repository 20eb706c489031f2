# Times what an E2B Desktop user pays with the real SDK (e2b_desktop):
# Sandbox.create() (the SDK starts Xvfb and Xfce itself) to its first
# screenshot(), N times after one warm-up, one sandbox at a time (each
# killed after, not timed); then, in one sandbox, CALLS screenshot() and
# left_click(x, y) (the SDK runs scrot and xdotool as commands) after two
# warm-ups each, a tenth of a second apart as the native calls are
# (bench.agentPause). Prints one JSON line of samples in milliseconds.
# Arguments: N CALLS. Environment: E2B_API_URL, E2B_SANDBOX_URL,
# E2B_API_KEY, as a user sets them.
import json, sys, time
from e2b_desktop import Sandbox

n, calls = int(sys.argv[1]), int(sys.argv[2])
first = []
for i in range(n + 1):
    t0 = time.perf_counter()
    sb = Sandbox.create(timeout=300)
    png = sb.screenshot()
    t1 = time.perf_counter()
    sb.kill()
    if bytes(png[:8]) != b"\x89PNG\r\n\x1a\n":
        sys.exit("screenshot() is not a PNG")
    if i >= 1:
        first.append((t1 - t0) * 1000)

sb = Sandbox.create(timeout=600)
try:
    shots, clicks = [], []
    for i in range(calls + 2):
        time.sleep(0.1)
        t0 = time.perf_counter()
        sb.screenshot()
        if i >= 2:
            shots.append((time.perf_counter() - t0) * 1000)
    for i in range(calls + 2):
        # Back and forth: the SDK's synced move waits for the pointer to move.
        time.sleep(0.1)
        t0 = time.perf_counter()
        sb.left_click(900 + i % 2, 700)
        if i >= 2:
            clicks.append((time.perf_counter() - t0) * 1000)
finally:
    sb.kill()
print(json.dumps({"create_to_screenshot": first, "screenshot": shots, "click": clicks}))
