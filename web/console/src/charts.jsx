// Charts drawn with uPlot: latency histograms from spaced's Prometheus
// metrics, and series over time (a sandbox's CPU, memory and disk). uPlot
// styles its elements through the CSSOM (element.style), which the page's
// CSP allows; it makes no style attributes or <style> elements of its own.
import "uplot/dist/uPlot.min.css";
import uPlot from "uplot";
import { useEffect, useRef } from "preact/hooks";

const COLORS = ["#2f6fed", "#e8793a", "#2aa876", "#b04fd6", "#d64f6a", "#7a8793"];

// histograms groups <name>_bucket series by every label but le: for each
// group its upper bounds, the count in each bucket (not cumulative), the
// total count and sum.
export function histograms(metrics, name) {
  const groups = new Map();
  for (const s of metrics[`${name}_bucket`] || []) {
    const { le, ...rest } = s.labels;
    const key = JSON.stringify(rest);
    if (!groups.has(key)) groups.set(key, { labels: rest, buckets: [] });
    groups.get(key).buckets.push([le === "+Inf" ? Infinity : Number(le), s.value]);
  }
  const out = [];
  for (const [key, g] of groups) {
    g.buckets.sort((a, b) => a[0] - b[0]);
    const counts = g.buckets.map(([, c], i) => c - (i ? g.buckets[i - 1][1] : 0));
    const find = (m) => (metrics[m] || []).find((s) => JSON.stringify(s.labels) === key);
    const count = find(`${name}_count`);
    const sum = find(`${name}_sum`);
    out.push({
      labels: g.labels,
      bounds: g.buckets.map(([le]) => le),
      counts,
      count: count ? count.value : 0,
      sum: sum ? sum.value : 0,
    });
  }
  return out;
}

// quantile estimates the q-quantile from buckets (the upper bound of the
// bucket it falls in, as Prometheus' histogram_quantile would bound it).
export function quantile(h, q) {
  if (!h.count) return NaN;
  let seen = 0;
  for (let i = 0; i < h.counts.length; i++) {
    seen += h.counts[i];
    if (seen >= q * h.count) return h.bounds[i];
  }
  return Infinity;
}

export function seconds(s) {
  if (!isFinite(s)) return isNaN(s) ? "–" : "> max";
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  return `${s.toFixed(s < 10 ? 2 : 0)} s`;
}

function labelOf(labels) {
  const l = Object.entries(labels).map(([k, v]) => `${k}=${v}`);
  return l.length ? l.join(", ") : "all";
}

// Histogram draws one metric's histograms as bars, a series per label set.
export function Histogram({ title, groups, testid }) {
  const box = useRef(null);
  useEffect(() => {
    if (!box.current || !groups.length) return;
    const bounds = groups[0].bounds;
    const xs = bounds.map((_, i) => i);
    const data = [xs, ...groups.map((g) => g.counts)];
    const width = Math.max(320, box.current.clientWidth || 480);
    const plot = new uPlot(
      {
        width,
        height: 200,
        legend: { show: true },
        cursor: { drag: { x: false, y: false } },
        scales: { x: { time: false, range: [-0.5, xs.length - 0.5] } },
        axes: [
          { values: (u, ticks) => ticks.map((t) => (Number.isInteger(t) && t < bounds.length ? (isFinite(bounds[t]) ? "≤" + seconds(bounds[t]) : "more") : "")), size: 40, font: "11px sans-serif" },
          { size: 50, font: "11px sans-serif" },
        ],
        series: [
          { label: "bucket", value: (u, v) => (v === null || v === undefined ? "" : isFinite(bounds[v]) ? "≤" + seconds(bounds[v]) : "more") },
          ...groups.map((g, i) => ({
            label: labelOf(g.labels),
            stroke: COLORS[i % COLORS.length],
            fill: COLORS[i % COLORS.length] + (groups.length > 1 ? "88" : "cc"),
            paths: uPlot.paths.bars({ size: [0.7, 60], align: 0, gap: 1 }),
            points: { show: false },
          })),
        ],
      },
      data,
      box.current,
    );
    return () => plot.destroy();
  }, [groups]);
  return (
    <div class="chart" data-testid={testid}>
      <h3>{title}</h3>
      {groups.length && groups.some((g) => g.count) ? (
        <>
          <div ref={box} />
          <table class="kv small">
            {groups.map((g) => (
              <tr>
                <th>{labelOf(g.labels)}</th>
                <td>
                  {g.count} observed; median {seconds(quantile(g, 0.5))}, p90 {seconds(quantile(g, 0.9))}, mean {seconds(g.count ? g.sum / g.count : NaN)}
                </td>
              </tr>
            ))}
          </table>
        </>
      ) : (
        <p class="muted small">nothing observed yet</p>
      )}
    </div>
  );
}

