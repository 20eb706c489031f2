"""Stdout flood for the resource attempts: 64 KiB lines as fast as they
can be written, forever, or as many MiB as argv[1] says.

Run as `python3 - [MiB] <<'PY' ... PY` (see floodMiB), so that it needs no
upload before the command that floods.
"""
import sys

LINE = b"A" * 65535 + b"\n"
out = sys.stdout.buffer
if len(sys.argv) > 1:
    for _ in range(int(sys.argv[1]) * 16):
        out.write(LINE)
    out.flush()
else:
    while True:
        out.write(LINE)
