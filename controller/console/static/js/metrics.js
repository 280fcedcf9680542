// What the map can colour links by, and the colour scales: one place for every threshold.
// Planned load comes from the plan (always there); the other three come from switch
// counters through `measured` on each link, and are "no measurements" where it is absent.

const UTIL_BINS = [
  // [upper bound (exclusive unless last), colour, legend label]
  [0.5, "#2e9e5b", "< 0.5"],
  [0.75, "#9bc53d", "< 0.75"],
  [0.95, "#f0c419", "< 0.95"],
  [1.0001, "#f08c2e", "≈ 1 (full)"],
  [2.0, "#e8413b", "> 1 (over)"],
  [Infinity, "#c02bb0", "≥ 2"],
];
const RATE_BINS = [
  [10, "#2e9e5b", "< 10/s"],
  [100, "#9bc53d", "< 100/s"],
  [1000, "#f0c419", "< 1k/s"],
  [10000, "#f08c2e", "< 10k/s"],
  [Infinity, "#e8413b", "≥ 10k/s"],
];
export const IDLE = "#5a6775";
export const NO_DATA = "#36404c";

function binColour(bins, v) {
  if (v === null || v === undefined) return NO_DATA;
  if (v <= 0) return IDLE;
  for (const [upper, colour] of bins) if (v < upper) return colour;
  return bins[bins.length - 1][1];
}

// index into a compact measurement [utilization, ecn_marks_per_s, pfc_pauses_per_s, congested, t_us]
function measuredDir(link, d, k) {
  const m = link.measured && link.measured[d];
  if (!m) return null;
  const v = m[k];
  return v === null || v === undefined ? null : v;
}

function maxOf(a, b) {
  if (a === null) return b;
  if (b === null) return a;
  return Math.max(a, b);
}

function metric(key, label, unit, bins, dir, measured) {
  return {
    key, label, unit, measured, bins,
    dir, // (link, 0|1) -> number | null  (0: a->b, 1: b->a)
    value: (link) => maxOf(dir(link, 0), dir(link, 1)),
    colour: (v) => binColour(bins, v),
    legend: [["idle", IDLE], ...bins.map(([, c, l]) => [l, c]), ...(measured ? [["no measurements", NO_DATA]] : [])],
  };
}

export const METRICS = {
  planned: metric("planned", "Planned load", "util", UTIL_BINS, (l, d) => l.planned[d], false),
  utilization: metric("utilization", "Measured utilization", "util", UTIL_BINS, (l, d) => measuredDir(l, d, 0), true),
  ecn: metric("ecn", "ECN marks/s", "rate", RATE_BINS, (l, d) => measuredDir(l, d, 1), true),
  pfc: metric("pfc", "PFC pauses/s", "rate", RATE_BINS, (l, d) => measuredDir(l, d, 2), true),
};
export const METRIC_KEYS = ["planned", "utilization", "ecn", "pfc"];

// A series point from GET /v1/links/{name}/series (a full measurement M) for a metric.
export function seriesValue(key, m) {
  if (!m) return null;
  if (key === "utilization") return m.utilization ?? null;
  if (key === "ecn") return m.ecn_marks_per_s ?? null;
  if (key === "pfc") {
    const p = m.pfc_pauses_per_s;
    if (!p) return null;
    return Object.values(p).reduce((s, v) => s + (v || 0), 0);
  }
  return null;
}

export function isCongested(link) {
  return !!(link.measured && ((link.measured[0] && link.measured[0][3]) || (link.measured[1] && link.measured[1][3])));
}
