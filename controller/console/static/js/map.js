// The fabric map: one SVG of the current level's nodes and edges, coloured by the selected
// metric. Down links are dashed with a cross, drained ones dotted; an edge that aggregates
// links is thicker and shows how many of them are down or drained. Path highlights (a
// connection's flows) and suspects (an alarm's) are drawn over everything else.
import { edgeHit, maxValue, nodeHit, stateSummary } from "./model.js";
import { useMemo, useRef } from "../vendor/hooks.module.js";
import { fmtRate, fmtUtil, html, memo } from "./ui.js";

function fitText(text, width, charW) {
  const n = Math.floor(width / charW);
  return text.length <= n ? text : text.slice(0, Math.max(1, n - 1)) + "…";
}

function fmt(metric, v) {
  if (v === null) return "no measurements";
  return metric.unit === "rate" ? fmtRate(v) + "/s" : fmtUtil(v);
}

// Everything an edge shows, computed once per render.
function edgeLook(edge, metric, dense) {
  const v = maxValue(metric, edge.links);
  const st = stateSummary(edge.links);
  const n = edge.links.length;
  const allDown = st.down === st.all;
  const allDrained = st.drained === st.all;
  return {
    v, st, n, allDown, allDrained,
    // Many edges: thin ones, or a 1,000-edge overview is a solid wall.
    width: dense ? 1.2 : n === 1 ? 2 : Math.min(7, 2 + Math.log2(n)),
    colour: allDown ? "#7b8794" : metric.colour(v),
    state: allDown ? "down" : allDrained ? "drained" : st.down || st.drained ? "mixed" : "up",
  };
}

// One line per edge and no per-edge hit area or title element: clicks and the tooltip find the
// nearest edge geometrically (see MapView), which keeps a 1,000-link view light to draw.
const Edge = memo(function Edge({ edge, look, selected, hl, dim, metric }) {
  const cls = ["edge", look.allDown ? "down" : "", look.allDrained ? "drained" : "",
    selected ? "selected" : "", hl === "path" ? "hl-path" : "", hl === "suspect" ? "hl-suspect" : "",
    dim ? "dim" : "", look.v === null && metric.measured ? "nodata" : "",
    !look.v && !look.st.down && !look.st.drained ? "idle" : ""].filter(Boolean).join(" ");
  return html`<line class=${cls} data-edge=${edge.key} data-link=${look.n === 1 ? edge.links[0].name : undefined}
    data-links=${look.n} data-state=${look.state} x1=${edge.x1} y1=${edge.y1} x2=${edge.x2} y2=${edge.y2}
    stroke=${look.colour} stroke-width=${look.width} />`;
});

const Marks = memo(function Marks({ edge, look }) {
  const { st, n } = look;
  if (!st.down && !st.drained) return null;
  const t = `translate(${(edge.x1 + edge.x2) / 2},${(edge.y1 + edge.y2) / 2})`;
  if (st.down) {
    return html`<g class="mark-down" transform=${t}><circle r="6" /><path d="M-3,-3L3,3M3,-3L-3,3" />
      ${n > 1 && html`<text x="8" y="3">${st.down}</text>`}</g>`;
  }
  return html`<g class="mark-drained" transform=${t}><rect x="-5" y="-5" width="10" height="10" rx="2" />
    <path d="M-2,-3V3M2,-3V3" />${n > 1 && html`<text x="8" y="3">${st.drained}</text>`}</g>`;
});

function edgeSelection(edge) {
  if (edge.links.length === 1) return { kind: "link", name: edge.links[0].name };
  return { kind: "edge", key: edge.key, links: edge.links.map((l) => l.name), label: `${edge.from.slice(2)} ↔ ${edge.to.slice(2)}` };
}

// Squared distance from (px, py) to the segment of an edge.
function dist2(e, px, py) {
  const dx = e.x2 - e.x1;
  const dy = e.y2 - e.y1;
  const len = dx * dx + dy * dy;
  const t = len ? Math.max(0, Math.min(1, ((px - e.x1) * dx + (py - e.y1) * dy) / len)) : 0;
  const x = e.x1 + t * dx - px;
  const y = e.y1 + t * dy - py;
  return x * x + y * y;
}

