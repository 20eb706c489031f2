// A terminal into the sandbox: xterm.js over the API's PTY WebSocket
// (binary frames both ways, resize as a JSON text frame).
import "@xterm/xterm/css/xterm.css";
import { Terminal as XTerm } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import { useEffect, useRef, useState } from "preact/hooks";
import { url } from "./api.js";

export function Terminal({ id }) {
  const box = useRef(null);
  const [status, setStatus] = useState("connecting");
  const [gen, setGen] = useState(0);
  useEffect(() => {
    const term = new XTerm({
      cursorBlink: true,
      fontFamily: "ui-monospace, 'DejaVu Sans Mono', Menlo, monospace",
      fontSize: 14,
      theme: { background: "#111418", foreground: "#e6e6e6" },
      scrollback: 5000,
    });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(box.current);
    fit.fit();
    const wsURL = new URL(url(`/v1/sandboxes/${id}/pty`, { cols: term.cols, rows: term.rows }), window.location.href);
    wsURL.protocol = wsURL.protocol === "https:" ? "wss:" : "ws:";
    const ws = new WebSocket(wsURL);
    ws.binaryType = "arraybuffer";
    const enc = new TextEncoder();
    ws.onopen = () => {
      setStatus("connected");
      term.focus();
    };
    ws.onmessage = (e) => {
      if (typeof e.data === "string") {
        try {
          const msg = JSON.parse(e.data);
          if (msg.type === "exit") setStatus(`exited (${msg.exit_code})`);
        } catch {
          // not a control message
        }
        return;
      }
      term.write(new Uint8Array(e.data));
    };
    ws.onclose = () => setStatus((s) => (s.startsWith("exited") ? s : "closed"));
    const input = term.onData((d) => ws.readyState === WebSocket.OPEN && ws.send(enc.encode(d)));
    const binary = term.onBinary((d) => {
      if (ws.readyState !== WebSocket.OPEN) return;
      const b = new Uint8Array(d.length);
      for (let i = 0; i < d.length; i++) b[i] = d.charCodeAt(i) & 0xff;
      ws.send(b);
    });
    const resized = term.onResize(({ cols, rows }) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "resize", cols, rows }));
    });
    const ro = new ResizeObserver(() => fit.fit());
    ro.observe(box.current);
    return () => {
      ro.disconnect();
      input.dispose();
      binary.dispose();
      resized.dispose();
      ws.close();
      term.dispose();
    };
  }, [id, gen]);
  return (
    <div class="card terminal-card">
      <div class="row">
        <h2 class="grow">Terminal</h2>
        <span class="muted small" data-testid="terminal-status">
          {status}
        </span>
        <button onClick={() => setGen(gen + 1)}>Reconnect</button>
      </div>
      <div class="terminal" ref={box} data-testid="terminal" />
      <p class="muted small">A login shell as the sandbox's user; it ends when this page leaves the tab. The terminal follows the size of this box.</p>
    </div>
  );
}
