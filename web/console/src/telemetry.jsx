// A sandbox's telemetry from the API: its metrics over time as charts and
// its log (GET /v1/sandboxes/{id}/metrics and /logs?follow=true) on its page, and the
// latest sample of each running sandbox in the list. The samples are
// pushed: the page's event stream (live.js) brings each one as spaced
// takes it; the API's series fills the charts' past.
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import * as api from "./api.js";
import * as live from "./live.js";
import { TimeChart } from "./charts.jsx";
import { ErrorBox, bytes } from "./util.jsx";

const RANGES = [
  [900, "15 min"],
  [3600, "1 hour"],
  [86400, "24 hours"],
];
const LEVELS = ["debug", "info", "warn", "error"];
// The log view keeps this many lines.
const LOG_LINES = 500;

// Sandboxes in these states gain samples and log lines.
const LIVE_STATES = new Set(["creating", "running", "resuming"]);

// merge returns the samples of a and b by time, each time once.
function merge(a, b) {
  if (!b.length) return a;
  const all = a.concat(b).sort((x, y) => Date.parse(x.time) - Date.parse(y.time));
  return all.filter((x, i) => i === 0 || x.time !== all[i - 1].time);
}

// useSeries keeps the samples of the last range seconds: the API's series
// when the page opens (and, after the event stream reconnected, the
// samples it may have missed meanwhile), then every sample of the sandbox
// the stream brings.
function useSeries(id, range) {
  const key = `${id}/${range}`;
  const { connects } = live.useLive();
  const [s, setS] = useState({ key, interval: 0, samples: [], error: "" });
  const cur = useRef(s);
  cur.current = s;
  const trim = (all) => {
    if (!all.length) return all;
    const from = Date.parse(all[all.length - 1].time) - range * 1000;
    return all.filter((x) => Date.parse(x.time) >= from);
  };
  // Samples pushed for this sandbox.
  useEffect(
    () =>
      live.onSample((sid, sample) => {
        if (sid !== id) return;
        setS((c) => {
          if (c.key !== key) return c;
          const newest = c.samples.length ? c.samples[c.samples.length - 1].time : "";
          if (newest && Date.parse(sample.time) <= Date.parse(newest)) return c;
          return { ...c, samples: trim(c.samples.concat([sample])) };
        });
      }),
    [key],
  );
  // The past, from the API: at first, and the gap after a reconnect.
  useEffect(() => {
    let stop = false;
    const have = cur.current.key === key ? cur.current.samples : [];
    const newest = have.length ? have[have.length - 1].time : "";
    api.get(`/v1/sandboxes/${id}/metrics`, { start: newest || Math.floor(Date.now() / 1000) - range }).then(
      (m) => {
        if (stop) return;
        setS((c) => {
          const kept = c.key === key ? c.samples : [];
          return { key, interval: m.interval_seconds, samples: trim(merge(kept, m.samples)), error: "" };
        });
      },
      (e) => {
        if (!stop) setS((c) => ({ ...c, key, samples: c.key === key ? c.samples : [], error: e.message }));
      },
    );
    return () => {
      stop = true;
    };
  }, [key, connects]);
  return s.key === key ? s : { interval: s.interval, samples: [], error: "" };
}

// columns turns samples into the charts' arrays: x in unix seconds, and a
// null point where samples are missing (the sandbox was paused, or spaced
// restarted) so the line breaks there instead of bridging the gap. Samples
// older than an hour are one-minute summaries: they are farther apart.
function columns(samples, interval) {
  const out = { x: [], cpu: [], mem: [], cache: [], memTotal: [], disk: [], diskTotal: [] };
  const push = (t, s) => {
    out.x.push(t);
    out.cpu.push(s ? s.cpu_used_pct : null);
    out.mem.push(s ? s.mem_used : null);
    out.cache.push(s ? s.mem_cache : null);
    out.memTotal.push(s ? s.mem_total : null);
    out.disk.push(s ? s.disk_used : null);
    out.diskTotal.push(s ? s.disk_total : null);
  };
  const newest = samples.length ? Date.parse(samples[samples.length - 1].time) / 1000 : 0;
  let prev = null;
  for (const s of samples) {
    const t = Date.parse(s.time) / 1000;
    if (prev !== null) {
      const recent = newest - prev < 3600;
      const gap = recent ? Math.max(3 * interval, 3) : 150;
      if (t - prev > gap) push(prev + (t - prev) / 2, null);
    }
    push(t, s);
    prev = t;
  }
  return out;
}

