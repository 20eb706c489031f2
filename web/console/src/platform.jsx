// Platform: node health, warm pools, latency histograms (from /metrics:
// the admin key's session only, as /metrics names every tenant), the
// tenant's usage against its quotas, recent egress denials (the session's
// tenant's), secrets and keys by name.
import * as api from "./api.js";
import { Histogram, histograms } from "./charts.jsx";
import { ErrorBox, bytes, duration, time, useAsync } from "./util.jsx";

function value(metrics, name, labels = {}) {
  const s = (metrics[name] || []).find((m) => Object.entries(labels).every(([k, v]) => m.labels[k] === v));
  return s ? s.value : undefined;
}

function byLabel(metrics, name, label) {
  const out = {};
  for (const s of metrics[name] || []) out[s.labels[label]] = (out[s.labels[label]] || 0) + s.value;
  return out;
}

async function loadPlatform() {
  const admin = (api.whoami() || {}).admin;
  const [health, text, usage] = await Promise.all([
    api.get("/healthz").catch((e) => ({ status: e.message })),
    admin ? api.call("GET", "/metrics") : Promise.resolve(""),
    api.get("/v1/usage"),
  ]);
  return { admin, health, metrics: api.parseMetrics(text), usage, at: Date.now() };
}

function Health({ p }) {
  const m = p.metrics;
  const start = value(m, "process_start_time_seconds");
  const rows = [
    ["Status", <span class={p.health.status === "ok" ? "ok" : "error inline"} data-testid="health">{p.health.status}</span>],
    ["Sandboxes running", value(m, "space_sandboxes_running")],
    ["Up", start ? duration(p.at - start * 1000) : undefined],
    ["spaced memory (RSS)", bytes(value(m, "process_resident_memory_bytes"))],
    ["Goroutines", value(m, "go_goroutines")],
    ["Open files", value(m, "process_open_fds")],
    ["Template builds running", value(m, "space_template_builds_active")],
    ["Creates failed", value(m, "space_sandbox_create_failures_total")],
  ];
  if (!p.admin) rows.splice(1);
  return (
    <div class="card">
      <h2>Node</h2>
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
      <p class="muted small">
        Read at {new Date(p.at).toLocaleTimeString()} from /healthz{p.admin ? " and /metrics" : " (the node's metrics are the admin key's to read)"}.
      </p>
    </div>
  );
}

