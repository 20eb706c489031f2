// Sandboxes: the live list (SSE), filters and search, create, and the
// lifecycle actions of each row.
import { useState } from "preact/hooks";
import * as api from "./api.js";
import * as live from "./live.js";
import { CPUUsage, MemoryUsage } from "./telemetry.jsx";
import { Action, ErrorBox, State, duration, navigate, useAsync, useNow } from "./util.jsx";

const STATES = ["creating", "running", "paused", "resuming", "killed", "lost"];

// Lifecycle actions of one sandbox, shared with the sandbox page.
export function SandboxActions({ sb, compact }) {
  const id = sb.id;
  const running = sb.state === "running";
  const paused = sb.state === "paused";
  return (
    <span class="actions">
      {running && <Action label="+5 min" title="set the timeout to 5 minutes past its current expiry" run={async () => live.update(await api.post(`/v1/sandboxes/${id}/timeout`, { timeout_seconds: Math.max(60, Math.round((Date.parse(sb.expires_at) - Date.now()) / 1000) + 300) }))} testid="extend" />}
      {running && <Action label="Pause" run={async () => live.update(await api.post(`/v1/sandboxes/${id}/pause`))} testid="pause" />}
      {paused && <Action label="Resume" run={async () => live.update(await api.post(`/v1/sandboxes/${id}/resume`))} testid="resume" />}
      {running && <Action label="Fork" run={async () => (await api.post(`/v1/sandboxes/${id}/fork`, { count: 1 })).sandboxes.forEach(live.update)} testid="fork" />}
      {running && !compact && <Action label="Snapshot" run={() => api.post(`/v1/sandboxes/${id}/snapshots`)} testid="snapshot" />}
      {(running || paused) && <Action label="Kill" kind="danger" confirm={`Kill sandbox ${id}?`} run={() => api.del(`/v1/sandboxes/${id}`)} testid="kill" />}
    </span>
  );
}

function lines(text) {
  return text
    .split(/[\n,]/)
    .map((s) => s.trim())
    .filter(Boolean);
}

function pairs(text) {
  const out = {};
  for (const l of text.split("\n")) {
    const i = l.indexOf("=");
    if (i > 0) out[l.slice(0, i).trim()] = l.slice(i + 1).trim();
  }
  return out;
}

// networkOf turns the form's egress choice into the API's Network (or
// undefined: no egress at all).
export function networkOf(mode, allow, deny) {
  if (mode === "none") return undefined;
  const n = { internet: mode === "internet" };
  if (lines(allow).length) n.allow = lines(allow);
  if (lines(deny).length) n.deny = lines(deny);
  return n;
}

function CreateForm({ onDone }) {
  const [templates] = useAsync(() => api.get("/v1/templates"), []);
  const [f, setF] = useState({ template: "base", timeout: 600, cpu: "", memory: "", disk: "", net: "none", allow: "", deny: "", metadata: "", env: "" });
  const [err, setErr] = useState("");
  const [busy, setBusy] = useState(false);
  const set = (k) => (e) => setF({ ...f, [k]: e.target.value });
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setErr("");
    const body = { template: f.template, timeout_seconds: Number(f.timeout) || undefined };
    if (f.cpu) body.cpu = Number(f.cpu);
    if (f.memory) body.memory_mb = Number(f.memory);
    if (f.disk) body.disk_mb = Number(f.disk);
    const network = networkOf(f.net, f.allow, f.deny);
    if (network) body.network = network;
    const md = pairs(f.metadata);
    if (Object.keys(md).length) body.metadata = md;
    const env = pairs(f.env);
    if (Object.keys(env).length) body.env = env;
    try {
      live.update(await api.post("/v1/sandboxes", body));
      onDone();
    } catch (ex) {
      setErr(ex.message);
    } finally {
      setBusy(false);
    }
  };
  const names = [];
  for (const t of (templates.value && templates.value.templates) || []) {
    names.push(t.name);
    for (const tag of t.tags || []) if (tag.tag !== "default") names.push(`${t.name}:${tag.tag}`);
  }
  if (!names.includes("base")) names.unshift("base");
  return (
    <form class="card create" onSubmit={submit} data-testid="create-form">
      <h2>New sandbox</h2>
      <div class="grid">
        <label>
          Template
          <select value={f.template} onChange={set("template")} data-testid="create-template">
            {names.map((n) => (
              <option value={n}>{n}</option>
            ))}
          </select>
        </label>
        <label>
          Timeout (s)
          <input type="number" min="1" max="86400" value={f.timeout} onInput={set("timeout")} />
        </label>
        <label>
          vCPUs
          <input type="number" min="1" max="64" placeholder="template's" value={f.cpu} onInput={set("cpu")} />
        </label>
        <label>
          Memory (MiB)
          <input type="number" min="64" placeholder="template's" value={f.memory} onInput={set("memory")} />
        </label>
        <label>
          Disk (MiB)
          <input type="number" min="16" placeholder="template's" value={f.disk} onInput={set("disk")} />
        </label>
        <label>
          Network
          <select value={f.net} onChange={set("net")}>
            <option value="none">no egress</option>
            <option value="allow">allow-list only</option>
            <option value="internet">internet (minus deny-list)</option>
          </select>
        </label>
      </div>
      {f.net !== "none" && (
        <div class="grid two">
          <label>
            Allow (host, *.domain, CIDR, :port; one a line)
            <textarea rows="3" value={f.allow} onInput={set("allow")} />
          </label>
          <label>
            Deny
            <textarea rows="3" value={f.deny} onInput={set("deny")} />
          </label>
        </div>
      )}
      <div class="grid two">
        <label>
          Metadata (key=value, one a line)
          <textarea rows="2" value={f.metadata} onInput={set("metadata")} data-testid="create-metadata" />
        </label>
        <label>
          Env (NAME=value, one a line)
          <textarea rows="2" value={f.env} onInput={set("env")} />
        </label>
      </div>
      <div class="row">
        <button class="primary" type="submit" disabled={busy} data-testid="create-submit">
          {busy ? "Creating…" : "Create"}
        </button>
        <button type="button" onClick={onDone}>
          Cancel
        </button>
      </div>
      <ErrorBox error={err} />
    </form>
  );
}