// Byte axes step by powers of two (64 MiB, 128 MiB, ...), not of ten.
const BYTE_STEPS = Array.from({ length: 50 }, (_, i) => 2 ** i);

const pct = (v) => `${Math.round(v * 10) / 10}%`;

export function SandboxTelemetry({ sb }) {
  const [range, setRange] = useState(900);
  const live = LIVE_STATES.has(sb.state);
  const series = useSeries(sb.id, range);
  const c = useMemo(() => columns(series.samples, series.interval), [series.samples, series.interval]);
  const last = series.samples[series.samples.length - 1];
  return (
    <div class="stack">
      <div class="toolbar">
        <h2 class="grow">Metrics</h2>
        <label class="inline">
          Last{" "}
          <select value={range} onChange={(e) => setRange(Number(e.target.value))} data-testid="metrics-range">
            {RANGES.map(([s, label]) => (
              <option value={s}>{label}</option>
            ))}
          </select>
        </label>
      </div>
      <ErrorBox error={series.error} />
      <p class="muted small" data-testid="metrics-note">
        Sampled from the host every {series.interval || "?"} s{live ? "; each sample reaches this page as spaced takes it (server-sent events)" : ""}. CPU is a percentage of all
        the sandbox's {sb.cpu} vCPU; memory in use excludes the page cache of its files. Kept in spaced's memory: the last hour sample by sample, then one-minute summaries for 24 hours.
        {sb.state === "paused" ? " A paused sandbox has no samples." : ""} Click a legend entry to show or hide its line (the limits start hidden).
      </p>
      <div class="charts">
        <TimeChart
          title={`CPU${last ? `: ${pct(last.cpu_used_pct)} of ${last.cpu_count} vCPU` : ""}`}
          testid="chart-cpu"
          xs={c.x}
          series={[{ label: "CPU used", values: c.cpu, color: "#2f6fed", fill: true }]}
          format={pct}
          max={() => 100}
        />
        <TimeChart
          title={`Memory${last ? `: ${bytes(last.mem_used)} of ${bytes(last.mem_total)}` : ""}`}
          testid="chart-memory"
          xs={c.x}
          series={[
            { label: "in use", values: c.mem, color: "#2f6fed", fill: true },
            { label: "file cache", values: c.cache, color: "#e8793a" },
            { label: "limit", values: c.memTotal, color: "#7a8793", dash: true, hidden: true },
          ]}
          format={bytes}
          incrs={BYTE_STEPS}
        />
        <TimeChart
          title={`Disk${last ? `: ${bytes(last.disk_used)} of ${bytes(last.disk_total)}` : ""}`}
          testid="chart-disk"
          xs={c.x}
          series={[
            { label: "written", values: c.disk, color: "#2aa876", fill: true },
            { label: "limit", values: c.diskTotal, color: "#7a8793", dash: true, hidden: true },
          ]}
          format={bytes}
          incrs={BYTE_STEPS}
          note="What the sandbox's writable layer holds (the template's files are shared and not counted)."
        />
      </div>
      <SandboxLog sb={sb} />
    </div>
  );
}

