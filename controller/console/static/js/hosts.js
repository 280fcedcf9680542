// Hosts: isolated ones first, each with the reason and the alarm that isolated it; isolate and
// release for the roles that may.
import { useState } from "../vendor/hooks.module.js";
import { Badge, fmtDateTime, html, naturalCompare } from "./ui.js";

const SHOWN = 200;

export function HostsPanel({ hosts, alarmsById, auth, actions, onSelectHost, onAlarm }) {
  const may = auth.may.includes("hosts");
  const why = may ? "" : `role ${auth.role} may not isolate or release hosts`;
  const [filter, setFilter] = useState("");
  const all = [...hosts].filter((h) => !filter || h.name.includes(filter)).sort((a, b) => (a.state === "isolated" ? 0 : 1) - (b.state === "isolated" ? 0 : 1) || naturalCompare(a.name, b.name));
  const rows = all.slice(0, SHOWN);
  const isolated = hosts.filter((h) => h.state === "isolated").length;
  return html`<div class="hosts">
    <p class="muted"><input class="filter" placeholder="filter hosts" value=${filter} onInput=${(e) => setFilter(e.target.value.trim())} />
      ${hosts.length} hosts · ${isolated} isolated${!may ? ` · ${why}` : ""}${all.length > SHOWN ? ` · first ${SHOWN} of ${all.length} shown` : ""}</p>
    <table class="grid" data-testid="hosts"><thead><tr><th>host</th><th>state</th><th>reason</th><th>alarm</th><th>since</th><th></th></tr></thead>
      <tbody>${rows.map((h) => {
        const alarm = h.alarm ? alarmsById.get(h.alarm) : null;
        return html`<tr key=${h.name} data-host=${h.name} data-state=${h.state}>
          <td><button class="link" onClick=${() => onSelectHost(h.name)}>${h.name}</button></td>
          <td><${Badge} kind=${"host-" + h.state}>${h.state}<//></td><td>${h.reason || ""}</td>
          <td>${h.alarm ? html`<button class="link" data-testid="host-alarm-link" onClick=${() => onAlarm(h.alarm)}>${h.alarm}</button>
            ${alarm ? html` <span class="muted">${alarm.kind}, ${alarm.state}</span>` : ""}` : ""}</td>
          <td>${h.changed_at_us ? fmtDateTime(h.changed_at_us) : ""}</td>
          <td>${h.state === "isolated"
            ? html`<button disabled=${!may} title=${why} onClick=${() => actions.release(h.name)}>Release</button>`
            : html`<button class="danger" disabled=${!may} title=${why} onClick=${() => actions.isolate(h.name)}>Isolate</button>`}</td>
        </tr>`;
      })}</tbody></table>
  </div>`;
}
