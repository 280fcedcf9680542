// Alarms: a timeline of incidents (open ones run to now), the list, and the selected alarm's
// evidence, suspects (highlighted on the map) and the hosts it isolated; acknowledge and
// resolve for the roles that may.
import { Badge, fmtDateTime, fmtTime, html } from "./ui.js";

const KIND_COLOURS = { comm_hang: "#e8413b", noncomm_hang: "#c02bb0", comm_slow: "#f08c2e", noncomm_slow: "#f0c419" };
const MIN_SPAN_MS = 10 * 60_000;
const MAX_SPAN_MS = 24 * 3_600_000;

function Timeline({ alarms, selected, onSelect, now }) {
  const W = 1000;
  const lanes = [];
  // From a little before the oldest alarm still open (or the newest alarm), at least 10 min.
  const open = alarms.filter((a) => a.state !== "resolved").map((a) => a.opened_at_us / 1000);
  const anchor = open.length ? Math.min(...open) : alarms.length ? alarms[0].opened_at_us / 1000 : now;
  const start = Math.max(now - MAX_SPAN_MS, Math.min(now - MIN_SPAN_MS, anchor - (now - anchor) * 0.15));
  const sx = (t) => ((Math.max(t, start) - start) / (now - start)) * W;
  const shown = alarms.filter((a) => (a.resolved_at_us ? a.resolved_at_us / 1000 : now) >= start).slice().reverse();
  const bars = shown.map((a) => {
    const t0 = a.opened_at_us / 1000;
    const t1 = a.resolved_at_us ? a.resolved_at_us / 1000 : now;
    let lane = lanes.findIndex((end) => end < t0);
    if (lane < 0) { lane = lanes.length; lanes.push(0); }
    lanes[lane] = t1 + (now - start) / 50;
    return { a, x: sx(t0), w: Math.max(4, sx(t1) - sx(t0)), lane };
  });
  const H = 14 + Math.max(1, lanes.length) * 12;
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => start + f * (now - start));
  return html`<svg class="timeline" viewBox=${`0 0 ${W} ${H}`} data-testid="timeline">
    ${ticks.map((t) => html`<g class="tick"><line x1=${sx(t)} x2=${sx(t)} y1="0" y2=${H - 12} />
      <text x=${Math.min(W - 48, Math.max(2, sx(t) - 14))} y=${H - 2}>${fmtTime(t * 1000)}</text></g>`)}
    ${bars.map(({ a, x, w, lane }) => html`<rect class=${"bar " + a.state + (selected === a.id ? " selected" : "")}
        data-alarm=${a.id} x=${x} y=${2 + lane * 12} width=${w} height="9" rx="2" fill=${KIND_COLOURS[a.kind] || "#888"}
        onClick=${() => onSelect(a.id)}><title>${a.id} ${a.kind} (${a.state}) ${a.job}</title></rect>`)}
  </svg>`;
}

function Suspects({ alarm, onShow }) {
  return html`<span class="suspects">${alarm.suspects.map((s, k) => html`<button key=${k} class="chip" data-testid="suspect"
      title=${k === 0 ? "most likely" : ""} onClick=${(ev) => { ev.stopPropagation(); onShow(alarm, s); }}>${s.kind}: ${s.name}</button>`)}</span>`;
}

function Evidence({ evidence }) {
  const entries = Object.entries(evidence || {}).filter(([k]) => k !== "summary");
  return html`<div class="evidence" data-testid="evidence">
    <p class="summary">${evidence && evidence.summary}</p>
    ${entries.length > 0 && html`<dl>${entries.map(([k, v]) => html`<dt>${k.replaceAll("_", " ")}</dt>
      <dd>${typeof v === "object" ? JSON.stringify(v) : String(v)}</dd>`)}</dl>`}
  </div>`;
}

