// The map's model: the fabric state of GET /console/api/fabric indexed for lookups, and the
// view of one level (the whole flat fabric, the overview by group, or one group) as positioned
// nodes and edges. An edge aggregates every link between two visible nodes; a link whose two
// ends fall in one node (inside a pod at the overview) counts in that node's summary.
// Pure functions of their inputs: no DOM, no fetch.
import { naturalCompare } from "./ui.js";

export const WIDTH = 1200;
const MARGIN = 28;
const SWITCH_H = 24;
const GROUP_H = 64;
const ROW_GAP_MIN = 80;
const ROW_GAP_MAX = 300;
const TARGET_H = 540; // a small fabric spreads its rows over about this height
const HOST_MIN = 6;
const HOST_MAX = 16;
const HOST_GAP = 3;
const SPLIT_GROUPS = 16; // more groups than this: half above the top tier, half below

export function indexFabric(P) {
  const switches = new Map();
  P.switches.name.forEach((name, i) => {
    switches.set(name, { name, role: P.switches.role[i], pod: P.switches.pod[i], links: [] });
  });
  const L = P.links;
  const links = new Array(L.name.length);
  const byName = new Map();
  const hosts = new Map();
  for (let i = 0; i < links.length; i++) {
    const link = {
      i, name: L.name[i], a: L.a[i], b: L.b[i], state: L.state[i], capacity: L.capacity_gbps[i],
      host: L.host_link[i] === 1, planned: L.planned[i], flows: L.flows[i], measured: L.measured[i],
    };
    links[i] = link;
    byName.set(link.name, link);
    if (link.host) {
      const hostName = link.a.split(":")[0];
      let h = hosts.get(hostName);
      if (!h) hosts.set(hostName, (h = { name: hostName, ports: [], links: [] }));
      h.ports.push({ port: link.a, leaf: link.b, link });
      h.links.push(link);
      const leaf = switches.get(link.b);
      if (leaf) leaf.links.push(link);
    } else {
      const a = switches.get(link.a);
      const b = switches.get(link.b);
      if (a) a.links.push(link);
      if (b) b.links.push(link);
    }
  }
  for (const h of hosts.values()) {
    h.ports.sort((x, y) => naturalCompare(x.port, y.port));
    h.home = h.ports[0].leaf;
  }
  const groupOf = new Map();
  for (const g of P.layout.groups) for (const s of g.switches) groupOf.set(s, g.id);
  const rowNodeOf = new Map();
  for (const row of P.layout.rows) {
    for (const b of row.blocks) {
      const id = b.switches.length === 1 ? "s:" + b.switches[0] : "b:" + b.id;
      for (const s of b.switches) rowNodeOf.set(s, id);
    }
  }
  return {
    name: P.fabric, revision: P.revision, measured: P.measured, layout: P.layout, jobs: P.jobs,
    switches, links, byName, hosts, groupOf, rowNodeOf,
    groups: new Map(P.layout.groups.map((g) => [g.id, g])),
    blocks: new Map(P.layout.rows.flatMap((r) => r.blocks.filter((b) => b.switches.length > 1).map((b) => [b.id, b]))),
  };
}

export function defaultLevel(F) {
  return F.layout.flat ? { kind: "flat" } : { kind: "overview" };
}

export function sameLevel(a, b) {
  return a && b && a.kind === b.kind && a.id === b.id;
}

// The visible node of a switch or host at a level (null: not drawn at this level).
function resolver(F, level) {
  const switchNode = (s) => {
    const row = F.rowNodeOf.get(s);
    if (row) return row;
    const g = F.groupOf.get(s);
    if (g === undefined) return null;
    if (level.kind === "overview") return "g:" + g;
    if (level.kind === "group") return g === level.id ? "s:" + s : null;
    return "s:" + s;
  };
  const hostNode = (h) => {
    const leaf = switchNode(h.home);
    if (!leaf) return null;
    return leaf.startsWith("s:") ? "h:" + h.name : leaf;
  };
  return { switchNode, hostNode };
}

function placeRow(nodes, y, h, maxW) {
  const slot = (WIDTH - 2 * MARGIN) / Math.max(1, nodes.length);
  nodes.forEach((n, i) => {
    n.x = MARGIN + slot * (i + 0.5);
    n.y = y + h / 2;
    n.w = Math.max(6, Math.min(maxW, slot * 0.86));
    n.h = h;
    n.slot = slot;
  });
}

