// The inspector: details of what is selected on the map (a link, an aggregated edge, a switch,
// a group, a host), a short history chart, and the actions the user's role may take on it.
import { useEffect, useState } from "../vendor/hooks.module.js";
import { LineChart } from "./chart.js";
import { encodeName } from "./api.js";
import { METRICS, seriesValue } from "./metrics.js";
import { maxValue, stateSummary } from "./model.js";
import { Badge, fmtGbps, fmtRate, fmtUtil, html } from "./ui.js";

const DIR_COLOURS = ["#4fb3ff", "#f0a04b"];

function fmtV(metric, v) {
  if (v === null || v === undefined) return "—";
  return metric.unit === "rate" ? fmtRate(v) : fmtUtil(v);
}

function StateBadge({ state }) {
  return html`<${Badge} kind=${"state-" + state}>${state}<//>`;
}

// History of the selection as the console polled it (`history`: [{t, values}]), or, for a
// link's measured metrics, the controller's own series.
function historySeries(history, metric, labels) {
  const n = labels.length;
  return labels.map((label, d) => ({
    label, colour: DIR_COLOURS[d],
    points: history.map((s) => [s.t, s.values[metric.key] ? s.values[metric.key][Math.min(d, n - 1)] : null]),
  }));
}

function LinkRows({ links, metric, onSelect, limit = 40 }) {
  const rows = [...links].sort((p, q) => (metric.value(q) ?? -1) - (metric.value(p) ?? -1)).slice(0, limit);
  return html`<table class="mini"><thead><tr><th>link</th><th>state</th><th title="a→b / b→a">${metric.label}</th></tr></thead>
    <tbody>${rows.map((l) => html`<tr key=${l.name} class="clickable" onClick=${() => onSelect({ kind: "link", name: l.name })}>
      <td class="name">${l.name}</td><td><${StateBadge} state=${l.state} /></td>
      <td class="num">${fmtV(metric, metric.dir(l, 0))} / ${fmtV(metric, metric.dir(l, 1))}</td></tr>`)}</tbody></table>
    ${links.length > limit && html`<p class="muted">${links.length - limit} more not shown</p>`}`;
}

function LinkActions({ link, auth, actions }) {
  const may = auth.may.includes("links");
  const why = may ? "" : `role ${auth.role} may not change links (admin only)`;
  const btn = (state, label, cls) => html`<button class=${cls} disabled=${!may || link.state === state} title=${why}
      data-testid=${"link-" + state} onClick=${() => actions.setLinkState(link, state)}>${label}</button>`;
  return html`<div class="actions">
    ${btn("up", "Bring up", "")} ${btn("drained", "Drain", "")} ${btn("down", "Take down", "danger")}
    ${!may && html`<p class="muted" data-testid="role-note">${why}</p>`}
  </div>`;
}