const HIT_PX = 6;

// The edge under a mouse event: the nearest within HIT_PX screen pixels, the topmost on a tie.
export function edgeAt(svg, drawn, ev) {
  const m = svg.getScreenCTM();
  if (!m) return null;
  const p = svg.createSVGPoint();
  p.x = ev.clientX;
  p.y = ev.clientY;
  const q = p.matrixTransform(m.inverse());
  const tol = HIT_PX / m.a;
  let best = null;
  let bestD = tol * tol;
  for (const d of drawn) {
    const dd = dist2(d.e, q.x, q.y);
    if (dd <= bestD) { best = d; bestD = dd; }
  }
  return best;
}

// A pod or leaf group at the overview: counts, a strip of its inner links' values (sorted,
// hottest right) and badges for down/drained links and isolated hosts.
const GroupBox = memo(function GroupBox({ node, metric, selected, hl, iso, onSelect, onOpen }) {
  const st = stateSummary(node.internal);
  // The strip and border show the group's inner fabric links (host ports when it has none):
  // host ports run full by design (a NIC's flows share its capacity), so they would hide the rest.
  const inner = node.internal.filter((l) => !l.host);
  const shown = inner.length ? inner : node.internal;
  const values = shown.map((l) => metric.value(l)).sort((a, b) => (a ?? -1) - (b ?? -1));
  const cells = Math.min(20, values.length);
  const strip = [];
  for (let k = 0; k < cells; k++) {
    const v = values[Math.min(values.length - 1, Math.floor(((k + 1) * values.length) / cells) - 1)];
    strip.push(v);
  }
  const v = maxValue(metric, shown);
  const hostMax = inner.length ? maxValue(metric, node.internal.filter((l) => l.host)) : null;
  const x = node.x - node.w / 2;
  const y = node.y - node.h / 2;
  const cw = (node.w - 12) / Math.max(1, cells);
  const cls = ["group", selected ? "selected" : "", hl === "path" ? "hl-path" : "", hl === "suspect" ? "hl-suspect" : ""].filter(Boolean).join(" ");
  const tip = `${node.label}: ${node.switches.length} switches, ${node.hosts.length} hosts\n` +
    (inner.length ? `${inner.length} inner fabric links, busiest ${fmt(metric, v)}\nhost ports, busiest ${fmt(metric, hostMax)}`
      : `${shown.length} host ports, busiest ${fmt(metric, v)}`) +
    `${st.down ? `\n${st.down} down` : ""}${st.drained ? `\n${st.drained} drained` : ""}\n(double-click to open)`;
  return html`<g class=${cls} data-node=${node.id} data-tip=${tip}
      onClick=${(ev) => { ev.stopPropagation(); onSelect({ kind: "group", id: node.groupId }); }}
      onDblClick=${() => onOpen(node.groupId)}>
    <rect class="box" x=${x} y=${y} width=${node.w} height=${node.h} rx="5" stroke=${metric.colour(v)} />
    <text class="glabel" x=${x + 6} y=${y + 13}>${fitText(node.label, node.w - 10, 6.6)}</text>
    <text class="gsub" x=${x + 6} y=${y + 25}>${node.w > 90 ? `${node.switches.length} sw · ${node.hosts.length} hosts` : `${node.switches.length} sw`}</text>
    ${strip.map((sv, k) => html`<rect class="cell" x=${x + 6 + k * cw} y=${y + 32} width=${Math.max(1, cw - 1)} height="10" fill=${metric.colour(sv)} />`)}
    <g class="badges">
      ${st.down > 0 && html`<text class="b-down" x=${x + 6} y=${y + 57}>✕${st.down}</text>`}
      ${st.drained > 0 && html`<text class="b-drained" x=${x + 30} y=${y + 57}>‖${st.drained}</text>`}
      ${iso > 0 && html`<text class="b-iso" x=${x + 54} y=${y + 57}>⊘${iso}</text>`}
    </g>
  </g>`;
});

