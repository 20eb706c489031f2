// Small pieces shared by the pages.
import { useEffect, useState } from "preact/hooks";

// useNow re-renders every second (ages and time left count on the page;
// nothing is fetched).
export function useNow() {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(t);
  }, []);
  return now;
}

export function duration(ms) {
  const neg = ms < 0;
  let s = Math.floor(Math.abs(ms) / 1000);
  const d = Math.floor(s / 86400);
  s %= 86400;
  const h = Math.floor(s / 3600);
  s %= 3600;
  const m = Math.floor(s / 60);
  s %= 60;
  let out;
  if (d) out = `${d}d ${h}h`;
  else if (h) out = `${h}h ${m}m`;
  else if (m) out = `${m}m ${s}s`;
  else out = `${s}s`;
  return neg ? "-" + out : out;
}

export function bytes(n) {
  if (n === undefined || n === null) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

export function time(t) {
  if (!t) return "";
  const d = new Date(t);
  return isNaN(d) ? "" : d.toLocaleString();
}

export function State({ state }) {
  return <span class={`state state-${state}`}>{state}</span>;
}

// Busy runs an action, shows its error, and disables the button meanwhile.
export function Action({ label, run, confirm: ask, kind, title, testid }) {
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState("");
  const click = async () => {
    if (ask && !window.confirm(ask)) return;
    setBusy(true);
    setErr("");
    try {
      await run();
    } catch (e) {
      setErr(e.message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <span class="action">
      <button class={kind || ""} disabled={busy} onClick={click} title={title} data-testid={testid}>
        {busy ? label + "…" : label}
      </button>
      {err && <span class="error inline">{err}</span>}
    </span>
  );
}

export function ErrorBox({ error }) {
  return error ? <div class="error" role="alert">{error}</div> : null;
}

// useAsync loads something once (and again when deps change or reload is
// called); it is not a timer.
export function useAsync(fn, deps) {
  const [state, setState] = useState({ loading: true, value: undefined, error: "" });
  const [n, setN] = useState(0);
  useEffect(() => {
    let live = true;
    setState((s) => ({ ...s, loading: true }));
    fn().then(
      (value) => live && setState({ loading: false, value, error: "" }),
      (e) => live && setState({ loading: false, value: undefined, error: e.message }),
    );
    return () => {
      live = false;
    };
  }, [...deps, n]);
  return [state, () => setN((x) => x + 1)];
}

export function navigate(hash) {
  window.location.hash = hash;
}
