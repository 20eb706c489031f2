// One sandbox: details and limits, network policy, commands and their
// output, a terminal, files, snapshots and checkpoints, metrics and log,
// and a desktop sandbox's screen.
import { useEffect, useRef, useState } from "preact/hooks";
import * as api from "./api.js";
import * as live from "./live.js";
import { SandboxActions, networkOf } from "./sandboxes.jsx";
import { Terminal } from "./terminal.jsx";
import { Desktop, useHasDesktop } from "./desktop.jsx";
import { Files } from "./files.jsx";
import { SandboxTelemetry } from "./telemetry.jsx";
import { Action, ErrorBox, State, bytes, duration, time, useAsync, useNow } from "./util.jsx";

const TABS = [
  ["overview", "Overview"],
  ["commands", "Commands"],
  ["terminal", "Terminal"],
  ["desktop", "Desktop"],
  ["files", "Files"],
  ["snapshots", "Snapshots"],
  ["metrics", "Metrics and log"],
];

export function SandboxPage({ id, tab }) {
  const state = live.useLive();
  const [fetched] = useAsync(() => api.get(`/v1/sandboxes/${id}`), [id]);
  const sb = state.sandboxes.get(id) || fetched.value;
  if (!sb) {
    return <section>{fetched.error ? <ErrorBox error={fetched.error} /> : <p class="muted">Loading…</p>}</section>;
  }
  const running = sb.state === "running";
  return <SandboxView id={id} tab={tab} sb={sb} running={running} />;
}

function SandboxView({ id, tab, sb, running }) {
  // The Desktop tab shows only for a sandbox with a display.
  const hasDesktop = useHasDesktop(id, running);
  const tabs = TABS.filter(([t]) => t !== "desktop" || hasDesktop || tab === "desktop");
  return (
    <section>
      <div class="toolbar">
        <h1>
          <a href="#/sandboxes" class="muted">
            Sandboxes
          </a>{" "}
          / <span class="mono">{id}</span>
        </h1>
        <State state={sb.state} />
        <SandboxActions sb={sb} />
      </div>
      <nav class="tabs">
        {tabs.map(([t, label]) => (
          <a href={`#/sandboxes/${id}/${t}`} class={t === tab ? "active" : ""} data-testid={`tab-${t}`}>
            {label}
          </a>
        ))}
      </nav>
      {tab === "overview" && <Overview sb={sb} />}
      {tab === "commands" && (running ? <Commands id={id} /> : <NotRunning sb={sb} />)}
      {tab === "terminal" && (running ? <Terminal id={id} /> : <NotRunning sb={sb} />)}
      {tab === "desktop" && (running ? <Desktop id={id} /> : <NotRunning sb={sb} />)}
      {tab === "files" && (running ? <Files id={id} /> : <NotRunning sb={sb} />)}
      {tab === "snapshots" && <Snapshots sb={sb} />}
      {tab === "metrics" && <SandboxTelemetry sb={sb} />}
    </section>
  );
}

function NotRunning({ sb }) {
  return <p class="muted">The sandbox is {sb.state}: this needs a running sandbox.</p>;
}

function Overview({ sb }) {
  const now = useNow();
  const rows = [
    ["ID", <span class="mono">{sb.id}</span>],
    ["State", <State state={sb.state} />],
    ["Reason", sb.reason],
    ["Template", sb.template],
    ["Created", `${time(sb.created_at)} (${duration(now - Date.parse(sb.created_at))} ago)`],
    ["Expires", sb.state === "running" ? `${time(sb.expires_at)} (in ${duration(Date.parse(sb.expires_at) - now)})` : time(sb.expires_at)],
    ["At the timeout", sb.auto_pause ? "pause" + (sb.auto_resume ? " (resumes on traffic)" : "") : "kill"],
    ["vCPUs", sb.cpu],
    ["Memory", `${sb.memory_mb} MiB`],
    ["Disk", `${sb.disk_mb} MiB`],
    ["Processes", sb.max_processes],
    ["Encryption key", sb.key_id || "platform"],
    ["Snapshot schedule", sb.snapshot_every_seconds ? `every ${sb.snapshot_every_seconds} s, keep ${sb.snapshot_keep}` : "none"],
  ];
  return (
    <div class="cols">
      <div class="card">
        <h2>Details and limits</h2>
        <table class="kv">
          {rows
            .filter(([, v]) => v !== undefined && v !== "")
            .map(([k, v]) => (
              <tr>
                <th>{k}</th>
                <td>{v}</td>
              </tr>
            ))}
        </table>
        <h3>Metadata</h3>
        {Object.keys(sb.metadata || {}).length === 0 ? (
          <p class="muted">none</p>
        ) : (
          <table class="kv">
            {Object.entries(sb.metadata).map(([k, v]) => (
              <tr>
                <th>{k}</th>
                <td>{v}</td>
              </tr>
            ))}
          </table>
        )}
      </div>
      <NetworkPolicy sb={sb} />
    </div>
  );
}

