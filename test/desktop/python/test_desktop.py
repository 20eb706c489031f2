"""The E2B Desktop SDK (Python, sync) on spaced's desktop template: the
screen, the mouse, the keyboard and applications, each checked on the
screenshot's pixels or on what the action left behind (a saved file, a
moved window)."""

import io
import os
import time

import pytest
from e2b import CommandExitException
from e2b_desktop import Sandbox
from PIL import Image

from conftest import changed, count, settled, shot, wait_for, window_geometry


def windows(sbx, app):
    """The SDK's get_application_windows(app), [] when there is none (the
    SDK's xdotool search exits 1 then)."""
    try:
        return [w for w in sbx.get_application_windows(app) if w]
    except CommandExitException:
        return []


def close_all(sbx, *processes):
    for p in processes:
        sbx.commands.run(f"pkill -x {p} || true")
    for p in processes:
        wait_for(f"{p} to exit", lambda: count(sbx, p) == 0, timeout=20)


def test_create_shows_one_xfce_desktop(desktop):
    # The template's display and session (restored from its checkpoint);
    # the SDK's own Xvfb and startxfce4 at create found them and started
    # no second server or session.
    assert desktop.get_screen_size() == (1024, 768)
    img = shot(desktop)
    assert img.size == desktop.get_screen_size()
    for process in ("Xvfb", "xfce4-session", "xfwm4", "xfdesktop", "xfce4-panel"):
        assert count(desktop, process) == 1, process
    # A drawn desktop (wallpaper, panel, icons), not a blank framebuffer.
    colors = img.getcolors(maxcolors=1 << 20)
    assert colors is None or len(colors) > 50, f"{len(colors)} colours on the screen"
    # The same screen as a stream of chunks.
    streamed = Image.open(io.BytesIO(b"".join(desktop.screenshot(format="stream"))))
    assert streamed.format == "PNG" and streamed.size == img.size
    if os.environ.get("SPACE_DESKTOP_SHOTS"):
        img.save(os.path.join(os.environ["SPACE_DESKTOP_SHOTS"], "desktop.png"))
    # X11 is not on TCP: nothing listens on 6000-6063 (netstat lists the
    # sandbox's listeners; envd's port is the positive control).
    listeners = desktop.commands.run("netstat -tln").stdout
    assert ":49983 " in listeners, listeners
    assert not any(f":{6000 + n} " in listeners for n in range(64)), listeners


def test_resolution_given_at_create():
    # Another size than the template's: the SDK's start ends with the asked
    # size and one session on it.
    sbx = Sandbox.create(resolution=(1280, 800))
    try:
        assert sbx.get_screen_size() == (1280, 800)
        wait_for("the panel on the new screen",
                 lambda: sbx.commands.run("xdotool search --onlyvisible --class xfce4-panel || true").stdout.strip())
        img = shot(sbx)
        assert img.size == (1280, 800)
        for process in ("Xvfb", "xfce4-session", "xfwm4", "xfdesktop"):
            assert count(sbx, process) == 1, process
        colors = img.getcolors(maxcolors=1 << 20)
        assert colors is None or len(colors) > 50
    finally:
        sbx.kill()


def test_display_poll_waits_for_a_pending_xvfb(desktop):
    # The SDK's `Xvfb :0 ...` runs as `/bin/bash -l -c "Xvfb :0 ..."`: until
    # that login shell has read its profile and exec'd the Xvfb wrapper, a
    # poll of the display must wait for it, or it sees the display about to
    # be replaced. A profile that sleeps for the shells whose command is an
    # Xvfb holds that window open; the Xvfb (the template's own screen) is
    # then a no-op. The poll waits it out, and answers at once without it
    # (the control).
    def poll():
        start = time.monotonic()
        assert desktop.commands.run("xdpyinfo -display :0 >/dev/null && echo up").stdout.strip() == "up"
        return time.monotonic() - start

    assert poll() < 2.5
    profile = "/home/user/.bash_profile"
    assert not desktop.files.exists(profile)  # the template has none: removed again below
    desktop.files.write(profile,
                        "[ -f ~/.profile ] && . ~/.profile\n"
                        "case \"$BASH_EXECUTION_STRING\" in Xvfb\\ *) sleep 4 ;; esac\n")
    try:
        pending = desktop.commands.run(
            "Xvfb :0 -ac -screen 0 1024x768x24 -retro -dpi 96 -nolisten tcp -nolisten unix",
            background=True)
        waited = poll()
        pending.wait()
    finally:
        desktop.files.remove(profile)
    assert waited >= 2.5, f"the poll answered after {waited:.1f} s, while an Xvfb start was pending"
    assert poll() < 2.5