function matches(sb, q) {
  if (!q) return true;
  q = q.toLowerCase();
  if (sb.id.includes(q) || sb.template.toLowerCase().includes(q)) return true;
  return Object.entries(sb.metadata || {}).some(([k, v]) => `${k}=${v}`.toLowerCase().includes(q));
}

export function SandboxesPage() {
  const state = live.useLive();
  const now = useNow();
  const [creating, setCreating] = useState(false);
  const [q, setQ] = useState("");
  const [shown, setShown] = useState(new Set(["creating", "running", "paused", "resuming"]));
  const toggle = (s) => {
    const n = new Set(shown);
    n.has(s) ? n.delete(s) : n.add(s);
    setShown(n);
  };
  const all = [...state.sandboxes.values()].sort((a, b) => Date.parse(b.created_at) - Date.parse(a.created_at));
  const rows = all.filter((sb) => shown.has(sb.state) && matches(sb, q));
  // The newest sample of each running sandbox, pushed by the event stream.
  const usage = (sb) => (sb.state === "running" ? state.usage.get(sb.id) : undefined);
  const counts = {};
  for (const sb of all) counts[sb.state] = (counts[sb.state] || 0) + 1;
  return (
    <section>
      <div class="toolbar">
        <h1>Sandboxes</h1>
        <input type="search" placeholder="search id, template, metadata" value={q} onInput={(e) => setQ(e.target.value)} data-testid="search" />
        <span class="chips">
          {STATES.map((s) => (
            <label class={`chip ${shown.has(s) ? "on" : ""}`}>
              <input type="checkbox" checked={shown.has(s)} onChange={() => toggle(s)} data-testid={`filter-${s}`} />
              {s} <span class="muted">{counts[s] || 0}</span>
            </label>
          ))}
        </span>
        {!creating && (
          <button class="primary" onClick={() => setCreating(true)} data-testid="new-sandbox">
            New sandbox
          </button>
        )}
      </div>
      {creating && <CreateForm onDone={() => setCreating(false)} />}
      <ErrorBox error={state.error} />
      <table class="list" data-testid="sandbox-table">
        <thead>
          <tr>
            <th>ID</th>
            <th>State</th>
            <th>Template</th>
            <th>Age</th>
            <th>Time left</th>
            <th title="CPU in use (of all its vCPUs) of the vCPU limit">CPU</th>
            <th title="memory in use of the limit">Memory</th>
            <th>Metadata</th>
            <th></th>
          </tr>
        </thead>
        <tbody>
          {rows.map((sb) => (
            <tr key={sb.id} data-id={sb.id} data-state={sb.state}>
              <td>
                <a href={`#/sandboxes/${sb.id}`} class="mono">
                  {sb.id}
                </a>
              </td>
              <td>
                <State state={sb.state} />
                {sb.reason && sb.state !== "running" && <div class="muted small">{sb.reason}</div>}
              </td>
              <td>{sb.template}</td>
              <td>{duration(now - Date.parse(sb.created_at))}</td>
              <td>{sb.state === "running" ? duration(Date.parse(sb.expires_at) - now) : ""}</td>
              <td class="nowrap">
                <CPUUsage sb={sb} u={usage(sb)} />
              </td>
              <td class="nowrap">
                <MemoryUsage sb={sb} u={usage(sb)} />
              </td>
              <td class="small">
                {Object.entries(sb.metadata || {}).map(([k, v]) => (
                  <span class="tag">
                    {k}={v}
                  </span>
                ))}
              </td>
              <td>
                <SandboxActions sb={sb} compact />
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {state.loaded && rows.length === 0 && <p class="muted empty">No sandboxes match.</p>}
      {!state.loaded && <p class="muted empty">Loading…</p>}
      <p class="muted small">CPU and memory: a running sandbox's use in its latest sample, of its limit (spaced samples it from the host and sends each sample to this page as it takes it). CPU is a percentage of all its vCPUs.</p>
    </section>
  );
}

export function openSandbox(id) {
  navigate(`#/sandboxes/${id}`);
}
