// Jobs: every job's plan summary side by side (c4, the proven lower bound, ECMP), then for the
// selected job its per-link load table and its connections; a connection's flows are listed
// and their paths highlighted on the map.
import { useEffect, useState } from "../vendor/hooks.module.js";
import { encodeName } from "./api.js";
import { Badge, fmtAgo, fmtGbps, fmtUtil, html } from "./ui.js";

const RECENT_MS = 60_000;

function pct(x) {
  return x === null || x === undefined ? "—" : `${Math.round(x * 100)}%`;
}

function JobRow({ job, selected, changed, onSelect }) {
  const p = job.plan || {};
  const recent = changed && Date.now() - changed.at < RECENT_MS;
  return html`<tr class=${"clickable" + (selected ? " selected" : "")} data-job=${job.name} onClick=${() => onSelect(job.name)}>
    <td>${job.name}</td>
    <td><${Badge} kind=${"job-" + job.status}>${job.status}<//>${job.flagged ? html` <${Badge} kind="warn">flagged<//>` : ""}</td>
    <td class="num">${job.ranks.length}</td><td class="num">${p.flows ?? "—"}</td>
    <td class="num">${fmtUtil(p.max_link_utilization)}</td><td class="num">${fmtUtil(p.lower_bound)}</td>
    <td class="num">${fmtUtil(p.ecmp_expected_max_utilization)}</td>
    <td class="num">${pct(p.predicted_busbw_fraction)}</td><td class="num">${pct(p.ecmp_predicted_busbw_fraction)}</td>
    <td class=${"num" + (recent ? " changed" : "")} data-testid="job-version" title=${recent ? `re-planned ${fmtAgo(Date.now() - changed.at)}: v${changed.from} → v${changed.to}` : ""}>
      v${job.version}${recent ? " ↻" : ""}</td>
  </tr>`;
}

function Summary({ job }) {
  const p = job.plan;
  if (!p) return html`<p class="muted">${job.status === "failed" ? `Plan failed: ${job.error || "no reason given"}` : "No plan yet."}</p>`;
  return html`<div class="cards" data-testid="plan-summary">
    <div class="card c4"><h5>c4 plan</h5><div class="big" data-testid="c4-max">${fmtUtil(p.max_link_utilization)}</div>
      <div class="muted">max link utilization</div><div class="big2">${pct(p.predicted_busbw_fraction)}</div>
      <div class="muted">predicted bus bandwidth (of ideal)</div></div>
    <div class="card bound"><h5>proven lower bound</h5><div class="big" data-testid="bound">${fmtUtil(p.lower_bound)}</div>
      <div class="muted">no single-path plan does better</div>
      <div class="big2" data-testid="gap">${p.max_link_utilization <= p.lower_bound + 1e-9 ? "optimal" : `+${fmtUtil(p.max_link_utilization - p.lower_bound)}`}</div>
      <div class="muted">c4 plan above the bound</div></div>
    <div class="card ecmp"><h5>ECMP (expected)</h5><div class="big" data-testid="ecmp-max">${fmtUtil(p.ecmp_expected_max_utilization)}</div>
      <div class="muted">max link utilization</div><div class="big2">${pct(p.ecmp_predicted_busbw_fraction)}</div>
      <div class="muted">predicted bus bandwidth (of ideal)</div></div>
    <div class="card meta"><h5>plan</h5><div>${p.flows} flows · v${job.version}</div><div class="muted">${p.solver}</div>
      <div class="muted">${p.solve_ms} ms${p.moved_flows ? ` · ${p.moved_flows} moved last time` : ""}</div></div>
  </div>`;
}

function LinkTable({ rows, onSelectLink }) {
  const [all, setAll] = useState(false);
  const shown = all ? rows : rows.slice(0, 12);
  return html`<table class="grid" data-testid="job-links"><thead><tr><th>link</th><th>direction</th><th>job Gb/s</th><th>total Gb/s</th>
      <th>flows</th><th>utilization</th></tr></thead>
    <tbody>${shown.map((r) => html`<tr key=${r.name + r.direction} class="clickable" onClick=${() => onSelectLink(r.name)}>
      <td class="name">${r.name}${r.state !== "up" ? html` <${Badge} kind=${"state-" + r.state}>${r.state}<//>` : ""}</td>
      <td class="name">${r.from} → ${r.to}</td><td class="num">${fmtGbps(r.job_gbps)}</td><td class="num">${fmtGbps(r.planned_gbps)}</td>
      <td class="num">${r.job_flows}/${r.flows}</td><td class="num">${fmtUtil(r.planned_utilization)}</td></tr>`)}</tbody></table>
    ${rows.length > 12 && html`<button class="link" data-testid="show-all-links" onClick=${() => setAll(!all)}>${all ? "show fewer" : `show all ${rows.length}`}</button>`}`;
}

function Connections({ conns, active, onPick }) {
  return html`<div class="conns" data-testid="connections">
    ${conns.map((c) => {
      const key = `${c.src_rank}->${c.dst_rank}`;
      return html`<button key=${key} class=${"conn" + (active === key ? " active" : "")} data-conn=${key}
        onClick=${() => onPick(active === key ? null : c)}>r${c.src_rank} → r${c.dst_rank}
        <span class="muted">${c.src_host} → ${c.dst_host} · ${c.flows.length}</span></button>`;
    })}
  </div>`;
}

function Flows({ conn }) {
  return html`<table class="grid" data-testid="flows"><thead><tr><th>ch</th><th>qp</th><th>from port</th><th>UDP sport</th>
      <th>weight</th><th>path</th></tr></thead>
    <tbody>${conn.flows.map((f) => html`<tr><td class="num">${f.channel}</td><td class="num">${f.qp}</td><td class="name">${f.src_port}</td>
      <td class="num">${f.udp_sport ?? "—"}</td><td class="num">${f.weight === null ? "—" : f.weight.toFixed(2)}</td>
      <td class="name path">${f.path.join(" › ")}</td></tr>`)}</tbody></table>`;
}

// Names on a connection's paths, as a map highlight.
function pathHighlight(job, conn) {
  const links = new Set();
  const switches = new Set();
  const hosts = new Set();
  for (const f of conn.flows) {
    f.links.forEach((l) => links.add(l));
    for (const node of f.path) {
      if (node.includes(":")) hosts.add(node.split(":")[0]);
      else switches.add(node);
    }
  }
  return { kind: "path", label: `${job} r${conn.src_rank} → r${conn.dst_rank}`, links, switches, hosts };
}

function JobDetail({ job, api, onSelectLink, onHighlight, highlight }) {
  const [links, setLinks] = useState(null);
  const [conns, setConns] = useState(null);
  const [error, setError] = useState(null);
  const [conn, setConn] = useState(null);
  useEffect(() => {
    let live = true;
    Promise.all([api.get(`/v1/jobs/${encodeName(job.name)}/links`), api.get(`/console/api/jobs/${encodeName(job.name)}/connections`)])
      .then(([l, c]) => { if (live) { setLinks(l.links); setConns(c.connections); setError(null); } })
      .catch((e) => live && setError(e.message));
    return () => { live = false; };
  }, [job.name, job.version, job.status]);
  useEffect(() => {
    // A re-plan changes paths: re-draw the highlighted connection's from the new plan.
    if (!conn || !conns) return;
    const fresh = conns.find((c) => c.src_rank === conn.src_rank && c.dst_rank === conn.dst_rank);
    if (fresh && fresh !== conn) { setConn(fresh); onHighlight(pathHighlight(job.name, fresh)); }
  }, [conns]);
  const pick = (c) => {
    setConn(c);
    onHighlight(c ? pathHighlight(job.name, c) : null);
  };
  const active = conn && highlight && highlight.kind === "path" ? `${conn.src_rank}->${conn.dst_rank}` : null;
  return html`<div class="jobdetail" data-testid="job-detail" data-job=${job.name}>
    <${Summary} job=${job} />
    ${error && html`<p class="error">${error}</p>`}
    <div class="cols">
      <div><h4>Per-link load (most utilized first)</h4>${links ? html`<${LinkTable} rows=${links} onSelectLink=${onSelectLink} />` : html`<p class="muted">loading…</p>`}</div>
      <div><h4>Connections ${active ? html`<span class="muted">· paths of ${highlight.label} on the map</span>` : html`<span class="muted">· pick one to see its flows on the map</span>`}</h4>
        ${conns ? html`<${Connections} conns=${conns} active=${active} onPick=${pick} />` : html`<p class="muted">loading…</p>`}
        ${conn && active && html`<${Flows} conn=${conn} />`}</div>
    </div>
  </div>`;
}

export function JobsPanel({ jobs, api, changed, selected, onSelectJob, onSelectLink, onHighlight, highlight }) {
  const job = jobs.find((j) => j.name === selected);
  if (!jobs.length) return html`<p class="muted">No jobs. Schedulers register them with POST /v1/jobs.</p>`;
  return html`<div class="jobs">
    <table class="grid" data-testid="jobs"><thead><tr><th>job</th><th>status</th><th>ranks</th><th>flows</th>
      <th title="max link utilization of the c4 plan">c4 max util</th><th title="proven lower bound on the max utilization">bound</th>
      <th title="expected max utilization under plain ECMP">ECMP max util</th><th title="predicted bus bandwidth, fraction of ideal">c4 busbw</th>
      <th>ECMP busbw</th><th>version</th></tr></thead>
      <tbody>${jobs.map((j) => html`<${JobRow} key=${j.name} job=${j} selected=${j.name === selected} changed=${changed[j.name]}
        onSelect=${onSelectJob} />`)}</tbody></table>
    ${job && html`<${JobDetail} key=${job.name} job=${job} api=${api} onSelectLink=${onSelectLink} onHighlight=${onHighlight} highlight=${highlight} />`}
  </div>`;
}
