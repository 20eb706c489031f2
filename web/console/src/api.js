// The console's client of spaced: the public API through the session
// gateway (/ui/api/...), the session itself, and server-sent events. The
// API key never reaches this code: the session cookie (HttpOnly) stands
// for it, and every state-changing call carries the session's CSRF token.

let csrf = "";

export class APIError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// onSignedOut is called when a call finds the session gone.
let onSignedOut = () => {};
export function whenSignedOut(fn) {
  onSignedOut = fn;
}

async function fail(res) {
  let code = "error";
  let message = `${res.status} ${res.statusText}`;
  try {
    const body = await res.json();
    if (body && body.error) {
      code = body.error.code;
      message = body.error.message;
    }
  } catch {
    // not JSON
  }
  if (res.status === 401) onSignedOut();
  throw new APIError(res.status, code, message);
}

// who is the signed-in session: { tenant, key_id, admin }. The admin key's
// session sees the node's pages; a tenant's sees its own tenant only.
let who = null;
export function whoami() {
  return who;
}

function learn(s) {
  csrf = s.csrf;
  who = { tenant: s.tenant, key_id: s.key_id, admin: !!s.admin };
}

// session asks whether this browser is signed in (and learns the CSRF
// token and whose the session is).
export async function session() {
  const res = await fetch("session", { credentials: "same-origin" });
  if (res.status === 401) return false;
  if (!res.ok) await fail(res);
  learn(await res.json());
  return true;
}

export async function signIn(key) {
  const res = await fetch("session", {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ key }),
  });
  if (!res.ok) {
    let message = res.status === 401 ? "That API key was refused." : `Sign-in failed (${res.status}).`;
    try {
      message = (await res.json()).error.message || message;
    } catch {
      // keep the default
    }
    throw new APIError(res.status, "unauthenticated", message);
  }
  learn(await res.json());
}

export async function signOut() {
  await fetch("session", { method: "DELETE", credentials: "same-origin", headers: { "X-CSRF-Token": csrf } });
  csrf = "";
  who = null;
}

// url is where path of the API is reached through the session gateway.
export function url(path, query) {
  let u = "api" + path;
  if (query) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) {
      if (v === undefined || v === null || v === "") continue;
      if (Array.isArray(v)) v.forEach((x) => q.append(k, x));
      else q.set(k, String(v));
    }
    const s = q.toString();
    if (s) u += "?" + s;
  }
  return u;
}

// call sends one API request; body is JSON unless it is a Blob/File.
export async function call(method, path, { query, body, raw } = {}) {
  const headers = {};
  const init = { method, credentials: "same-origin", headers };
  if (method !== "GET" && method !== "HEAD") headers["X-CSRF-Token"] = csrf;
  if (body instanceof Blob) {
    init.body = body;
    headers["Content-Type"] = "application/octet-stream";
  } else if (body !== undefined) {
    init.body = JSON.stringify(body);
    headers["Content-Type"] = "application/json";
  }
  const res = await fetch(url(path, query), init);
  if (!res.ok) await fail(res);
  if (raw) return res;
  if (res.status === 204) return null;
  const type = res.headers.get("Content-Type") || "";
  return type.includes("application/json") ? res.json() : res.text();
}

export const get = (path, query) => call("GET", path, { query });
export const post = (path, body) => call("POST", path, { body });
export const put = (path, body) => call("PUT", path, { body });
export const del = (path, query) => call("DELETE", path, { query });

// consoleGet reads one of the console's own routes (not the API's).
export async function consoleGet(path) {
  const res = await fetch(path, { credentials: "same-origin" });
  if (!res.ok) await fail(res);
  return res.json();
}

// readSSE parses a fetch response body as server-sent events, calling
// onEvent(event, data, id) for each, until the stream ends or signal aborts.
export async function readSSE(res, onEvent, signal) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  let ev = { event: "message", data: [], id: "" };
  try {
    for (;;) {
      if (signal && signal.aborted) return;
      const { value, done } = await reader.read();
      if (done) return;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i).replace(/\r$/, "");
        buf = buf.slice(i + 1);
        if (line === "") {
          if (ev.data.length) onEvent(ev.event, ev.data.join("\n"), ev.id);
          ev = { event: "message", data: [], id: "" };
        } else if (!line.startsWith(":")) {
          const c = line.indexOf(":");
          const field = c < 0 ? line : line.slice(0, c);
          const val = c < 0 ? "" : line.slice(c + 1).replace(/^ /, "");
          if (field === "event") ev.event = val;
          else if (field === "data") ev.data.push(val);
          else if (field === "id") ev.id = val;
        }
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

// streamCall sends a request whose answer is an SSE stream (POST commands).
export async function streamCall(method, path, body, onEvent, signal) {
  const res = await fetch(url(path), {
    method,
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
    body: JSON.stringify(body),
    signal,
  });
  if (!res.ok) await fail(res);
  const type = res.headers.get("Content-Type") || "";
  if (!type.includes("text/event-stream")) return res.json();
  await readSSE(res, onEvent, signal);
  return null;
}

// parseMetrics reads Prometheus' text format into
// {name: [{labels: {...}, value}]}.
export function parseMetrics(text) {
  const out = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[3]) {
      const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
      let l;
      while ((l = re.exec(m[3]))) labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    }
    (out[m[1]] ||= []).push({ labels, value: Number(m[4]) });
  }
  return out;
}