const SwitchNode = memo(function SwitchNode({ node, v, metric, selected, hl, onSelect }) {
  const x = node.x - node.w / 2;
  const y = node.y - node.h / 2;
  const fits = node.w >= node.label.length * 6.2 + 4;
  const cls = ["node", node.kind, node.role || "", selected ? "selected" : "", hl === "path" ? "hl-path" : "", hl === "suspect" ? "hl-suspect" : ""].filter(Boolean).join(" ");
  const select = (ev) => {
    ev.stopPropagation();
    onSelect(node.kind === "block" ? { kind: "block", id: node.blockId } : { kind: "switch", name: node.switches[0] });
  };
  const tip = `${node.label}${node.kind === "block" ? ` (${node.switches.length} switches)` : ""}\nbusiest link ${fmt(metric, v)}`;
  return html`<g class=${cls} data-node=${node.id} data-tip=${tip} onClick=${select}>
    <rect x=${x} y=${y} width=${node.w} height=${node.h} rx="4" stroke=${metric.colour(v)} />
    ${fits && html`<text x=${node.x} y=${node.y + 4} text-anchor="middle">${node.label}</text>`}
  </g>`;
});

const HostNode = memo(function HostNode({ node, selected, hl, isolated, onSelect }) {
  const cls = ["host", selected ? "selected" : "", hl === "path" ? "hl-path" : "", hl === "suspect" ? "hl-suspect" : "", isolated ? "isolated" : ""].filter(Boolean).join(" ");
  return html`<g class=${cls} data-node=${node.id} data-tip=${`${node.label}${isolated ? " (isolated)" : ""}`}
      onClick=${(ev) => { ev.stopPropagation(); onSelect({ kind: "host", name: node.hosts[0] }); }}>
    <rect x=${node.x - node.w / 2} y=${node.y - node.h / 2} width=${node.w} height=${node.h} rx="1.5" />
  </g>`;
});

function hlOf(hits, path, suspect) {
  if (suspect && hits(suspect)) return "suspect";
  if (path && hits(path)) return "path";
  return null;
}

function selectedNode(node, sel) {
  if (!sel) return false;
  if (sel.kind === "switch" || sel.kind === "host") return node.id === (sel.kind === "switch" ? "s:" : "h:") + sel.name;
  if (sel.kind === "group") return node.id === "g:" + sel.id;
  if (sel.kind === "block") return node.id === "b:" + sel.id;
  return false;
}

function selectedEdge(edge, sel) {
  if (!sel) return false;
  if (sel.kind === "edge") return sel.key === edge.key;
  if (sel.kind === "link") return edge.links.length === 1 && edge.links[0].name === sel.name;
  return false;
}

