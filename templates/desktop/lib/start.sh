#!/bin/bash
# start.sh - the desktop template's start command: display :0 at
# 1024x768x24 (the E2B Desktop SDK's default size, with its flags) and an
# Xfce session on it. It stays in the foreground while the display runs;
# the template is checkpointed once ready.sh passes, so every sandbox of
# the template starts with both running.
set -euo pipefail
# The desktop lock: the Xvfb and startxfce4 wrappers take it.
: >/tmp/.space-desktop.lock
export DISPLAY=:0 HOME="${HOME:-/home/user}" USER="${USER:-$(id -un)}"
# The screen's X server: no TCP listener (nothing outside the sandbox, nor
# another sandbox, can reach X11) and, as the SDK starts it, only the
# abstract socket.
/usr/bin/Xvfb :0 -ac -screen 0 1024x768x24 -retro -dpi 96 -nolisten tcp -nolisten unix &
xvfb=$!
for _ in $(seq 100); do
  xdpyinfo >/dev/null 2>&1 && break
  kill -0 "$xvfb" 2>/dev/null || { echo "start: Xvfb exited" >&2; exit 1; }
  sleep 0.1
done
echo "$xvfb" > /tmp/.space-desktop-xvfb.pid
# No screen saver blanking an idle desktop.
xset s off -dpms 2>/dev/null || true
# The native computer-use API (space-desktop, port 49990): X11 over the
# display's abstract socket, as root only to read the agent's state file
# (the sandbox's token). It connects to the display again when the SDK
# replaces it.
sudo -n /usr/local/bin/space-desktop >/tmp/.space-desktop-api.log 2>&1 &
# startxfce4 starts its own session bus (dbus-launch) for the session.
/usr/bin/startxfce4 >/tmp/.space-desktop-xfce4.log 2>&1 &
wait "$xvfb"
