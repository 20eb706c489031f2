// Run by space-interpreter as a silent cell when a JJava kernel starts
// (kernel.go), with SPACE_OUTPUT_LIMIT replaced by the server's output
// limit in bytes. The Java side of what startup/00-space.py does for
// Python: each execution's System.out and System.err output together is
// cut a little under the server's limit (room for the messages' JSON), in
// UTF-8 bytes on a character boundary, before JJava turns it into
// messages; at the cut the kernel sends a space_output_truncated message
// (the server then shows its marker once) and drops the execution's later
// output.
//
// JJava sets System.out and System.err to its JupyterIO's PrintStreams
// (final fields, over a buffer that each flush sends as one stream
// message) before every execution, so those fields are replaced by
// bounded PrintStreams that write into the original ones. An execution is
// told from the next by the reply environment JJava gives the buffer for
// it. Strings longer than what is left are cut before they are encoded.
// One block: nothing is declared in the user's session. (Its comment
// lines are taken out before it is sent: JJava never ends a cell that
// starts with them.)
{
  final long bound = Math.max(SPACE_OUTPUT_LIMIT - 65536L, 1L);
  final var io = org.dflib.jjava.jupyter.kernel.BaseKernel.notebookKernel().getIO();
  final var ioClass = org.dflib.jjava.jupyter.kernel.JupyterIO.class;
  final var jupyterOut = ioClass.getDeclaredField("jupyterOut");
  jupyterOut.setAccessible(true);
  final Object buffer = jupyterOut.get(io);
  final var envField = org.dflib.jjava.jupyter.channels.JupyterOutputStream.class.getDeclaredField("env");
  envField.setAccessible(true);
  final var typeNew = org.dflib.jjava.jupyter.messages.MessageType.class.getDeclaredConstructor(String.class, Class.class, boolean.class);
  typeNew.setAccessible(true);
  // Not registered with JJava's types (it only sends this one).
  @SuppressWarnings("unchecked")
  final var truncated = (org.dflib.jjava.jupyter.messages.MessageType<Object>) typeNew.newInstance("space_output_truncated", Object.class, true);

  // The count of one execution, shared by stdout and stderr.
  class Count {
    Object env = new Object(); // the execution counted
    long used;
    boolean cut;

    // What is left for the current execution (-1: it was cut).
    synchronized long left() {
      Object now;
      try {
        now = envField.get(buffer);
      } catch (IllegalAccessException e) {
        now = null;
      }
      if (now != env) {
        env = now;
        used = 0;
        cut = false;
      }
      return cut ? -1 : bound - used;
    }

    synchronized void mark() {
      cut = true;
      used = bound;
      if (env instanceof org.dflib.jjava.jupyter.channels.DefaultReplyEnvironment e) {
        e.publish(new org.dflib.jjava.jupyter.messages.Message<Object>(e.getContext(), truncated, new java.util.HashMap<String, Object>()));
      }
    }
  }
  final Count count = new Count();

  class Bounded extends java.io.PrintStream {
    Bounded(java.io.PrintStream into) {
      super(into, true, java.nio.charset.StandardCharsets.UTF_8);
    }

    @Override
    public void write(int b) {
      write(new byte[] {(byte) b}, 0, 1);
    }

    @Override
    public void write(byte[] b, int off, int len) {
      synchronized (count) {
        long left = count.left();
        if (left < 0) return;
        if (len <= left) {
          count.used += len;
          super.write(b, off, len);
          return;
        }
        int n = (int) left;
        while (n > 0 && (b[off + n] & 0xC0) == 0x80) n--; // a character's first byte
        if (n > 0) super.write(b, off, n);
        super.flush();
        count.mark();
      }
    }

    // s, cut to a character more than what is left (its bytes are at least
    // as many), so that a huge string is not encoded whole.
    private String fit(String s) {
      long left = count.left();
      if (s == null || left < 0 || s.length() <= left + 1) return s;
      return s.substring(0, (int) left + 1);
    }

    // One write of the whole (fitted) string, so that JJava's stream
    // sends it as one message: PrintStream's own print hands it on in
    // chunks of 8 KiB, each flushed as a message of its own, and the
    // kernel's IOPub socket drops messages once a thousand wait for a slow
    // reader (CI: after 200 println of 1 MB the truncation message, sent
    // last, was dropped so).
    @Override
    public void print(String s) {
      byte[] b = String.valueOf(fit(s)).getBytes(java.nio.charset.StandardCharsets.UTF_8);
      write(b, 0, b.length);
    }

    @Override
    public void println(String s) {
      String t = fit(s); // one write, as PrintStream's own println
      print((t == null ? "null" : t) + System.lineSeparator());
    }

    @Override
    public void print(Object o) {
      print(String.valueOf(o));
    }

    @Override
    public void println(Object o) {
      println(String.valueOf(o));
    }

    @Override
    public void print(char[] s) {
      print(new String(s, 0, (int) Math.min(s.length, Math.max(count.left() + 1, 0))));
    }

    @Override
    public void println(char[] s) {
      println(new String(s, 0, (int) Math.min(s.length, Math.max(count.left() + 1, 0))));
    }

    @Override
    public java.io.PrintStream append(CharSequence s, int start, int end) {
      CharSequence c = s == null ? "null" : s;
      long left = count.left();
      if (left >= 0 && end - start > left + 1) end = start + (int) left + 1;
      print(c.subSequence(start, end).toString());
      return this;
    }

    @Override
    public java.io.PrintStream append(CharSequence s) {
      print(String.valueOf(s));
      return this;
    }

    @Override
    public String toString() { // a cell's value when it ends with printf
      return "java.io.PrintStream@" + Integer.toHexString(hashCode());
    }
  }
  for (String name : new String[] {"out", "err"}) {
    final var f = ioClass.getDeclaredField(name);
    f.setAccessible(true);
    f.set(io, new Bounded((java.io.PrintStream) f.get(io)));
  }
}
