# Times what an E2B user pays with the real SDK: Sandbox.create() and
# commands.run("echo hi") to its result, N times after two warm-ups, one
# sandbox at a time (each killed after, not timed). Prints one JSON line
# of samples in milliseconds. Argument: N. Environment: E2B_API_URL,
# E2B_SANDBOX_URL, E2B_API_KEY, as a user sets them; SPACE_METRICS_URL,
# when set, is spaced's /metrics: each create first waits (at most 5 s)
# until the base pool has a sandbox ready, as the native figure's do, so
# both are warm creates (read with the API key, which /metrics asks for).
import json, os, re, sys, time, urllib.request
from e2b import Sandbox


def wait_pool():
    url = os.environ.get("SPACE_METRICS_URL")
    deadline = time.time() + 5
    while url and time.time() < deadline:
        req = urllib.request.Request(url, headers={"Authorization": "Bearer " + os.environ["E2B_API_KEY"]})
        text = urllib.request.urlopen(req, timeout=5).read().decode()
        m = re.search(r'^space_pool_ready\{template="base"\} (\S+)$', text, re.M)
        if not m or float(m.group(1)) >= 1:
            return
        time.sleep(0.05)

n = int(sys.argv[1])
create, run, total = [], [], []
for i in range(n + 2):
    wait_pool()
    t0 = time.perf_counter()
    sb = Sandbox.create(timeout=300)
    t1 = time.perf_counter()
    r = sb.commands.run("echo hi")
    t2 = time.perf_counter()
    sb.kill()
    if r.stdout != "hi\n":
        sys.exit("echo hi printed %r" % r.stdout)
    if i >= 2:
        create.append((t1 - t0) * 1000)
        run.append((t2 - t1) * 1000)
        total.append((t2 - t0) * 1000)
print(json.dumps({"create": create, "run": run, "total": total}))