def test_move_mouse_and_cursor_position(desktop):
    desktop.move_mouse(123, 456)
    assert desktop.get_cursor_position() == (123, 456)
    a = shot(desktop)
    desktop.move_mouse(600, 300)
    assert desktop.get_cursor_position() == (600, 300)
    b = shot(desktop)
    # screenshot() draws the pointer: it left the first spot and is at the
    # second.
    assert changed(a, b, (118, 451, 150, 490)), "the pointer did not leave (123, 456)"
    assert changed(a, b, (595, 295, 630, 335)), "the pointer is not drawn at (600, 300)"


def test_editor_write_double_click_press(desktop):
    path = "/home/user/notes.txt"
    desktop.files.write(path, "")
    try:
        desktop.open(path)
        wid = wait_for("a Mousepad window", lambda: windows(desktop, "mousepad"))[0]
        wait_for("Mousepad to have the focus", lambda: desktop.get_current_window_id() in windows(desktop, "mousepad"))
        (x, y, w, h), _ = window_geometry(desktop, wid)
        box = (x, y, x + w, y + h)
        # The pointer away from the window, so that it is in no diff.
        desktop.move_mouse(1015, 5 if y > 40 else 760)
        empty = settled(desktop, box)

        desktop.write("alpha")
        typed = settled(desktop, box)
        word = changed(empty, typed, box)
        assert word, "typing left the window's pixels as they were"
        # The word is drawn in the window's upper half, left part.
        assert box[0] <= word[0] and word[2] <= box[0] + w // 2 and word[3] <= box[1] + h // 2, (word, box)

        desktop.write(" beta")
        desktop.press("enter")
        desktop.write("delta")
        # Double-click in the middle of the word's pixels selects it; what
        # is typed next replaces it.
        desktop.double_click((word[0] + word[2]) // 2, (word[1] + word[3]) // 2)
        desktop.write("gamma")
        desktop.press(["ctrl", "s"])
        wait_for("ctrl+s to save the file",
                 lambda: desktop.files.read(path).rstrip("\n") == "gamma beta\ndelta", timeout=30)
    finally:
        close_all(desktop, "mousepad")


def test_scroll_moves_the_text_and_back(desktop):
    path = "/home/user/long.txt"
    desktop.files.write(path, "".join(f"line {i}\n" for i in range(400)))
    try:
        desktop.open(path)
        wid = wait_for("a Mousepad window", lambda: windows(desktop, "mousepad"))[0]
        (x, y, w, h), _ = window_geometry(desktop, wid)
        box = (x, y + h // 4, x + w - 30, y + h - 30)  # the text, not the bars
        desktop.move_mouse(x + w // 2, y + h // 2)
        top = settled(desktop, box)
        desktop.scroll("down", 5)
        down = settled(desktop, box)
        assert changed(top, down, box), "scrolling down did not move the text"
        desktop.scroll("up", 5)
        back = settled(desktop, box)
        assert changed(top, back, box) is None, "scrolling back up did not show the same text"
    finally:
        close_all(desktop, "mousepad")


def test_drag_selects_text(desktop):
    # drag() is press, one move, release: it selects the text it crosses,
    # and what is typed next replaces the selection. (xfwm4 moves a window
    # by its title bar only after a second motion event, so the SDK's
    # one-move drag does not move windows, here as on E2B's Xfce.)
    path = "/home/user/drag.txt"
    desktop.files.write(path, "")
    try:
        desktop.open(path)
        wid = wait_for("a Mousepad window", lambda: windows(desktop, "mousepad"))[0]
        wait_for("Mousepad to have the focus", lambda: desktop.get_current_window_id() in windows(desktop, "mousepad"))
        (x, y, w, h), _ = window_geometry(desktop, wid)
        box = (x, y, x + w, y + h)
        desktop.move_mouse(1015, 5 if y > 40 else 760)
        empty = settled(desktop, box)
        desktop.write("one two")
        text = changed(empty, settled(desktop, box), box)
        assert text, "typing left the window's pixels as they were"
        mid = (text[1] + text[3]) // 2
        desktop.drag((text[0], mid), (text[2] + 2, mid))
        desktop.write("dragged")
        desktop.press(["ctrl", "s"])
        wait_for("the selection replaced and saved",
                 lambda: desktop.files.read(path).rstrip("\n") == "dragged", timeout=30)
    finally:
        close_all(desktop, "mousepad")


def test_right_click_menu_left_click_closes_it(desktop):
    spot = (700, 450)
    desktop.move_mouse(*spot)
    before = settled(desktop)
    desktop.right_click(*spot)
    # xfdesktop's menu opens at the pointer.
    menu = wait_for("the desktop's menu",
                    lambda: changed(before, shot(desktop), (spot[0] - 20, spot[1] - 400, 1024, 768)))
    assert menu[2] - menu[0] > 100 and menu[3] - menu[1] > 100, f"changed only {menu}"
    # A left click elsewhere on the desktop closes it.
    desktop.left_click(200, 300)
    wait_for("the menu to close",
             lambda: changed(before, shot(desktop), (spot[0] + 30, spot[1] - 300, 1024, 760)) is None)


def test_middle_click_menu_escape_closes_it(desktop):
    spot = (300, 400)
    desktop.move_mouse(*spot)
    before = settled(desktop)
    # xfdesktop's window list opens on a middle click.
    desktop.middle_click(*spot)
    # (Below the top panel, whose clock changes by itself.)
    menu = wait_for("the window list menu",
                    lambda: changed(before, shot(desktop), (spot[0] + 20, 30, 1024, 760)))
    assert menu[2] - menu[0] > 50, f"changed only {menu}"
    desktop.press("escape")
    wait_for("the menu to close",
             lambda: changed(before, shot(desktop), (spot[0] + 20, 30, 1024, 760)) is None)


def test_launch_an_application(desktop):
    assert windows(desktop, "thunar") == []
    try:
        desktop.launch("thunar", "/home/user")
        wid = wait_for("a Thunar window", lambda: windows(desktop, "thunar"))[0]
        # Thunar maps its window titled "Thunar" and retitles it with the
        # folder's name once the folder is open.
        wait_for("Thunar's window titled with the folder",
                 lambda: "user" in desktop.get_window_title(wid))
    finally:
        close_all(desktop, "thunar")


def test_open_a_url_in_chromium(desktop):
    # A page served in the sandbox, a solid colour that is nowhere else.
    desktop.files.write("/tmp/www/page.html",
                        "<html><body style='margin:0;background:#ff00ff'><h1>space</h1></body></html>")
    server = desktop.commands.run("cd /tmp/www && exec python3 -m http.server 8123", background=True)
    try:
        wait_for("the page server", lambda: desktop.commands.run(
            "curl -fs http://127.0.0.1:8123/page.html >/dev/null && echo up || true").stdout.strip())
        desktop.open("http://127.0.0.1:8123/page.html")
        wait_for("a Chromium window", lambda: windows(desktop, "chromium"), timeout=90)

        def magenta():
            img = shot(desktop)
            hits = sum(n for n, c in img.getcolors(maxcolors=1 << 22) if c == (255, 0, 255))
            return hits > img.size[0] * img.size[1] // 5

        wait_for("the page's colour on a fifth of the screen", magenta, timeout=90)
    finally:
        server.kill()
        close_all(desktop, "chromium")
