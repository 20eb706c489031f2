# Run by space-interpreter's kernel bootstrap (kernel.go) in a bash_kernel
# process, before bash_kernel starts. The bash side of what
# startup/00-space.py does for Python.
#
# bash_kernel reads bash's terminal with pexpect, a line at a time: each
# read searches the whole line read so far for the prompt or a line end,
# and keeps it all, so one line of 200 MB with no newline (printf '%*s'
# 200000000 '') was held whole, searched again after every 4 KiB read
# (quadratic: the cell never ended) and sent as one message. Here the
# incremental read of a cell's output is done in one pass instead: a line
# longer than 16 KiB goes out in pieces as it comes (the text the client
# sees is the same), and each execution's output together is cut a little
# under the server's limit (room for the messages' JSON), after which the
# kernel sends a space_output_truncated message (the server shows its
# marker and drops the execution's later output) and reads the rest only
# to find bash's prompt.


def _space_bash_hook():
    import functools
    import os
    import re
    import time

    from bash_kernel import kernel as bk

    limit = int(os.environ.pop("SPACE_MAX_OUTPUT_BYTES", "0") or 0)
    bound = max(limit - (64 << 10), 1) if limit > 0 else 0
    piece = 16 << 10  # a longer line goes out in pieces
    tail = 256  # kept back from a piece: the start of a prompt, cut by a read
    line_end = re.compile(r"\r?\n|\r")
    state = {"used": 0, "cut": False, "recent": ""}

    def send(wrapper, text, whole):
        # A whole line (or what precedes the prompt) goes through
        # bash_kernel's own handling (its display helpers; it ends the
        # text with a newline if it has none); a piece of a longer line is
        # sent as it is, so that the pieces join into the line.
        kernel = getattr(wrapper.line_output_callback, "__self__", None)
        if whole or kernel is None:
            wrapper.line_output_callback(text)
        elif not kernel.silent:
            kernel.send_response(kernel.iopub_socket, "stream", {"name": "stdout", "text": text})

    def emit(wrapper, text, whole=True):
        if not text:
            return
        state["recent"] = (state["recent"] + text)[-4096:]
        if not bound:
            send(wrapper, text, whole)
            return
        if state["cut"]:
            return
        left = bound - state["used"]
        size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        if size <= left:
            state["used"] += size
            send(wrapper, text, whole)
            return
        part = text.encode("utf-8", "surrogatepass")[:left].decode("utf-8", "ignore")
        state["used"], state["cut"] = bound, True
        if part:
            send(wrapper, part, False)
        kernel = getattr(wrapper.line_output_callback, "__self__", None)
        if kernel is not None and not kernel.silent:
            kernel.send_response(kernel.iopub_socket, "space_output_truncated", {})

    expect_prompt = bk.IREPLWrapper._expect_prompt

    def space_expect_prompt(self, timeout=-1):
        # timeout None: a cell's incremental output (bash_kernel's own
        # meaning); anything else is bash_kernel's, unchanged.
        if timeout is not None:
            return expect_prompt(self, timeout)
        prompts = [re.compile(self.ps1_re), re.compile(self.ps2_re)]
        child = self.child
        buf, pos, seen = child.buffer, 0, 0
        child.buffer = ""
        try:
            while True:
                # The earliest prompt in what is left (ps1 first on a tie,
                # as pexpect picks). Only what came since the last search
                # (and a prompt's length before it) is searched: each byte
                # once, however long the line.
                found, start = None, max(pos, seen - tail)
                if buf.find(self.unique_prompt, start) >= 0:  # fast: no regex on most reads
                    for i, p in enumerate(prompts):
                        m = p.search(buf, start)
                        if m and (found is None or m.start() < found[1].start()):
                            found = (i, m)
                stop = found[1].start() if found else len(buf)
                while buf.find("\n", max(pos, seen), stop) >= 0 or buf.find("\r", max(pos, seen), stop) >= 0:
                    e = line_end.search(buf, max(pos, seen), stop)
                    if e is None:
                        break
                    emit(self, buf[pos:e.start()] + ("\r" if e.group() == "\r" else "\n"))
                    pos = e.end()
                if found:
                    i, m = found
                    emit(self, buf[pos:m.start()])
                    child.before, child.after, child.match = buf[pos:m.start()], m.group(), m
                    child.buffer = buf[m.end():]
                    return i
                rest = buf[pos:]
                if len(rest) > piece:
                    emit(self, rest[:-tail], False)
                    rest = rest[-tail:]
                buf, pos, seen = rest, 0, len(rest)
                data = child.read_nonblocking(max(child.maxread, 1 << 16), None)
                if len(data) < 8192 and (state["cut"] or len(rest) > tail):
                    # In a long line, or dropping: reads of a few KiB, each a
                    # wake-up of bash and of us, made a flood of 200 MB take
                    # minutes; a pause lets the terminal's buffer fill.
                    time.sleep(0.002)
                buf += data
        except BaseException:
            # EOF (bash exited) or an interrupt: bash_kernel goes on from
            # what is left, as from pexpect's own buffer.
            child.before = child.buffer = buf[pos:]
            raise

    bk.IREPLWrapper._expect_prompt = space_expect_prompt

    do_execute = bk.BashKernel.do_execute

    # wraps: ipykernel passes the arguments do_execute's signature names.
    @functools.wraps(do_execute)
    def space_do_execute(self, *args, **kwargs):
        state["used"], state["cut"], state["recent"] = 0, False, ""
        wrapper = self.bashwrapper
        reply = do_execute(self, *args, **kwargs)
        # bash died during the cell (bash_kernel started a new one, which
        # has none of its variables) after saying an allocation failed:
        # the cell fails saying so, as a kernel that ran out of memory
        # does, instead of ending well after "Restarting Bash".
        recent = state["recent"]
        if self.bashwrapper is not wrapper and not self.silent and (
                "cannot allocate" in recent or "out of memory" in recent.lower()):
            error = {"ename": "UnexpectedEndOfExecution", "traceback": [],
                     "evalue": "bash ran out of memory before the execution finished; a new bash "
                               "started (the shell's variables and functions are gone)"}
            self.send_response(self.iopub_socket, "error", error)
            return dict(error, status="error", execution_count=self.execution_count)
        return reply

    bk.BashKernel.do_execute = space_do_execute


_space_bash_hook()
del _space_bash_hook