function Pools({ m }) {
  const ready = byLabel(m, "space_pool_ready", "template");
  const booting = byLabel(m, "space_pool_booting", "template");
  const target = byLabel(m, "space_pool_target", "template");
  const misses = byLabel(m, "space_pool_misses_total", "template");
  const names = [...new Set([...Object.keys(ready), ...Object.keys(booting), ...Object.keys(target)])].sort();
  return (
    <div class="card">
      <h2>Warm pools</h2>
      {names.length === 0 ? (
        <p class="muted">No warm pools (SPACE_POOL is empty).</p>
      ) : (
        <table class="list" data-testid="pools">
          <thead>
            <tr>
              <th>Template</th>
              <th>Ready</th>
              <th>Booting</th>
              <th title="refill target: rises on misses, falls a step per quiet minute">Target (demand)</th>
              <th>Misses</th>
            </tr>
          </thead>
          <tbody>
            {names.map((t) => (
              <tr>
                <td class="mono">{t}</td>
                <td>{ready[t] ?? 0}</td>
                <td>{booting[t] ?? 0}</td>
                <td>{target[t] ?? 0}</td>
                <td>{misses[t] ?? 0}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}

// quotaRows are the quotas of /v1/usage, in the order of the API.
const quotaRows = [
  ["sandboxes", "Running sandboxes"],
  ["vcpu", "vCPUs"],
  ["memory_mb", "Memory (MiB)"],
  ["paused_sandboxes", "Paused sandboxes"],
  ["paused_mb", "Paused sandboxes' checkpoints (MiB)"],
  ["snapshots", "Snapshots"],
  ["snapshot_mb", "Snapshots (MiB)"],
  ["templates", "Templates"],
  ["template_mb", "Templates' builds (MiB)"],
];

function Usage({ u }) {
  const q = u.effective_quotas || {};
  const used = u.usage || {};
  return (
    <div class="card">
      <h2>
        Usage of tenant <span class="mono">{u.id}</span>
      </h2>
      <table class="kv" data-testid="usage">
        {quotaRows.map(([k, label]) => (
          <tr data-quota={k}>
            <th>{label}</th>
            <td>
              {used[k] ?? 0}
              <span class="muted"> / {q[k] > 0 ? q[k] : "no limit"}</span>
            </td>
          </tr>
        ))}
        <tr>
          <th>Creates per second</th>
          <td>{q.creates_per_second > 0 ? `${q.creates_per_second} (burst ${q.creates_burst})` : "no limit"}</td>
        </tr>
      </table>
      <p class="muted small">Quotas bind this tenant's issued keys, never the admin key.</p>
    </div>
  );
}

function Latencies({ m }) {
  return (
    <div class="card wide">
      <h2>Latencies</h2>
      <div class="charts">
        <Histogram title="Sandbox create (to a sandbox that runs commands)" groups={histograms(m, "space_sandbox_create_seconds")} testid="chart-create" />
        <Histogram title="Command start (native API: request to the agent's start)" groups={histograms(m, "space_exec_seconds")} testid="chart-exec" />
        <Histogram title="Checkpoint and snapshot" groups={histograms(m, "space_checkpoint_seconds")} />
        <Histogram title="Resume" groups={histograms(m, "space_restore_seconds")} />
        <Histogram title="Template build" groups={histograms(m, "space_template_build_seconds")} />
      </div>
      <p class="muted small">
        Counts since spaced started, per bucket. Commands started through the E2B SDKs go to the sandbox's agent through the proxy and are not in the command start chart.
      </p>
    </div>
  );
}

function Denials() {
  const [audit, reload] = useAsync(() => api.consoleGet("audit"), []);
  const entries = (audit.value && audit.value.entries) || [];
  return (
    <div class="card wide">
      <h2>
        Recent egress denials <button class="link" onClick={reload}>refresh</button>
      </h2>
      <ErrorBox error={audit.error} />
      {entries.length === 0 ? (
        <p class="muted">None since spaced started.</p>
      ) : (
        <table class="list small" data-testid="denials">
          <thead>
            <tr>
              <th>Time</th>
              <th>Sandbox</th>
              <th>What</th>
              <th>Name</th>
              <th>Address</th>
              <th>Rule</th>
              <th>Reason</th>
            </tr>
          </thead>
          <tbody>
            {entries.map((e) => (
              <tr>
                <td>{time(e.time)}</td>
                <td class="mono">
                  <a href={`#/sandboxes/${e.attrs.sandbox}`}>{e.attrs.sandbox}</a>
                </td>
                <td>{e.attrs.what}</td>
                <td>{e.attrs.name}</td>
                <td class="mono">
                  {e.attrs.ip}
                  {e.attrs.port ? `:${e.attrs.port}` : ""}
                </td>
                <td>{e.attrs.rule}</td>
                <td>{e.attrs.reason}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <p class="muted small">
        The egress gateway's audit lines{(api.whoami() || {}).admin ? "" : " of this tenant's sandboxes"}, kept in spaced's memory (the last {audit.value ? audit.value.kept : 200} of every tenant's); the full record is spaced's log.
      </p>
    </div>
  );
}

function Secrets() {
  const [secrets] = useAsync(() => api.get("/v1/secrets"), []);
  const [keys] = useAsync(() => api.get("/v1/keys"), []);
  return (
    <div class="card">
      <h2>Secrets</h2>
      <ErrorBox error={secrets.error} />
      {secrets.value && secrets.value.secrets && secrets.value.secrets.length ? (
        <table class="list small" data-testid="secrets">
          <thead>
            <tr>
              <th>Name</th>
              <th>Injected into</th>
              <th>Version</th>
              <th>Updated</th>
            </tr>
          </thead>
          <tbody>
            {secrets.value.secrets.map((s) => (
              <tr>
                <td class="mono">{s.name}</td>
                <td class="mono">
                  {s.host}
                  {s.port ? `:${s.port}` : ""}
                  {s.path_prefix || ""}
                  {s.header ? ` (${s.header})` : ""}
                </td>
                <td>{s.version}</td>
                <td>{time(s.updated_at)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : (
        <p class="muted">none</p>
      )}
      <h2>Encryption keys</h2>
      {keys.error ? (
        <p class="muted">{keys.error}</p>
      ) : keys.value && keys.value.keys.length ? (
        <ul class="mono">
          {keys.value.keys.map((k) => (
            <li>{k.id}</li>
          ))}
        </ul>
      ) : (
        <p class="muted">No customer keys loaded; checkpoints are encrypted under the platform key.</p>
      )}
      <p class="muted small">Names only: spaced never returns a secret's value or a key.</p>
    </div>
  );
}

export function PlatformPage() {
  const [p, reload] = useAsync(loadPlatform, []);
  return (
    <section>
      <div class="toolbar">
        <h1>Platform</h1>
        <button onClick={reload} data-testid="platform-refresh">
          Refresh
        </button>
      </div>
      <ErrorBox error={p.error} />
      {p.value && (
        <div class="cols">
          <Health p={p.value} />
          {p.value.admin && <Pools m={p.value.metrics} />}
          <Usage u={p.value.usage} />
          <Secrets />
          {p.value.admin && <Latencies m={p.value.metrics} />}
          <Denials />
        </div>
      )}
    </section>
  );
}
