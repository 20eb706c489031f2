#!/bin/sh
# ready.sh - the desktop template's ready check: the display answers and
# the session shows its desktop and panel (mapped windows), so the
# checkpoint holds a drawn desktop, not one still starting.
export DISPLAY=:0
xdpyinfo >/dev/null 2>&1 || exit 1
xdotool search --onlyvisible --class xfdesktop >/dev/null 2>&1 || exit 1
xdotool search --onlyvisible --class xfce4-panel >/dev/null 2>&1 || exit 1
# The native API's server answers (its health route needs no token).
curl -fsS -o /dev/null --max-time 2 http://127.0.0.1:49990/health || exit 1