function LinkDetails({ name, F, metric, api, auth, actions, history, onSelect }) {
  const link = F.byName.get(name);
  const [detail, setDetail] = useState(null);
  const [series, setSeries] = useState(null);
  useEffect(() => {
    let live = true;
    api.get(`/v1/links/${encodeName(name)}`).then((d) => live && setDetail(d)).catch(() => live && setDetail(null));
    return () => { live = false; };
  }, [name, F.revision, JSON.stringify(F.jobs)]);
  const measuredNow = !!(link && link.measured);
  useEffect(() => {
    // Only a link with a measurement has a series worth asking for (and no 404s otherwise).
    if (!measuredNow) { setSeries(null); return undefined; }
    let live = true;
    api.get(`/v1/links/${encodeName(name)}/series?window_s=600`)
      .then((s) => live && setSeries(s))
      .catch(() => live && setSeries(null)); // no series: "no measurements"
    return () => { live = false; };
  }, [name, F, measuredNow]);
  if (!link) return html`<p class="muted">Link ${name} is not in the fabric any more.</p>`;
  const dirs = [`${link.a} → ${link.b}`, `${link.b} → ${link.a}`];
  const load = detail && detail.load ? [detail.load.ab, detail.load.ba] : null;
  const hasMeasured = !!link.measured;
  let chart;
  if (!metric.measured) {
    chart = html`<${LineChart} testid="link-chart" series=${historySeries(history, metric, dirs)} format=${fmtUtil} minMax=${1}
      empty="collecting…" />`;
  } else {
    const pts = (list) => (list || []).map((m) => [m.t_us / 1000, seriesValue(metric.key, m)]);
    const ser = series && (series.ab || series.ba) ? [
      { label: dirs[0], colour: DIR_COLOURS[0], points: pts(series.ab) },
      { label: dirs[1], colour: DIR_COLOURS[1], points: pts(series.ba) }] : [];
    chart = html`<${LineChart} testid="link-chart" series=${ser} format=${metric.unit === "rate" ? fmtRate : fmtUtil}
      minMax=${metric.unit === "util" ? 1 : 0} empty="no measurements" />`;
  }
  return html`<div class="details" data-testid="link-details" data-link=${name} data-state=${link.state}>
    <h3 class="name">${name}</h3>
    <p><${StateBadge} state=${link.state} /> ${link.capacity} Gb/s per direction ${link.host ? "· host port" : ""}</p>
    <table class="mini dirs"><thead><tr><th></th><th>planned Gb/s</th><th>util</th><th>flows</th>
      <th>measured</th><th>ECN/s</th><th>PFC/s</th></tr></thead>
      <tbody>${[0, 1].map((d) => {
        const m = link.measured && link.measured[d];
        return html`<tr data-testid=${"dir-" + d}><td class="name">${dirs[d]}</td>
          <td class="num">${load ? fmtGbps(load[d].planned_gbps) : "…"}</td>
          <td class="num">${fmtUtil(link.planned[d])}</td><td class="num" data-testid=${"flows-" + d}>${link.flows[d]}</td>
          ${m ? html`<td class="num">${fmtUtil(m[0])}</td><td class="num">${fmtRate(m[1])}</td><td class="num">${fmtRate(m[2])}${m[3] ? " ⚠" : ""}</td>`
            : html`<td colspan="3" class="muted nodata">no measurements</td>`}</tr>`;
      })}</tbody></table>
    ${!hasMeasured && metric.measured && html`<p class="muted" data-testid="no-measurements">No measurements for this link: no switch agent reports its ports.</p>`}
    <h4>${metric.label}, history</h4>
    ${chart}
    ${detail && detail.jobs && detail.jobs.length > 0 && html`<h4>Jobs on this link</h4>
      <table class="mini"><thead><tr><th>job</th><th>a→b Gb/s</th><th>b→a Gb/s</th></tr></thead>
      <tbody>${detail.jobs.map((j) => html`<tr><td>${j.job}</td><td class="num">${fmtGbps(j.ab.planned_gbps)}</td>
        <td class="num">${fmtGbps(j.ba.planned_gbps)}</td></tr>`)}</tbody></table>`}
    <div class="ends">
      <button class="link" onClick=${() => onSelect(link.host ? { kind: "host", name: link.a.split(":")[0] } : { kind: "switch", name: link.a })}>${link.a}</button>
      ↔ <button class="link" onClick=${() => onSelect({ kind: "switch", name: link.b })}>${link.b}</button>
    </div>
    <${LinkActions} link=${link} auth=${auth} actions=${actions} />
  </div>`;
}

function SwitchDetails({ name, F, metric, history, onSelect }) {
  const s = F.switches.get(name);
  if (!s) return html`<p class="muted">Switch ${name} is not in the fabric any more.</p>`;
  const st = stateSummary(s.links);
  const fabricLinks = s.links.filter((l) => !l.host);
  const hostLinks = s.links.filter((l) => l.host);
  return html`<div class="details" data-testid="switch-details">
    <h3>${name}</h3>
    <p>${s.role}${s.pod !== null && s.pod !== undefined ? ` · pod ${s.pod}` : ""} · ${fabricLinks.length} fabric links${hostLinks.length ? ` · ${hostLinks.length} host ports` : ""}
      ${st.down ? html` · <span class="warn">${st.down} down</span>` : ""}${st.drained ? ` · ${st.drained} drained` : ""}</p>
    <h4>Busiest link, ${metric.label.toLowerCase()}</h4>
    <${LineChart} testid="switch-chart" series=${historySeries(history, metric, ["busiest link"])}
      format=${metric.unit === "rate" ? fmtRate : fmtUtil} minMax=${metric.unit === "util" ? 1 : 0}
      empty=${metric.measured ? "no measurements" : "collecting…"} />
    <h4>Links</h4>
    <${LinkRows} links=${s.links} metric=${metric} onSelect=${onSelect} />
  </div>`;
}