function switchNodeOf(F, name) {
  const s = F.switches.get(name);
  return { id: "s:" + name, kind: "switch", label: name, role: s ? s.role : "", switches: [name], hosts: [], internal: [] };
}

function blockNode(b, role) {
  const id = b.switches.length === 1 ? "s:" + b.switches[0] : "b:" + b.id;
  const kind = b.switches.length === 1 ? "switch" : "block";
  return { id, kind, label: b.label, role, switches: b.switches, hosts: [], internal: [], blockId: b.id };
}

function groupNode(F, g) {
  const hosts = [];
  for (const h of F.hosts.values()) if (F.groupOf.get(h.home) === g.id) hosts.push(h.name);
  return { id: "g:" + g.id, kind: "group", label: g.label, groupId: g.id, switches: g.switches, hosts, internal: [] };
}

// Rows of nodes, top to bottom, for a level.
function rowsOf(F, level) {
  const rows = [];
  const layoutRows = F.layout.rows.map((r) => {
    const count = r.blocks.reduce((n, b) => n + b.switches.length, 0);
    const label = r.blocks.length < count ? `${r.role}s (${count} in ${r.blocks.length} blocks)` : r.role + "s";
    return { label, kind: "switch", nodes: r.blocks.map((b) => blockNode(b, r.role)) };
  });
  if (level.kind === "flat") {
    rows.push(...layoutRows);
  } else if (level.kind === "overview") {
    const groups = F.layout.groups.map((g) => groupNode(F, g));
    const label = F.layout.group_roles.includes("spine") ? "pods" : "leaf groups";
    if (groups.length > SPLIT_GROUPS) {
      const half = Math.ceil(groups.length / 2);
      rows.push({ label, kind: "group", nodes: groups.slice(0, half) });
      rows.push(...layoutRows);
      rows.push({ label, kind: "group", nodes: groups.slice(half) });
    } else {
      rows.push(...layoutRows, { label, kind: "group", nodes: groups });
    }
  } else {
    const g = F.groups.get(level.id);
    rows.push(...layoutRows);
    for (const role of F.layout.group_roles) {
      const names = g ? g.switches.filter((s) => F.switches.get(s)?.role === role) : [];
      if (names.length) rows.push({ label: role + "s", kind: "switch", nodes: names.map((s) => switchNodeOf(F, s)) });
    }
  }
  return rows;
}

// Hosts under their home leaves, in a small grid per leaf.
function placeHosts(F, leafNodes, hostNode, y) {
  const nodes = [];
  let depth = 0;
  const byLeaf = new Map();
  for (const h of F.hosts.values()) {
    if (!hostNode(h) || !hostNode(h).startsWith("h:")) continue;
    if (!byLeaf.has(h.home)) byLeaf.set(h.home, []);
    byLeaf.get(h.home).push(h);
  }
  const most = Math.max(1, ...[...byLeaf.values()].map((l) => l.length));
  const slot = leafNodes.length ? leafNodes[0].slot : 100;
  const size = Math.max(HOST_MIN, Math.min(HOST_MAX, (slot * 0.9) / most - HOST_GAP));
  const step = size + HOST_GAP;
  for (const leaf of leafNodes) {
    const mine = (byLeaf.get(leaf.switches[0]) || []).sort((p, q) => naturalCompare(p.name, q.name));
    if (!mine.length) continue;
    const cols = Math.max(1, Math.floor((leaf.slot * 0.9) / step));
    const used = Math.min(cols, mine.length);
    const x0 = leaf.x - (used * step - HOST_GAP) / 2;
    mine.forEach((h, k) => {
      const r = Math.floor(k / cols);
      const c = k % cols;
      depth = Math.max(depth, r + 1);
      nodes.push({
        id: "h:" + h.name, kind: "host", label: h.name, switches: [], hosts: [h.name], internal: [],
        x: x0 + c * step + size / 2, y: y + r * step + size / 2, w: size, h: size,
      });
    });
  }
  return { nodes, height: depth * step };
}

const views = new WeakMap(); // fabric state -> level key -> view: going back to a level is free