function MapView({ view, metric, selection, path, suspect, isolated, onSelect, onOpen }) {
  const svgRef = useRef(null);
  const tipRef = useRef(null);
  const dense = view.edges.length > 300;
  const drawn = useMemo(() => {
    const out = view.edges.map((e) => ({ e, look: edgeLook(e, metric, dense), hl: hlOf((h) => edgeHit(e, h), path, suspect) }));
    // Idle first, hottest last, highlights on top: what matters is never hidden under the rest.
    out.sort((p, q) => (p.hl ? 1 : 0) - (q.hl ? 1 : 0) || (p.look.v ?? -1) - (q.look.v ?? -1));
    return out;
  }, [view, metric, path, suspect]);
  const busiest = useMemo(() => new Map(view.nodes.filter((n) => n.touching).map((n) => [n.id, maxValue(metric, n.touching)])),
    [view, metric]);
  const drawnRef = useRef(drawn);
  drawnRef.current = drawn;
  const metricRef = useRef(metric);
  metricRef.current = metric;
  const click = (ev) => {
    const hit = edgeAt(svgRef.current, drawnRef.current, ev);
    onSelect(hit ? edgeSelection(hit.e) : null);
  };
  const move = (ev) => {
    const tip = tipRef.current;
    if (!tip) return;
    const node = ev.target.closest && ev.target.closest("[data-tip]");
    const hit = node ? null : edgeAt(svgRef.current, drawnRef.current, ev);
    const text = node ? node.dataset.tip : hit ? edgeTip(metricRef.current, hit.e, hit.look) : null;
    svgRef.current.style.cursor = text ? "pointer" : "";
    if (!text) { tip.hidden = true; return; }
    const box = tip.parentElement.getBoundingClientRect();
    tip.textContent = text;
    tip.hidden = false;
    tip.style.left = `${Math.max(0, Math.min(ev.clientX - box.left + 14, box.width - 320))}px`;
    tip.style.top = `${ev.clientY - box.top + 14}px`;
  };
  const leave = () => { if (tipRef.current) tipRef.current.hidden = true; };
  return html`<div class="mapbox">
    <svg ref=${svgRef} class=${"map" + (dense ? " dense" : "")} viewBox=${`0 0 ${view.width} ${view.height}`}
        preserveAspectRatio="xMidYMin meet" data-level=${view.level.kind + (view.level.id ? ":" + view.level.id : "")}
        data-testid="map" onClick=${click} onMouseMove=${move} onMouseLeave=${leave}>
      <g class="rowlabels">${view.rowLabels.map((r) => html`<text x="4" y=${r.y}>${r.label}</text>`)}</g>
      <g class="edges">${drawn.map(({ e, look, hl }) => html`<${Edge} key=${e.key} edge=${e} look=${look} metric=${metric}
          selected=${selectedEdge(e, selection)} hl=${hl} dim=${!!path && !hl} />`)}</g>
      <g class="marks">${drawn.map(({ e, look }) => html`<${Marks} key=${e.key} edge=${e} look=${look} />`)}</g>
      <g class="nodes">${view.nodes.map((n) => {
        const hl = hlOf((h) => nodeHit(n, h), path, suspect);
        const sel = selectedNode(n, selection);
        if (n.kind === "group") {
          const iso = n.hosts.reduce((k, h) => k + (isolated.has(h) ? 1 : 0), 0);
          return html`<${GroupBox} key=${n.id} node=${n} metric=${metric} selected=${sel} hl=${hl} iso=${iso} onSelect=${onSelect} onOpen=${onOpen} />`;
        }
        if (n.kind === "host") return html`<${HostNode} key=${n.id} node=${n} selected=${sel} hl=${hl} isolated=${isolated.has(n.hosts[0])} onSelect=${onSelect} />`;
        return html`<${SwitchNode} key=${n.id} node=${n} v=${busiest.get(n.id) ?? null} metric=${metric} selected=${sel} hl=${hl} onSelect=${onSelect} />`;
      })}</g>
    </svg>
    <div ref=${tipRef} class="tooltip" hidden></div>
  </div>`;
}

function edgeTip(metric, edge, look) {
  if (look.n === 1) {
    const l = edge.links[0];
    return `${l.name}\n${l.a} → ${l.b}: ${fmt(metric, metric.dir(l, 0))}\n${l.b} → ${l.a}: ${fmt(metric, metric.dir(l, 1))}\n` +
      `planned flows ${l.flows[0]} / ${l.flows[1]} · ${l.capacity} Gb/s · ${l.state}`;
  }
  const parts = [`${look.n} links`, `busiest ${fmt(metric, look.v)}`];
  if (look.st.down) parts.push(`${look.st.down} down`);
  if (look.st.drained) parts.push(`${look.st.drained} drained`);
  return `${edge.from.slice(2)} ↔ ${edge.to.slice(2)}\n${parts.join(" · ")}`;
}

export const FabricMap = memo(MapView);

export function Legend({ metric }) {
  return html`<div class="legend" data-testid="legend">
    ${metric.legend.map(([label, colour]) => html`<span class="swatch"><i style=${{ background: colour }}></i>${label}</span>`)}
    <span class="swatch"><i class="dash"></i>down</span>
    <span class="swatch"><i class="dot"></i>drained</span>
  </div>`;
}