function HostDetails({ name, F, metric, hostStates, alarmsById, auth, actions, history, onSelect, onAlarm }) {
  const h = F.hosts.get(name);
  const st = hostStates.get(name) || { state: "active" };
  const may = auth.may.includes("hosts");
  const why = may ? "" : `role ${auth.role} may not isolate or release hosts`;
  const alarm = st.alarm ? alarmsById.get(st.alarm) : null;
  return html`<div class="details" data-testid="host-details" data-state=${st.state}>
    <h3>${name}</h3>
    <p><${Badge} kind=${"host-" + st.state}>${st.state}<//>
      ${st.reason && html` <span class="muted">${st.reason}</span>`}</p>
    ${st.alarm && html`<p>Isolated by alarm <button class="link" data-testid="host-alarm" onClick=${() => onAlarm(st.alarm)}>${st.alarm}</button>
      ${alarm ? ` (${alarm.kind}, ${alarm.state})` : ""}</p>`}
    <h4>Busiest port, ${metric.label.toLowerCase()}</h4>
    <${LineChart} testid="host-chart" series=${historySeries(history, metric, ["busiest port"])}
      format=${metric.unit === "rate" ? fmtRate : fmtUtil} minMax=${metric.unit === "util" ? 1 : 0}
      empty=${metric.measured ? "no measurements" : "collecting…"} />
    ${h && html`<h4>Ports</h4><${LinkRows} links=${h.links} metric=${metric} onSelect=${onSelect} />`}
    <div class="actions">
      ${st.state === "isolated"
        ? html`<button disabled=${!may} title=${why} data-testid="host-release" onClick=${() => actions.release(name)}>Release</button>`
        : html`<button class="danger" disabled=${!may} title=${why} data-testid="host-isolate" onClick=${() => actions.isolate(name)}>Isolate</button>`}
      ${!may && html`<p class="muted">${why}</p>`}
    </div>
  </div>`;
}

function AggregateDetails({ title, subtitle, links, metric, onSelect, children, testid }) {
  const st = stateSummary(links);
  return html`<div class="details" data-testid=${testid}>
    <h3>${title}</h3>
    <p>${subtitle}${links.length} links · busiest ${fmtV(metric, maxValue(metric, links))}
      ${st.down ? html` · <span class="warn">${st.down} down</span>` : ""}${st.drained ? ` · ${st.drained} drained` : ""}</p>
    ${children}
    <h4>Links, busiest first</h4>
    <${LinkRows} links=${links} metric=${metric} onSelect=${onSelect} limit=${25} />
  </div>`;
}

export function Inspector(props) {
  const { sel, F, metric, onSelect, onOpen } = props;
  if (!F) return null;
  if (!sel) {
    return html`<div class="details empty" data-testid="inspector-empty">
      <h3>${F.name}</h3>
      <p>${F.switches.size} switches · ${F.links.filter((l) => !l.host).length} fabric links · ${F.hosts.size} hosts</p>
      <p class="muted">Click a link, switch, ${F.layout.flat ? "or host" : "pod or group"} for its details.
        ${F.layout.flat ? "" : " Double-click a group to open it."}</p>
    </div>`;
  }
  if (sel.kind === "link") return html`<${LinkDetails} key=${sel.name} name=${sel.name} ...${props} />`;
  if (sel.kind === "switch") return html`<${SwitchDetails} key=${sel.name} name=${sel.name} ...${props} />`;
  if (sel.kind === "host") return html`<${HostDetails} key=${sel.name} name=${sel.name} ...${props} />`;
  if (sel.kind === "edge") {
    const links = sel.links.map((n) => F.byName.get(n)).filter(Boolean);
    return html`<${AggregateDetails} testid="edge-details" title=${sel.label} subtitle="" links=${links} metric=${metric} onSelect=${onSelect} />`;
  }
  if (sel.kind === "group" || sel.kind === "block") {
    const g = sel.kind === "group" ? F.groups.get(sel.id) : F.blocks.get(sel.id);
    if (!g) return html`<p class="muted">Not in the fabric any more.</p>`;
    const members = new Set(g.switches);
    const links = F.links.filter((l) => members.has(l.a) || members.has(l.b));
    return html`<${AggregateDetails} testid="group-details" title=${g.label} subtitle=${`${g.switches.length} switches · `}
        links=${links} metric=${metric} onSelect=${onSelect}>
      ${sel.kind === "group" && html`<button class="primary" data-testid="open-group" onClick=${() => onOpen(sel.id)}>Open ${g.label}</button>`}
    <//>`;
  }
  return null;
}

// What the history of a selection records at each poll: per metric, [a→b, b→a] for a link,
// [busiest] for anything else.
export function sampleOf(F, sel) {
  if (!F || !sel) return null;
  const values = {};
  if (sel.kind === "link") {
    const l = F.byName.get(sel.name);
    if (!l) return null;
    for (const m of Object.values(METRICS)) values[m.key] = [m.dir(l, 0), m.dir(l, 1)];
    return values;
  }
  let links = null;
  if (sel.kind === "switch") links = F.switches.get(sel.name)?.links;
  else if (sel.kind === "host") links = F.hosts.get(sel.name)?.links;
  if (!links) return null;
  for (const m of Object.values(METRICS)) values[m.key] = [maxValue(m, links)];
  return values;
}
