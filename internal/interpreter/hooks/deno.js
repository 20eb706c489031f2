// Run by space-interpreter as a silent cell when a Deno kernel starts
// (kernel.go), called with the server's output limit in bytes. The
// JavaScript side of what startup/00-space.py does for Python: each
// execution's console output together is cut a little under the server's
// limit (room for the messages' JSON) before it leaves V8, so one
// console.log of 200 MiB is never one message of 200 MiB in the kernel.
//
// Deno's kernel sends console output (its op_print) as stream messages
// from a queue a task of its own empties, after the cell's reply and idle
// status in most runs when the text is large. So the server ends a Deno
// cell only when the fence below has printed its sentinel through that
// same queue (execute.go): every output of the cell is out by then. The
// fence also says whether the cell was cut (the server then shows its
// truncation marker) and starts the next cell's count.
//
// After a cell that printed much the fence also runs V8's collector
// (the kernel starts with --expose-gc; gc is taken off the global object
// here, so the user's code sees what it would without the flag): the
// printed strings are garbage by then, but V8 collects only when it next
// needs room, and until then a 200 MiB console.log held 311 MiB of heap
// and 590 MiB resident in an idle kernel, memory the sandbox's other
// kernels share (measured on the host: after the collection 79 MiB of
// heap, 255 MiB resident with languages.go's malloc setting).
((limit) => {
  const collect = globalThis.gc;
  try {
    delete globalThis.gc; // V8 makes it not configurable: then it is shadowed
  } catch {
    Object.defineProperty(globalThis, "gc", { value: undefined });
  }
  const internal = Deno[Deno.internal];
  const print = internal.core.print; // what console prints through
  const fence = Symbol.for("space.fence");
  const state = { used: 0, cut: false };
  const collectAfter = 8 << 20; // bytes printed by a cell
  const bound = Math.max(limit - 65536, 1);

  // The part of text that fits what is left (counted in UTF-8 bytes, as
  // the server counts), and whether it was cut. A prefix of n UTF-16
  // units has at least n bytes, so only that much is ever looked at.
  const keep = (text) => {
    if (state.cut) return ["", false];
    const left = bound - state.used;
    const s = text.length > left ? text.slice(0, left) : text;
    let bytes = 0;
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      let n = c < 0x80 ? 1 : c < 0x800 ? 2 : 3;
      if (c >= 0xd800 && c < 0xdc00 && i + 1 < s.length) {
        const d = s.charCodeAt(i + 1);
        if (d >= 0xdc00 && d < 0xe000) n = 4;
      }
      if (bytes + n > left) {
        state.used = bound;
        state.cut = true;
        return [s.slice(0, i), true];
      }
      bytes += n;
      if (n === 4) i++;
    }
    if (s !== text) {
      state.used = bound;
      state.cut = true;
      return [s, true];
    }
    state.used += bytes;
    return [text, false];
  };

  // What is kept goes out in pieces of 1 MiB (a UTF-16 pair never split):
  // each print is copied several times on its way out of the kernel (to
  // UTF-8, into its message, its JSON), and one copy of 32 MiB at a time
  // in each was more than a 1 GiB sandbox had beside a 200 MiB string.
  const piece = 1 << 20;
  const bounded = new internal.Console((msg, level) => {
    const [part] = keep(msg);
    for (let i = 0; i < part.length;) {
      let j = Math.min(i + piece, part.length);
      const c = part.charCodeAt(j - 1);
      if (c >= 0xd800 && c < 0xdc00 && j < part.length) j++;
      print(part.slice(i, j), level > 1);
      i = j;
    }
  });
  // A string argument longer than the bound is cut before it is
  // formatted: formatting copies it whole. (Strings inside objects are
  // abbreviated by Deno's inspect already.)
  const cutArg = (a) => typeof a === "string" && a.length > bound ? a.slice(0, bound) : a;
  for (const name of Object.keys(bounded)) {
    const f = bounded[name];
    if (typeof f !== "function") continue;
    Object.defineProperty(console, name, {
      value: { [name]: (...args) => f.apply(bounded, args.map(cutArg)) }[name],
      writable: true, enumerable: true, configurable: true,
    });
  }

  Object.defineProperty(globalThis, fence, {
    value: (nonce) => {
      const cut = state.cut;
      if (collect && (cut || state.used >= collectAfter)) collect();
      state.used = 0;
      state.cut = false;
      print(nonce + (cut ? "1" : "0") + "\n", false);
    },
    writable: false, enumerable: false, configurable: false,
  });
})
