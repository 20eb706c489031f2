# Times what an E2B user pays with the real SDK: Sandbox.create() and
# commands.run("echo hi") to its result, N times after two warm-ups, one
# sandbox at a time (each killed after, not timed). Prints one JSON line
# of samples in milliseconds. Argument: N. Environment: E2B_API_URL,
# E2B_SANDBOX_URL, E2B_API_KEY, as a user sets them.
import json, sys, time
from e2b import Sandbox

n = int(sys.argv[1])
create, run, total = [], [], []
for i in range(n + 2):
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