function NetworkPolicy({ sb }) {
  const n = sb.network;
  const mode = !n ? "none" : n.internet ? "internet" : "allow";
  const [f, setF] = useState({ mode, allow: ((n && n.allow) || []).join("\n"), deny: ((n && n.deny) || []).join("\n") });
  const [msg, setMsg] = useState("");
  const save = async () => {
    // The API's "no egress" is an empty allow-list without the internet.
    const body = networkOf(f.mode, f.allow, f.deny) || { internet: false };
    await api.put(`/v1/sandboxes/${sb.id}/network`, body);
    setMsg("Saved: new connections follow it.");
  };
  const set = (k) => (e) => setF({ ...f, [k]: e.target.value });
  return (
    <div class="card">
      <h2>Network policy</h2>
      <p class="muted small">Egress goes through spaced's gateway. Deny entries win over allow entries; no policy opens the platform floor (private, loopback, metadata ranges).</p>
      <label>
        Egress
        <select value={f.mode} onChange={set("mode")} disabled={sb.state !== "running"} data-testid="net-mode">
          <option value="none">none</option>
          <option value="allow">allow-list only</option>
          <option value="internet">internet (minus deny-list)</option>
        </select>
      </label>
      <label>
        Allow
        <textarea rows="4" value={f.allow} onInput={set("allow")} disabled={sb.state !== "running" || f.mode === "none"} data-testid="net-allow" />
      </label>
      <label>
        Deny
        <textarea rows="3" value={f.deny} onInput={set("deny")} disabled={sb.state !== "running" || f.mode === "none"} />
      </label>
      {sb.state === "running" && <Action label="Save policy" kind="primary" run={save} testid="net-save" />}
      {msg && <p class="ok small">{msg}</p>}
    </div>
  );
}

// Output keeps a command's output as it streams.
function useOutput() {
  const [out, setOut] = useState([]);
  const add = (kind, text) => setOut((o) => [...o.slice(-2000), { kind, text }]);
  return [out, add, () => setOut([])];
}

function decodeChunk(data) {
  if (data.text !== undefined) return data.text;
  if (data.base64) {
    try {
      return atob(data.base64);
    } catch {
      return "";
    }
  }
  return "";
}

function onCommandEvent(add, setEnd) {
  return (event, raw) => {
    let data = {};
    try {
      data = JSON.parse(raw);
    } catch {
      return;
    }
    if (event === "stdout" || event === "stderr") add(event, decodeChunk(data));
    else if (event === "start") add("meta", `pid ${data.pid}\n`);
    else if (event === "end") setEnd(data);
    else if (event === "gap") add("meta", `[${data.dropped} bytes of older output dropped]\n`);
    else if (event === "error") add("meta", `[stream broke: ${data.message}]\n`);
  };
}

function OutputView({ out }) {
  const ref = useRef(null);
  useEffect(() => {
    if (ref.current) ref.current.scrollTop = ref.current.scrollHeight;
  }, [out]);
  return (
    <pre class="output" ref={ref} data-testid="command-output">
      {out.map((c) => (
        <span class={c.kind}>{c.text}</span>
      ))}
    </pre>
  );
}

function Commands({ id }) {
  const [cmd, setCmd] = useState("");
  const [bg, setBg] = useState(false);
  const [out, add, clear] = useOutput();
  const [end, setEnd] = useState(null);
  const [running, setRunning] = useState(false);
  const [err, setErr] = useState("");
  const [list, reload] = useAsync(() => api.get(`/v1/sandboxes/${id}/commands`), [id]);
  const abort = useRef(null);
  useEffect(() => () => abort.current && abort.current.abort(), []);
  const run = async (e) => {
    e.preventDefault();
    clear();
    setEnd(null);
    setErr("");
    setRunning(true);
    abort.current = new AbortController();
    try {
      const res = await api.streamCall("POST", `/v1/sandboxes/${id}/commands`, { cmd, background: bg }, onCommandEvent(add, setEnd), abort.current.signal);
      if (res && res.pid) add("meta", `started in the background: pid ${res.pid}\n`);
    } catch (ex) {
      if (ex.name !== "AbortError") setErr(ex.message);
    } finally {
      setRunning(false);
      reload();
    }
  };
  return (
    <div class="cols">
      <div class="card wide">
        <h2>Run a command</h2>
        <form onSubmit={run} class="row">
          <input class="grow mono" placeholder="shell command, run by /bin/sh -c as user" value={cmd} onInput={(e) => setCmd(e.target.value)} data-testid="command-input" />
          <label class="inline">
            <input type="checkbox" checked={bg} onChange={(e) => setBg(e.target.checked)} /> background
          </label>
          <button class="primary" disabled={running || !cmd} data-testid="command-run">
            Run
          </button>
          {running && (
            <button type="button" onClick={() => abort.current.abort()}>
              Detach
            </button>
          )}
        </form>
        <ErrorBox error={err} />
        <OutputView out={out} />
        {end && (
          <p class={end.exit_code === 0 ? "ok" : "error inline"} data-testid="command-end">
            {end.status || `exit ${end.exit_code}`}
            {end.error ? `: ${end.error}` : ""}
          </p>
        )}
      </div>
      <div class="card">
        <h2>
          Running commands <button class="link" onClick={reload}>refresh</button>
        </h2>
        <ErrorBox error={list.error} />
        {list.value && list.value.commands && list.value.commands.length ? (
          list.value.commands.map((c) => <RunningCommand id={id} c={c} />)
        ) : (
          <p class="muted">none</p>
        )}
      </div>
    </div>
  );
}