function AlarmDetail({ alarm, hosts, auth, actions, onShow, onSelectHost }) {
  const may = auth.may.includes("alarms");
  const why = may ? "" : `role ${auth.role} may not acknowledge or resolve alarms`;
  const isolated = hosts.filter((h) => h.alarm === alarm.id);
  return html`<div class="alarmdetail" data-testid="alarm-detail" data-alarm=${alarm.id} data-state=${alarm.state}>
    <h4>${alarm.id} · ${alarm.kind} <${Badge} kind=${"alarm-" + alarm.state}>${alarm.state}<//></h4>
    <p>job <b>${alarm.job}</b>${alarm.comm ? ` · comm ${alarm.comm}` : ""}${alarm.seq !== null && alarm.seq !== undefined ? ` · seq ${alarm.seq}` : ""}
      · opened ${fmtDateTime(alarm.opened_at_us)}${alarm.acknowledged_at_us ? ` · acknowledged ${fmtTime(alarm.acknowledged_at_us)}` : ""}
      ${alarm.resolved_at_us ? ` · resolved ${fmtTime(alarm.resolved_at_us)} by ${alarm.resolved_by}` : ""}</p>
    <p>Suspects, most likely first (shown on the map): <${Suspects} alarm=${alarm} onShow=${onShow} /></p>
    <${Evidence} evidence=${alarm.evidence} />
    ${isolated.length > 0 && html`<p data-testid="isolated-by">Isolated by this alarm: ${isolated.map((h) => html`<button class="chip host"
        onClick=${() => onSelectHost(h.name)}>${h.name}</button>`)}</p>`}
    <div class="actions">
      <button disabled=${!may || alarm.state !== "open"} title=${why} data-testid="alarm-ack" onClick=${() => actions.acknowledge(alarm)}>Acknowledge</button>
      <button disabled=${!may || alarm.state === "resolved"} title=${why} data-testid="alarm-resolve" onClick=${() => actions.resolve(alarm)}>Resolve</button>
      ${!may && html`<span class="muted">${why}</span>`}
    </div>
  </div>`;
}

export function AlarmsPanel({ alarms, hosts, auth, actions, selected, onSelect, onShow, onSelectHost, now }) {
  const alarm = alarms.find((a) => a.id === selected);
  return html`<div class="alarms">
    <${Timeline} alarms=${alarms} selected=${selected} onSelect=${onSelect} now=${now} />
    <div class="cols">
      <div class="alarmlist">
        ${alarms.length === 0 ? html`<p class="muted">No alarms.</p>` : html`<table class="grid" data-testid="alarms"><thead><tr>
          <th>id</th><th>state</th><th>kind</th><th>job</th><th>opened</th><th>suspects</th><th>summary</th></tr></thead>
          <tbody>${alarms.map((a) => html`<tr key=${a.id} data-alarm=${a.id} class=${"clickable" + (a.id === selected ? " selected" : "")}
              onClick=${() => onSelect(a.id)}>
            <td>${a.id}</td><td><${Badge} kind=${"alarm-" + a.state}>${a.state}<//></td><td>${a.kind}</td><td>${a.job}</td>
            <td>${fmtTime(a.opened_at_us)}</td><td><${Suspects} alarm=${{ ...a, suspects: a.suspects.slice(0, 2) }} onShow=${onShow} /></td>
            <td class="summary">${a.evidence && a.evidence.summary}</td></tr>`)}</tbody></table>`}
      </div>
      ${alarm && html`<${AlarmDetail} alarm=${alarm} hosts=${hosts} auth=${auth} actions=${actions} onShow=${onShow} onSelectHost=${onSelectHost} />`}
    </div>
  </div>`;
}

// The map names an alarm's suspects stand for: a host, a NIC port (its host link), a link,
// or a rank (its host, from the job's ranks).
export function suspectHighlight(alarm, jobs, F, only) {
  const links = new Set();
  const switches = new Set();
  const hosts = new Set();
  for (const s of only ? [only] : alarm.suspects) {
    if (s.kind === "link") links.add(s.name);
    else if (s.kind === "host") hosts.add(s.name);
    else if (s.kind === "nic_port") {
      hosts.add(s.name.split(":")[0]);
      if (F) for (const l of F.links) if (l.host && l.a === s.name) links.add(l.name);
    } else if (s.kind === "rank") {
      const job = jobs.find((j) => j.name === alarm.job);
      const r = job && job.ranks.find((x) => String(x.rank) === s.name);
      if (r) hosts.add(r.host);
    }
  }
  return { kind: "suspect", label: `${alarm.id} suspects`, links, switches, hosts };
}
