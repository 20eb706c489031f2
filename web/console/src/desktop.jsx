// The sandbox's screen: noVNC's RFB client over the API's VNC WebSocket
// (/v1/sandboxes/{id}/desktop/vnc, through the session gateway like the
// terminal's: the session cookie is its credential, no key or token in
// the URL), view-only until the user takes control; and a screenshot
// through the native API (/v1/sandboxes/{id}/desktop/screenshot).
import RFB from "@novnc/novnc/core/rfb.js";
import { useEffect, useRef, useState } from "preact/hooks";
import * as api from "./api.js";
import { ErrorBox, time } from "./util.jsx";

// useHasDesktop says whether sandbox id has a display that the native API
// reaches (a desktop template's space-desktop answers a screenshot); null
// while it asks. A sandbox that is not running has none to show.
export function useHasDesktop(id, running) {
  const [has, setHas] = useState(null);
  useEffect(() => {
    if (!running) {
      setHas(false);
      return;
    }
    let live = true;
    api.call("GET", `/v1/sandboxes/${id}/desktop/screenshot`, { query: { width: 1 }, raw: true }).then(
      () => live && setHas(true),
      () => live && setHas(false),
    );
    return () => {
      live = false;
    };
  }, [id, running]);
  return has;
}

export function Desktop({ id }) {
  const box = useRef(null);
  const rfb = useRef(null);
  const [status, setStatus] = useState("connecting");
  const [control, setControl] = useState(false);
  const [gen, setGen] = useState(0);
  const [shot, setShot] = useState(null);
  const [error, setError] = useState("");
  useEffect(() => {
    const wsURL = new URL(api.url(`/v1/sandboxes/${id}/desktop/vnc`), window.location.href);
    wsURL.protocol = wsURL.protocol === "https:" ? "wss:" : "ws:";
    setStatus("connecting");
    const r = new RFB(box.current, wsURL.href, { shared: true, wsProtocols: ["binary"] });
    r.viewOnly = !control;
    r.scaleViewport = true;
    r.background = "#111418";
    r.addEventListener("connect", () => setStatus("connected"));
    r.addEventListener("disconnect", (e) => setStatus(e.detail.clean ? "disconnected" : "connection lost"));
    r.addEventListener("securityfailure", (e) => setStatus(`refused: ${e.detail.reason || e.detail.status}`));
    rfb.current = r;
    return () => {
      rfb.current = null;
      r.disconnect();
    };
  }, [id, gen]);
  useEffect(() => {
    if (!rfb.current) return;
    rfb.current.viewOnly = !control;
    if (control) rfb.current.focus();
  }, [control]);
  useEffect(() => () => shot && URL.revokeObjectURL(shot.url), [shot]);

  async function screenshot() {
    setError("");
    try {
      const res = await api.call("GET", `/v1/sandboxes/${id}/desktop/screenshot`, { raw: true });
      const blob = await res.blob();
      setShot({ url: URL.createObjectURL(blob), at: new Date().toISOString(), size: res.headers.get("X-Screen-Size") });
    } catch (e) {
      setError(e.message);
    }
  }

  return (
    <div class="card desktop-card">
      <div class="row">
        <h2 class="grow">Desktop</h2>
        <span class="muted small" data-testid="desktop-status">
          {status}
        </span>
        <label class="small">
          <input type="checkbox" checked={control} onChange={(e) => setControl(e.currentTarget.checked)} data-testid="desktop-control" /> Take
          control
        </label>
        <button onClick={screenshot} data-testid="desktop-screenshot">
          Screenshot
        </button>
        <button onClick={() => setGen(gen + 1)}>Reconnect</button>
      </div>
      <div class="desktop" ref={box} data-testid="desktop-screen" data-view-only={control ? "false" : "true"} />
      <p class="muted small">
        The sandbox's screen, live (noVNC). View-only until you take control: then your pointer and keys go to the sandbox.
      </p>
      <ErrorBox error={error} />
      {shot && (
        <div data-testid="desktop-shot">
          <p class="small">
            Screenshot of {time(shot.at)}
            {shot.size ? ` (${shot.size})` : ""}:{" "}
            <a href={shot.url} download={`${id}-screenshot.png`}>
              download
            </a>
          </p>
          <img class="desktop-shot" src={shot.url} alt="Screenshot of the sandbox's screen" />
        </div>
      )}
    </div>
  );
}