function RunningCommand({ id, c }) {
  const [open, setOpen] = useState(false);
  const [out, add, clear] = useOutput();
  const [end, setEnd] = useState(null);
  useEffect(() => {
    if (!open) return;
    clear();
    const ctl = new AbortController();
    (async () => {
      try {
        const res = await api.call("GET", `/v1/sandboxes/${id}/commands/${c.pid}/events`, { raw: true });
        await api.readSSE(res, onCommandEvent(add, setEnd), ctl.signal);
      } catch (e) {
        add("meta", `[${e.message}]\n`);
      }
    })();
    return () => ctl.abort();
  }, [open]);
  return (
    <div class="command">
      <div class="row">
        <span class="mono small grow">
          {c.pid}: {[c.cmd, ...(c.args || [])].join(" ")}
        </span>
        <button class="link" onClick={() => setOpen(!open)}>
          {open ? "hide" : "output"}
        </button>
        <Action label="SIGTERM" run={() => api.post(`/v1/sandboxes/${id}/commands/${c.pid}/signal`, { signal: "SIGTERM" })} />
      </div>
      {open && <OutputView out={out} />}
      {open && end && <p class="small muted">{end.status || `exit ${end.exit_code}`}</p>}
    </div>
  );
}

function Snapshots({ sb }) {
  const [list, reload] = useAsync(() => api.get(`/v1/sandboxes/${sb.id}/snapshots`), [sb.id]);
  const [made, setMade] = useState("");
  const cp = sb.checkpoint;
  return (
    <div class="cols">
      <div class="card wide">
        <h2>
          Disk snapshots{" "}
          {sb.state === "running" && (
            <Action
              label="Take snapshot"
              run={async () => {
                await api.post(`/v1/sandboxes/${sb.id}/snapshots`);
                reload();
              }}
              testid="take-snapshot"
            />
          )}
        </h2>
        <ErrorBox error={list.error} />
        <table class="list" data-testid="snapshots">
          <thead>
            <tr>
              <th>ID</th>
              <th>Taken</th>
              <th>Size</th>
              <th>Took</th>
              <th></th>
            </tr>
          </thead>
          <tbody>
            {((list.value && list.value.snapshots) || []).map((s) => (
              <tr>
                <td class="mono">{s.id}</td>
                <td>{time(s.created_at)}</td>
                <td>{bytes(s.bytes)}</td>
                <td>{s.took_ms} ms</td>
                <td>
                  <Action
                    label="New sandbox from it"
                    run={async () => {
                      const n = await api.post("/v1/sandboxes", { snapshot: s.id, template: sb.template });
                      live.update(n);
                      setMade(n.id);
                    }}
                  />
                  <Action
                    label="Delete"
                    kind="danger"
                    confirm={`Delete snapshot ${s.id}?`}
                    run={async () => {
                      await api.del(`/v1/snapshots/${s.id}`);
                      reload();
                    }}
                  />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
        {made && (
          <p class="ok">
            Created <a href={`#/sandboxes/${made}`}>{made}</a>.
          </p>
        )}
      </div>
      <div class="card">
        <h2>Checkpoint</h2>
        {cp ? (
          <table class="kv">
            <tr>
              <th>ID</th>
              <td class="mono">{cp.id}</td>
            </tr>
            <tr>
              <th>Taken</th>
              <td>{time(cp.created_at)}</td>
            </tr>
            <tr>
              <th>Size</th>
              <td>{bytes(cp.bytes)}</td>
            </tr>
            <tr>
              <th>Took</th>
              <td>{cp.took_ms} ms</td>
            </tr>
            {sb.paused_at && (
              <tr>
                <th>Paused</th>
                <td>{time(sb.paused_at)}</td>
              </tr>
            )}
          </table>
        ) : (
          <p class="muted">None yet: pausing the sandbox takes one (memory, processes and disk), and resuming restores it.</p>
        )}
      </div>
    </div>
  );
}