// SandboxLog shows the sandbox's last lines (its agent's and its lifecycle
// from spaced), newest first, following its log
// (GET /v1/sandboxes/{id}/logs?follow=true): the lines there, then each
// new one as spaced keeps it.
function SandboxLog({ sb }) {
  const [level, setLevel] = useState("");
  const [search, setSearch] = useState("");
  const [q, setQ] = useState("");
  const [log, setLog] = useState({ lines: [], error: "", loaded: false });
  useEffect(() => {
    let lines = [];
    let frame = 0;
    // A burst of lines (the first 500) renders once, in the next frame.
    const show = () => {
      if (!frame)
        frame = requestAnimationFrame(() => {
          frame = 0;
          setLog({ lines, error: "", loaded: true });
        });
    };
    const es = new EventSource(api.url(`/v1/sandboxes/${sb.id}/logs`, { follow: true, limit: LOG_LINES, level, search: q }));
    // Each (re)connection starts with the selected lines again.
    es.addEventListener("open", () => {
      lines = [];
      show();
    });
    es.addEventListener("log", (e) => {
      const l = JSON.parse(e.data);
      // Agent lines are read every interval: they may be older than lines
      // shown already. Newest first.
      const t = Date.parse(l.time);
      let i = 0;
      while (i < lines.length && Date.parse(lines[i].time) > t) i++;
      lines = lines.slice(0, i).concat([l], lines.slice(i, LOG_LINES - 1));
      show();
    });
    es.addEventListener("error", () => {
      // Closed: the API refused the stream (the sandbox is gone); else
      // the browser reconnects by itself.
      if (es.readyState === EventSource.CLOSED) setLog((c) => ({ ...c, loaded: true, error: "The log's stream ended: reload the page to read it again." }));
    });
    return () => {
      es.close();
      cancelAnimationFrame(frame);
    };
  }, [sb.id, level, q]);
  return (
    <div class="card">
      <div class="toolbar">
        <h2 class="grow">Log</h2>
        <form
          class="row log-filter"
          onSubmit={(e) => {
            e.preventDefault();
            setQ(search);
          }}
        >
          <input type="search" placeholder="search messages" value={search} onInput={(e) => setSearch(e.target.value)} />
          <select value={level} onChange={(e) => setLevel(e.target.value)} data-testid="log-level">
            <option value="">all levels</option>
            {LEVELS.slice(1).map((l) => (
              <option value={l}>{l} and above</option>
            ))}
          </select>
        </form>
      </div>
      <ErrorBox error={log.error} />
      <table class="list log" data-testid="sandbox-log">
        <thead>
          <tr>
            <th>Time</th>
            <th>Level</th>
            <th>Message</th>
            <th>Fields</th>
          </tr>
        </thead>
        <tbody>
          {log.lines.map((l) => (
            <tr data-level={l.level}>
              <td class="mono small nowrap">{new Date(l.time).toLocaleString()}</td>
              <td>
                <span class={`level level-${l.level}`}>{l.level}</span>
              </td>
              <td class="mono small">{l.message}</td>
              <td class="small">
                {Object.entries(l.fields || {}).map(([k, v]) => (
                  <span class="tag">
                    {k}={v}
                  </span>
                ))}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {log.loaded && !log.lines.length && <p class="muted empty">No lines{level || q ? " match" : ""}.</p>}
      <p class="muted small">The last 500 lines, and new ones as spaced reads them; spaced keeps the last 2000 of each sandbox, in memory.</p>
    </div>
  );
}

// Usage renders one list cell: the latest sample's use beside the limit.
export function CPUUsage({ sb, u }) {
  if (!u) return <span title="vCPU limit">{sb.cpu}</span>;
  return (
    <span title={`${pct(u.cpu_used_pct)} of all ${u.cpu_count} vCPU at ${new Date(u.time).toLocaleTimeString()}`} data-testid="cpu-usage" data-pct={u.cpu_used_pct}>
      <span class="use">{pct(u.cpu_used_pct)}</span> <span class="muted">of {sb.cpu} vCPU</span>
    </span>
  );
}

export function MemoryUsage({ sb, u }) {
  if (!u) return <span title="memory limit">{sb.memory_mb} MiB</span>;
  return (
    <span title={`in use at ${new Date(u.time).toLocaleTimeString()}, without ${bytes(u.mem_cache)} of file cache`} data-testid="mem-usage" data-bytes={u.mem_used}>
      <span class="use">{bytes(u.mem_used)}</span> <span class="muted">of {sb.memory_mb} MiB</span>
    </span>
  );
}
