"""Commands and PTYs through the sync client."""

import time

import pytest

from e2b import CommandExitException, PtySize, Sandbox


def test_run_stdout_stderr_exit_code(sandbox: Sandbox):
    r = sandbox.commands.run("echo out; echo err >&2; whoami; pwd")
    assert r.exit_code == 0
    assert r.stdout == "out\nuser\n/home/user\n"
    assert r.stderr == "err\n"
    assert r.error is None


def test_run_env_cwd_and_user():
    sbx = Sandbox.create(envs={"FROM_CREATE": "c1"})
    try:
        r = sbx.commands.run("echo $FROM_CREATE $FROM_RUN; pwd", envs={"FROM_RUN": "r1"}, cwd="/tmp")
        assert r.stdout == "c1 r1\n/tmp\n"
        assert sbx.commands.run("whoami", user="root").stdout == "root\n"
    finally:
        sbx.kill()


def test_nonzero_exit_raises(sandbox: Sandbox):
    with pytest.raises(CommandExitException) as e:
        sandbox.commands.run("echo bad >&2; exit 3")
    assert e.value.exit_code == 3
    assert e.value.stderr == "bad\n"


def test_output_streams_event_by_event(sandbox: Sandbox):
    # Unbuffered all the way: the command waits for a file that is written
    # only once its first line has arrived (a timed check flaked on a loaded
    # host, CI run 28), so a stream held back to the end never ends.
    seen = []

    def on_stdout(line):
        seen.append(line)
        if line == "1\n":
            sandbox.files.write("/tmp/go-on", "")

    sandbox.commands.run(
        "echo 1; while [ ! -e /tmp/go-on ]; do sleep 0.05; done; echo 2",
        on_stdout=on_stdout,
        timeout=60,
    )
    assert seen == ["1\n", "2\n"]


def test_background_and_connect_by_pid(sandbox: Sandbox):
    h = sandbox.commands.run("sleep 1; echo done", background=True)
    again = sandbox.commands.connect(h.pid)
    r = again.wait()
    assert r.exit_code == 0
    assert r.stdout == "done\n"


def test_stdin_send_and_close(sandbox: Sandbox):
    h = sandbox.commands.run("cat", background=True, stdin=True)
    sandbox.commands.send_stdin(h.pid, "hello\n")
    sandbox.commands.send_stdin(h.pid, "world\n")
    sandbox.commands.close_stdin(h.pid)
    r = h.wait()
    assert r.stdout == "hello\nworld\n"


def test_list_and_kill(sandbox: Sandbox):
    h = sandbox.commands.run("sleep 60", background=True)
    procs = sandbox.commands.list()
    mine = [p for p in procs if p.pid == h.pid]
    assert mine, procs
    assert mine[0].cmd == "/bin/bash"
    assert "sleep 60" in " ".join(mine[0].args)

    assert sandbox.commands.kill(h.pid) is True
    with pytest.raises(CommandExitException):
        h.wait()
    assert all(p.pid != h.pid for p in sandbox.commands.list())
    # As envd: an ended process cannot be killed (the agent keeps it only for
    # reconnects), and neither can an unknown pid.
    assert sandbox.commands.kill(h.pid) is False
    assert sandbox.commands.kill(999999) is False


def test_command_timeout_kills_the_process(sandbox: Sandbox):
    from e2b import TimeoutException

    t = time.monotonic()
    with pytest.raises(TimeoutException):
        sandbox.commands.run("sleep 30", timeout=2)
    assert time.monotonic() - t < 15


def test_pty_create_send_resize_exit(sandbox: Sandbox):
    h = sandbox.pty.create(PtySize(rows=24, cols=80))
    sandbox.pty.resize(h.pid, PtySize(rows=40, cols=120))
    sandbox.pty.send_stdin(h.pid, b"stty size; echo pty-$((6*7)); exit\n")
    out = bytearray()
    h.wait(on_pty=lambda data: out.extend(data))
    text = out.decode(errors="replace")
    assert "40 120" in text
    assert "pty-42" in text


def test_pty_kill(sandbox: Sandbox):
    h = sandbox.pty.create(PtySize(rows=24, cols=80))
    assert sandbox.pty.kill(h.pid) is True
    with pytest.raises(CommandExitException):
        h.wait()