// TimeChart draws series over time: xs are unix seconds (null values break
// the line: no samples there), series are {label, values, color, dash,
// fill, hidden}; a hidden one shows when its legend entry is clicked (and
// the scale follows what is shown). The first series is the chart's subject: its number of points, its
// last and its highest value are on the element as data-points, data-last
// and data-max (what a test reads; the canvas is only pixels).
export function TimeChart({ title, testid, xs, series, format, max, incrs, note }) {
  const box = useRef(null);
  const plot = useRef(null);
  const data = [xs, ...series.map((s) => s.values)];
  const shape = series.map((s) => s.label).join("|");
  const empty = xs.length === 0;
  useEffect(() => {
    if (!box.current || empty) return;
    const width = () => Math.max(300, box.current.clientWidth || 440);
    const fmt = (v) => (v === null || v === undefined ? "–" : format(v));
    const p = new uPlot(
      {
        width: width(),
        height: 190,
        legend: { show: true },
        cursor: { drag: { x: true, y: false } },
        scales: { y: { range: (u, lo, hi) => [0, max ? max() : hi > 0 ? hi * 1.1 : 1] } },
        axes: [
          { size: 50, font: "11px sans-serif" },
          { size: 74, font: "11px sans-serif", values: (u, ticks) => ticks.map(format), incrs },
        ],
        series: [
          { label: "time", value: (u, v) => (v === null || v === undefined ? "" : new Date(v * 1000).toLocaleTimeString()) },
          ...series.map((s) => ({
            label: s.label,
            show: !s.hidden,
            stroke: s.color,
            width: s.dash ? 1 : 1.5,
            dash: s.dash ? [5, 4] : undefined,
            fill: s.fill ? s.color + "22" : undefined,
            points: { show: false },
            value: (u, v) => fmt(v),
          })),
        ],
      },
      data,
      box.current,
    );
    plot.current = p;
    const resize = () => p.setSize({ width: width(), height: 190 });
    window.addEventListener("resize", resize);
    return () => {
      window.removeEventListener("resize", resize);
      p.destroy();
      plot.current = null;
    };
  }, [shape, empty]);
  // New samples replace the data in place (setData), not the chart; only
  // when they are new, so a re-render for another reason keeps a zoom.
  const drawn = useRef([]);
  useEffect(() => {
    if (plot.current && data.some((d, i) => d !== drawn.current[i])) plot.current.setData(data);
    drawn.current = data;
  });
  const subject = series[0] ? series[0].values.filter((v) => v !== null && v !== undefined) : [];
  return (
    <div
      class="chart card"
      data-testid={testid}
      data-points={subject.length}
      data-last={subject.length ? subject[subject.length - 1] : ""}
      data-max={subject.length ? Math.max(...subject) : ""}
    >
      <h3>{title}</h3>
      {empty ? <p class="muted small">no samples yet</p> : <div ref={box} />}
      {note && <p class="muted small">{note}</p>}
    </div>
  );
}