// The positioned nodes and aggregated edges of one level (cached per fabric state).
export function buildView(F, level) {
  const key = level.kind + ":" + (level.id || "");
  let kept = views.get(F);
  if (!kept) views.set(F, (kept = new Map()));
  if (!kept.has(key)) kept.set(key, makeView(F, level));
  return kept.get(key);
}

function makeView(F, level) {
  const { switchNode, hostNode } = resolver(F, level);
  const rows = rowsOf(F, level);
  const nodes = new Map();
  const rowLabels = [];
  const showHosts = level.kind !== "overview" && F.hosts.size > 0;
  const heights = rows.map((row) => (row.kind === "group" ? GROUP_H : SWITCH_H));
  const gaps = rows.length - 1 + (showHosts ? 1 : 0);
  const gap = Math.max(ROW_GAP_MIN, Math.min(ROW_GAP_MAX,
    (TARGET_H - heights.reduce((a, b) => a + b, 0) - (showHosts ? 40 : 0)) / Math.max(1, gaps)));
  let y = 16;
  let leafNodes = [];
  rows.forEach((row, k) => {
    const h = heights[k];
    placeRow(row.nodes, y, h, row.kind === "group" ? 150 : 96);
    for (const n of row.nodes) nodes.set(n.id, n);
    rowLabels.push({ y: y - 3, label: row.label });
    if (row.nodes.some((n) => n.role === "leaf")) leafNodes = row.nodes;
    y += h + (k < rows.length - 1 ? gap : 0);
  });
  for (const n of nodes.values()) {
    if (n.kind === "switch" || n.kind === "block") n.touching = n.switches.flatMap((s) => F.switches.get(s)?.links || []);
  }
  if (showHosts && leafNodes.length) {
    const top = y + Math.min(gap, 60);
    const placed = placeHosts(F, leafNodes, hostNode, top);
    for (const n of placed.nodes) nodes.set(n.id, n);
    if (placed.nodes.length) rowLabels.push({ y: top - 3, label: "hosts" });
    y = top + placed.height + 12;
  } else {
    y += 16;
  }
  const edges = new Map();
  for (const link of F.links) {
    let na;
    let nb;
    if (link.host) {
      const h = F.hosts.get(link.a.split(":")[0]);
      na = h ? hostNode(h) : null;
      nb = switchNode(link.b);
    } else {
      na = switchNode(link.a);
      nb = switchNode(link.b);
    }
    if (!na || !nb || !nodes.has(na) || !nodes.has(nb)) continue;
    if (na === nb) {
      nodes.get(na).internal.push(link);
      continue;
    }
    const key = na < nb ? na + "|" + nb : nb + "|" + na;
    let e = edges.get(key);
    if (!e) {
      const [p, q] = na < nb ? [nodes.get(na), nodes.get(nb)] : [nodes.get(nb), nodes.get(na)];
      const [top, bottom] = p.y <= q.y ? [p, q] : [q, p];
      e = {
        key, from: top.id, to: bottom.id, links: [],
        x1: top.x, y1: top.y + top.h / 2, x2: bottom.x, y2: bottom.y - bottom.h / 2,
      };
      edges.set(key, e);
    }
    e.links.push(link);
  }
  return { level, width: WIDTH, height: Math.max(y, 200), nodes: [...nodes.values()], edges: [...edges.values()], rowLabels };
}

// The largest value of a metric over links (null when none has one).
export function maxValue(metric, links) {
  let best = null;
  for (const l of links) {
    const v = metric.value(l);
    if (v !== null && (best === null || v > best)) best = v;
  }
  return best;
}

export function stateSummary(links) {
  let down = 0;
  let drained = 0;
  for (const l of links) {
    if (l.state === "down") down++;
    else if (l.state === "drained") drained++;
  }
  return { down, drained, all: links.length };
}

// Names a highlight can hold: links, switches, hosts. `node` matches when any member does.
export function nodeHit(node, hl) {
  if (!hl) return false;
  if (node.switches.some((s) => hl.switches.has(s))) return true;
  if (node.hosts.some((h) => hl.hosts.has(h))) return true;
  return node.internal.some((l) => hl.links.has(l.name));
}

export function edgeHit(edge, hl) {
  return !!hl && edge.links.some((l) => hl.links.has(l.name));
}
