// A short history chart: one or two series over time, drawn as SVG polylines with a zero-based
// y axis. Points are [t_ms, value|null]; a null breaks the line (no measurement then).
import { html } from "./ui.js";

const W = 320;
const H = 110;
const PAD = { l: 34, r: 8, t: 8, b: 18 };

function segments(points, sx, sy) {
  const out = [];
  let cur = [];
  for (const [t, v] of points) {
    if (v === null || v === undefined) {
      if (cur.length) out.push(cur);
      cur = [];
    } else {
      cur.push(`${sx(t).toFixed(1)},${sy(v).toFixed(1)}`);
    }
  }
  if (cur.length) out.push(cur);
  return out;
}

export function LineChart({ series, format, minMax = 0, empty = "no data yet", testid }) {
  const pts = series.flatMap((s) => s.points.filter((p) => p[1] !== null && p[1] !== undefined));
  if (!pts.length) return html`<div class="chart empty" data-testid=${testid}>${empty}</div>`;
  const t0 = Math.min(...series.flatMap((s) => s.points.map((p) => p[0])));
  const t1 = Math.max(...series.flatMap((s) => s.points.map((p) => p[0])), t0 + 1000);
  const vmax = Math.max(minMax, ...pts.map((p) => p[1])) || 1;
  const sx = (t) => PAD.l + ((t - t0) / (t1 - t0)) * (W - PAD.l - PAD.r);
  const sy = (v) => H - PAD.b - (v / vmax) * (H - PAD.t - PAD.b);
  const ticks = [0, vmax / 2, vmax];
  const span = (t1 - t0) / 1000;
  const spanLabel = span >= 120 ? `${Math.round(span / 60)} min` : `${Math.round(span)} s`;
  return html`<div class="chart" data-testid=${testid}>
    <svg viewBox=${`0 0 ${W} ${H}`}>
      ${ticks.map((v) => html`<g class="tick"><line x1=${PAD.l} x2=${W - PAD.r} y1=${sy(v)} y2=${sy(v)} />
        <text x=${PAD.l - 4} y=${sy(v) + 3} text-anchor="end">${format(v)}</text></g>`)}
      ${series.map((s) => segments(s.points, sx, sy).map((seg) => seg.length === 1
        ? html`<circle cx=${seg[0].split(",")[0]} cy=${seg[0].split(",")[1]} r="2" fill=${s.colour} />`
        : html`<polyline points=${seg.join(" ")} fill="none" stroke=${s.colour} stroke-width="1.6" />`))}
      <text class="axis" x=${PAD.l} y=${H - 4}>−${spanLabel}</text>
      <text class="axis" x=${W - PAD.r} y=${H - 4} text-anchor="end">now</text>
    </svg>
    <div class="chart-legend">${series.map((s) => html`<span><i style=${{ background: s.colour }}></i>${s.label}</span>`)}</div>
  </div>`;
}
