// Platform: node health, warm pools, this node's admission budget and
// latency histograms (from /metrics: the admin key's session only, as
// /metrics names every tenant), the cluster's nodes (cluster mode), the
// tenants and their API keys by public id (the admin's), the tenant's usage
// against its quotas, recent egress denials (the session's tenant's),
// secrets and keys by name.
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

// orNull answers what p answers, null when it is 404 (a spaced not in
// cluster mode has no nodes to list).
const orNull = (p) => p.catch((e) => (e.status === 404 ? null : Promise.reject(e)));

async function loadPlatform() {
  const admin = (api.whoami() || {}).admin;
  const none = Promise.resolve(null);
  const [health, text, usage, nodes, tenants, keys] = await Promise.all([
    api.get("/healthz").catch((e) => ({ status: e.message })),
    admin ? api.call("GET", "/metrics") : Promise.resolve(""),
    api.get("/v1/usage"),
    admin ? orNull(api.get("/v1/admin/nodes")) : none,
    admin ? api.get("/v1/admin/tenants") : none,
    admin ? api.get("/v1/admin/keys") : none,
  ]);
  return { admin, health, metrics: api.parseMetrics(text), usage, nodes, tenants, keys, at: Date.now() };
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
        {p.admin && !p.nodes ? " This spaced runs alone (not in cluster mode)." : ""}
      </p>
    </div>
  );
}

// share is part of whole as a percentage, to a tenth below 10%.
function share(part, whole) {
  const p = (part / whole) * 100;
  return `${p < 10 ? Math.round(p * 10) / 10 : Math.round(p)}%`;
}

// Admission shows what this node's sandboxes take of its budgets (what
// admission control admits creates, resumes and forks against): in use
// includes the reservations of starts not measured yet.
function Admission({ m }) {
  const rows = [
    ["memory", "Memory", bytes],
    ["disk", "Disk", bytes],
    ["sandboxes", "Sandboxes", (v) => v],
  ];
  if (!(m.space_node_budget || []).length) return null;
  const refused = (res) => (m.space_admission_refusals_total || []).filter((s) => s.labels.resource === res).reduce((n, s) => n + s.value, 0);
  return (
    <div class="card">
      <h2>Admission budget</h2>
      <table class="list small" data-testid="admission">
        <thead>
          <tr>
            <th>Resource</th>
            <th>In use</th>
            <th>Budget</th>
            <th title="what the host has free, as last sampled">Host free</th>
            <th title="starts refused at this budget or for the host">Refused</th>
          </tr>
        </thead>
        <tbody>
          {rows.map(([res, label, fmt]) => {
            const used = value(m, "space_node_used", { resource: res }) || 0;
            const budget = value(m, "space_node_budget", { resource: res }) || 0;
            const reserved = value(m, "space_node_reserved", { resource: res }) || 0;
            const free = value(m, "space_node_host_available", { resource: res });
            return (
              <tr data-resource={res}>
                <td>{label}</td>
                <td class="nowrap">
                  {fmt(used)}
                  {budget > 0 && <div class="muted">{share(used, budget)}</div>}
                  {reserved > 0 && <div class="muted">{fmt(reserved)} reserved</div>}
                </td>
                <td class="nowrap">{budget > 0 ? fmt(budget) : <span class="muted">no limit</span>}</td>
                <td class="nowrap">{free !== undefined ? fmt(free) : ""}</td>
                <td>{refused(res)}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
      <p class="muted small">This node's: creates, resumes and forks that would pass a budget are refused (503 node_at_capacity); warm pools fill at most 90% of each.</p>
    </div>
  );
}

// Nodes lists the cluster's nodes as the catalog knows them.
function Nodes({ nodes, at }) {
  return (
    <div class="card wide">
      <h2>Nodes</h2>
      <table class="list" data-testid="nodes">
        <thead>
          <tr>
            <th>Node</th>
            <th>Address</th>
            <th>State</th>
            <th>Sandboxes</th>
            <th>Warm pools (ready)</th>
            <th>Version</th>
            <th>Up</th>
          </tr>
        </thead>
        <tbody>
          {nodes.nodes.map((n) => (
            <tr data-node={n.id} data-alive={n.alive}>
              <td class="mono">
                {n.id}
                {n.id === nodes.self && <span class="tag">this node</span>}
              </td>
              <td class="mono small">{n.address}</td>
              <td>
                <span class={`state state-${n.alive ? "running" : "lost"}`}>{n.alive ? "alive" : "lease lapsed"}</span>
                {n.draining && <span class="tag">draining</span>}
              </td>
              <td>
                {n.info.sandboxes}
                {n.info.capacity ? <span class="muted"> / {n.info.capacity}</span> : ""}
              </td>
              <td class="small">
                {Object.entries(n.info.pools || {}).map(([t, k]) => (
                  <span class="tag">
                    {t}: {k}
                  </span>
                ))}
              </td>
              <td class="small">{n.info.version}</td>
              <td>{n.alive ? duration(at - Date.parse(n.started_at)) : ""}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <p class="muted small">From the cluster's catalog (GET /v1/admin/nodes): a node is alive while it renews its lease. Drain one with `space node drain`.</p>
    </div>
  );
}

// Tenants lists the tenants, their running sandboxes against their quota,
// and their API keys by public id (the start of the key; the keys
// themselves are hashed and never shown).
function Tenants({ tenants, keys }) {
  const byTenant = {};
  for (const k of keys.keys) (byTenant[k.tenant] ||= []).push(k);
  return (
    <div class="card wide">
      <h2>Tenants and API keys</h2>
      <table class="list small" data-testid="tenants">
        <thead>
          <tr>
            <th>Tenant</th>
            <th>Created</th>
            <th>Running sandboxes</th>
            <th>API keys (public id, name)</th>
          </tr>
        </thead>
        <tbody>
          {tenants.tenants.map((t) => (
            <tr data-tenant={t.id}>
              <td>
                <span class="mono">{t.id}</span>
                {t.name && <div class="muted">{t.name}</div>}
              </td>
              <td>{time(t.created_at)}</td>
              <td>
                {t.usage ? t.usage.sandboxes : ""}
                <span class="muted"> / {t.effective_quotas.sandboxes > 0 ? t.effective_quotas.sandboxes : "no limit"}</span>
              </td>
              <td>
                {(byTenant[t.id] || []).map((k) => (
                  <div class={k.revoked_at ? "muted revoked" : ""} data-key={k.id}>
                    <span class="mono">{k.id}…</span> {k.name}
                    {k.revoked_at ? ` (revoked ${time(k.revoked_at)})` : ""}
                  </div>
                ))}
                {!(byTenant[t.id] || []).length && <span class="muted">none</span>}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <p class="muted small">Read-only here: issue and revoke keys and set quotas with `space admin key`, `space admin tenant` or /v1/admin. The admin key is spaced's own and is not listed.</p>
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
  ["builds", "Template builds"],
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
          {p.value.admin && <Admission m={p.value.metrics} />}
          {p.value.admin && <Pools m={p.value.metrics} />}
          {p.value.nodes && <Nodes nodes={p.value.nodes} at={p.value.at} />}
          <Usage u={p.value.usage} />
          <Secrets />
          {p.value.tenants && p.value.keys && <Tenants tenants={p.value.tenants} keys={p.value.keys} />}
          {p.value.admin && <Latencies m={p.value.metrics} />}
          <Denials />
        </div>
      )}
    </section>
  );
}
