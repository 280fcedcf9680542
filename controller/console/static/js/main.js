// The console page: login, then the map with its inspector above the jobs, alarms and hosts
// tabs, all refreshed by polling (every POLL_MS, paused while the tab is hidden; the map's
// state is a conditional GET that costs a 304 while nothing changed). Every change goes
// through the REST API with the user's token; the token lives in this tab's sessionStorage
// only and is never put back on the page.
import { render } from "../vendor/preact.module.js";
import { useCallback, useEffect, useMemo, useRef, useState } from "../vendor/hooks.module.js";
import { AlarmsPanel, suspectHighlight } from "./alarms.js";
import { ApiError, TOKEN_KEY, encodeName, makeClient, whoAmI } from "./api.js";
import { HostsPanel } from "./hosts.js";
import { Inspector, sampleOf } from "./inspector.js";
import { JobsPanel } from "./jobs.js";
import { FabricMap, Legend } from "./map.js";
import { METRICS, METRIC_KEYS } from "./metrics.js";
import { buildView, defaultLevel, indexFabric } from "./model.js";
import { ConfirmDialog, Toasts, fmtAgo, html } from "./ui.js";

const POLL_MS = 2000;
const ROLE_KEY = "c4.console.session";
const HISTORY = 300;

function Login({ onLogin, message }) {
  const [error, setError] = useState(message || null);
  const [busy, setBusy] = useState(false);
  const ref = useRef(null);
  useEffect(() => { if (ref.current) ref.current.focus(); }, []);
  const submit = async (ev) => {
    ev.preventDefault();
    const token = ref.current.value.trim();
    if (!token) return;
    setBusy(true);
    try {
      const who = await whoAmI(token);
      ref.current.value = "";
      onLogin({ token, role: who.role, may: who.may });
    } catch (e) {
      ref.current.value = "";
      setError(e.status === 401 ? "That token is not valid (or it was revoked)." : e.message);
    } finally {
      setBusy(false);
    }
  };
  return html`<div class="login">
    <form onSubmit=${submit} data-testid="login">
      <h1><span class="logo">c4</span> console</h1>
      <label class="field">API token
        <input ref=${ref} type="password" name="token" autocomplete="off" spellcheck="false" data-testid="token" /></label>
      <button class="primary" type="submit" disabled=${busy}>Sign in</button>
      ${error && html`<p class="error" data-testid="login-error">${error}</p>`}
      <p class="muted">The token stays in this browser tab's session (gone when the tab closes) and is sent
        only to this controller, as a bearer token. Viewers read; schedulers and admins act as their role allows.
        Create one with <code>c4 token create --role viewer</code>.</p>
    </form>
  </div>`;
}

function LiveBadge({ live }) {
  const [, tick] = useState(0);
  useEffect(() => {
    const t = setInterval(() => tick((x) => x + 1), 1000);
    return () => clearInterval(t);
  }, []);
  if (!live.at) return html`<span class="live wait">connecting…</span>`;
  if (live.error) return html`<span class="live stale" data-testid="live" title=${live.error}>● stale · ${live.error}</span>`;
  return html`<span class="live ok" data-testid="live">● live · updated ${fmtAgo(Date.now() - live.at)}</span>`;
}

// The level showing a set of names best: the group holding the first of them, else the top.
function levelShowing(F, hl) {
  if (!F || F.layout.flat) return F ? defaultLevel(F) : null;
  const switches = [...hl.switches];
  for (const h of hl.hosts) { const host = F.hosts.get(h); if (host) switches.push(host.home); }
  for (const name of hl.links) {
    const l = F.byName.get(name);
    if (l) switches.push(l.host ? l.b : l.a, l.b);
  }
  for (const s of switches) { const g = F.groupOf.get(s); if (g !== undefined) return { kind: "group", id: g }; }
  return { kind: "overview" };
}

function one(names) {
  return { links: new Set(names.links || []), switches: new Set(names.switches || []), hosts: new Set(names.hosts || []) };
}

function Console({ auth, onLogout }) {
  const api = useMemo(() => makeClient(auth.token, (msg) => onLogout(`Signed out: ${msg}`)), [auth.token]);
  const [F, setF] = useState(null);
  const [fabricError, setFabricError] = useState(null);
  const [jobs, setJobs] = useState([]);
  const [alarms, setAlarms] = useState([]);
  const [hosts, setHosts] = useState([]);
  const [live, setLive] = useState({ at: 0, error: null });
  const [metricKey, setMetricKey] = useState("planned");
  const [level, setLevel] = useState(null);
  const [sel, setSel] = useState(null);
  const [history, setHistory] = useState([]);
  const [path, setPath] = useState(null);
  const [suspect, setSuspect] = useState(null);
  const [tab, setTab] = useState("jobs");
  const [selectedJob, setSelectedJob] = useState(null);
  const [selectedAlarm, setSelectedAlarm] = useState(null);
  const [changed, setChanged] = useState({});
  const [toasts, setToasts] = useState([]);
  const [ask, setAsk] = useState(null);
  const refs = useRef({ F: null, sel: null, jobs: null, alarms: null, seq: 0, applied: {} });
  refs.current.sel = sel;

  const toast = useCallback((text, kind = "info") => {
    const id = Math.random().toString(36).slice(2);
    setToasts((ts) => [...ts.slice(-4), { id, text, kind }]);
    setTimeout(() => setToasts((ts) => ts.filter((t) => t.id !== id)), kind === "error" ? 12000 : 7000);
  }, []);

  const refresh = useCallback(async () => {
    const r = refs.current;
    const seq = ++r.seq;
    let error = null;
    // Each answer is applied as soon as it arrives (the map does not wait for the job list)
    // and never over the answer of a later refresh.
    const take = (promise, key, apply, refused) => promise.then((value) => {
      if (seq < (r.applied[key] || 0)) return;
      r.applied[key] = seq;
      apply(value);
    }, (e) => {
      if (seq < (r.applied[key] || 0)) return;
      r.applied[key] = seq;
      if (!(refused && refused(e))) error = error || e.message;
    });
    const fabric = ({ value, changed }) => {
      if (changed) {
        if (!r.F) performance.mark("c4:fabric-received");
        const next = indexFabric(value);
        if (!r.F) performance.mark("c4:fabric-indexed");
        const prev = r.F;
        r.F = next;
        setF(next);
        if (!prev || prev.layout.flat !== next.layout.flat || prev.name !== next.name) setLevel(defaultLevel(next));
      }
      setFabricError(null);
      const values = sampleOf(r.F, r.sel);
      if (values) setHistory((h) => [...h.slice(-(HISTORY - 1)), { t: Date.now(), values }]);
    };
    const noFabric = (e) => {
      if (!(e instanceof ApiError && e.status === 404)) return false;
      setFabricError(e.message);
      return true;
    };
    const jobList = ({ jobs: list }) => {
      if (r.jobs) {
        const before = new Map(r.jobs.map((j) => [j.name, j.version]));
        const moved = {};
        for (const j of list) {
          const v = before.get(j.name);
          if (v !== undefined && j.version > v) {
            moved[j.name] = { from: v, to: j.version, at: Date.now() };
            toast(`${j.name} re-planned: v${v} → v${j.version}` +
              (j.plan ? ` · max link utilization ${j.plan.max_link_utilization.toFixed(2)}` : ""), "plan");
          }
        }
        if (Object.keys(moved).length) setChanged((c) => ({ ...c, ...moved }));
      }
      r.jobs = list;
      setJobs(list);
    };
    const alarmList = ({ alarms: list }) => {
      if (r.alarms) {
        const known = new Set(r.alarms.map((a) => a.id));
        for (const a of list) if (!known.has(a.id)) toast(`Alarm ${a.id} opened: ${a.kind} in ${a.job}`, "alarm");
      }
      r.alarms = list;
      setAlarms(list);
    };
    await Promise.all([
      take(api.poll("/console/api/fabric"), "fabric", fabric, noFabric),
      take(api.get("/v1/jobs"), "jobs", jobList),
      take(api.get("/v1/alarms?limit=200"), "alarms", alarmList),
      take(api.get("/v1/hosts"), "hosts", ({ hosts: list }) => setHosts(list)),
    ]);
    setLive({ at: Date.now(), error });
  }, [api]);

  useEffect(() => {
    let stopped = false;
    let timer = null;
    const loop = async () => {
      if (!document.hidden) await refresh();
      if (!stopped) timer = setTimeout(loop, POLL_MS);
    };
    loop();
    const onVisible = () => { if (!document.hidden) refresh(); };
    document.addEventListener("visibilitychange", onVisible);
    return () => { stopped = true; clearTimeout(timer); document.removeEventListener("visibilitychange", onVisible); };
  }, [refresh]);

  const select = useCallback((s) => {
    setSel(s);
    const values = sampleOf(refs.current.F, s);
    setHistory(values ? [{ t: Date.now(), values }] : []);
  }, []);
  const openGroup = useCallback((id) => { setLevel({ kind: "group", id }); setSel(null); }, []);
  const showOnMap = useCallback((hl, selection) => {
    const lv = levelShowing(refs.current.F, hl);
    if (lv) setLevel(lv);
    if (selection) select(selection);
  }, [select]);

  const run = useCallback(async (what, fn) => {
    try { await fn(); } catch (e) { toast(`${what} refused: ${e.message}`, "error"); }
    await refresh();
  }, [refresh, toast]);

  const actions = useMemo(() => ({
    setLinkState: (link, state) => {
      const verb = { up: "Bring up", drained: "Drain", down: "Take down" }[state];
      const flows = link.flows[0] + link.flows[1];
      setAsk({
        title: `${verb} ${link.name}?`, confirm: verb, danger: state !== "up",
        body: state === "up" ? "The link carries planned flows again; later plans may move flows onto it."
          : `It carries ${flows} planned flow(s) now; they are re-planned onto other paths at once and the jobs' assignment versions increase.`,
        onConfirm: () => run(`${verb} ${link.name}`, async () => {
          const r = await api.patch(`/v1/links/${encodeName(link.name)}`, { state });
          toast(`${link.name} is ${r.state}: ${r.replanned_flows} flow(s) re-planned`, "ok");
        }),
      });
    },
    isolate: (host) => setAsk({
      title: `Isolate ${host}?`, confirm: "Isolate", danger: true,
      body: "No job may use it; active jobs on it are flagged and schedulers get host.isolated.",
      input: { label: "Reason", required: true, value: "isolated from the console" },
      onConfirm: (reason) => run(`Isolate ${host}`, async () => {
        await api.post(`/v1/hosts/${encodeName(host)}/isolate`, { reason });
        toast(`${host} isolated`, "ok");
      }),
    }),
    release: (host) => setAsk({
      title: `Release ${host}?`, confirm: "Release", body: "Jobs may use it again.",
      onConfirm: () => run(`Release ${host}`, async () => {
        await api.post(`/v1/hosts/${encodeName(host)}/release`, {});
        toast(`${host} released`, "ok");
      }),
    }),
    acknowledge: (alarm) => run(`Acknowledge ${alarm.id}`, async () => {
      await api.post(`/v1/alarms/${encodeName(alarm.id)}/acknowledge`, {});
      toast(`${alarm.id} acknowledged`, "ok");
    }),
    resolve: (alarm) => setAsk({
      title: `Resolve ${alarm.id}?`, confirm: "Resolve", body: "Hosts it isolated stay isolated until released.",
      onConfirm: () => run(`Resolve ${alarm.id}`, async () => {
        await api.post(`/v1/alarms/${encodeName(alarm.id)}/resolve`, {});
        toast(`${alarm.id} resolved`, "ok");
      }),
    }),
  }), [api, run, toast]);

  const view = useMemo(() => {
    if (!F || !level) return null;
    const v = buildView(F, level);
    if (!refs.current.painted) performance.mark("c4:view-built");
    return v;
  }, [F, level]);
  useEffect(() => {
    // For bench/console: when the first map is on screen (the frame after it was rendered).
    if (view && !refs.current.painted) {
      refs.current.painted = true;
      // The start of the frame after the one that drew the map: it has been painted by then.
      requestAnimationFrame(() => requestAnimationFrame((t) => performance.mark("c4:map-painted", { startTime: t })));
    }
  }, [view]);
  const isolated = useMemo(() => new Set(hosts.filter((h) => h.state === "isolated").map((h) => h.name)), [hosts]);
  const hostStates = useMemo(() => new Map(hosts.map((h) => [h.name, h])), [hosts]);
  const alarmsById = useMemo(() => new Map(alarms.map((a) => [a.id, a])), [alarms]);
  const metric = METRICS[metricKey];
  const openAlarms = alarms.filter((a) => a.state === "open").length;

  const selectAlarm = (id) => {
    setSelectedAlarm(id);
    setTab("alarms");
    const a = alarms.find((x) => x.id === id);
    if (a) {
      const hl = suspectHighlight(a, jobs, F);
      setSuspect(hl);
      showOnMap(hl, null);
    }
  };
  const showSuspect = (alarm, s) => {
    const hl = suspectHighlight(alarm, jobs, F, s);
    setSuspect(suspectHighlight(alarm, jobs, F));
    setSelectedAlarm(alarm.id);
    const selection = s.kind === "link" ? { kind: "link", name: s.name } : hl.hosts.size ? { kind: "host", name: [...hl.hosts][0] } : null;
    showOnMap(hl, selection);
  };
  const selectHost = (name) => showOnMap(one({ hosts: [name] }), { kind: "host", name });
  const selectLink = (name) => showOnMap(one({ links: [name] }), { kind: "link", name });
  // The map keeps its level: at the overview the path lights up the groups and edges it crosses.
  const highlightPath = (hl) => setPath(hl);

  const crumbs = F && level && !F.layout.flat ? html`<nav class="crumbs" data-testid="crumbs">
      <button class="link" onClick=${() => { setLevel({ kind: "overview" }); setSel(null); }}>${F.name}</button>
      ${level.kind === "group" && html` › <b>${F.groups.get(level.id)?.label || level.id}</b>`}</nav>`
    : html`<nav class="crumbs"><b>${F ? F.name : ""}</b></nav>`;

  return html`<div class="console">
    <header>
      <span class="logo">c4</span><span class="title">console</span>
      ${F && html`<span class="fabric" data-testid="fabric-name">${F.name} · rev ${F.revision} · ${F.switches.size} switches</span>`}
      <span class="spacer"></span>
      <${LiveBadge} live=${live} />
      <span class="role" data-testid="role">${auth.role}</span>
      <button class="link" data-testid="logout" onClick=${() => onLogout(null)}>Sign out</button>
    </header>
    <main>
      <section class="mapsec">
        <div class="maptools">
          ${crumbs}
          <div class="metrics" role="group" aria-label="Colour links by" data-testid="metric">
            ${METRIC_KEYS.map((k) => html`<button class=${k === metricKey ? "on" : ""} data-metric=${k}
              onClick=${() => setMetricKey(k)}>${METRICS[k].label}</button>`)}
          </div>
          ${path && html`<span class="chip path" data-testid="path-chip">paths: ${path.label} <button class="x" onClick=${() => setPath(null)}>✕</button></span>`}
          ${suspect && html`<span class="chip suspect" data-testid="suspect-chip">${suspect.label} <button class="x" onClick=${() => setSuspect(null)}>✕</button></span>`}
        </div>
        <${Legend} metric=${metric} />
        ${metric.measured && F && !F.measured && html`<p class="banner" data-testid="no-measurements-banner">No measurements: no switch agent has reported counters for these links yet, so every link shows as "no measurements". Planned load is always available.</p>`}
        <div class="mapwrap">
          ${fabricError ? html`<p class="banner">${fabricError}</p>`
            : view ? html`<${FabricMap} view=${view} metric=${metric} selection=${sel} path=${path} suspect=${suspect}
                isolated=${isolated} onSelect=${select} onOpen=${openGroup} />`
            : html`<p class="muted">loading the fabric…</p>`}
        </div>
      </section>
      <aside class="inspector" data-testid="inspector">
        <${Inspector} sel=${sel} F=${F} metric=${metric} api=${api} auth=${auth} actions=${actions} history=${history}
          hostStates=${hostStates} alarmsById=${alarmsById} onSelect=${select} onOpen=${openGroup} onAlarm=${selectAlarm} />
      </aside>
      <section class="bottom">
        <nav class="tabs">
          <button class=${tab === "jobs" ? "on" : ""} data-tab="jobs" onClick=${() => setTab("jobs")}>Jobs <span class="count">${jobs.length}</span></button>
          <button class=${tab === "alarms" ? "on" : ""} data-tab="alarms" onClick=${() => setTab("alarms")}>Alarms
            <span class=${"count" + (openAlarms ? " hot" : "")} data-testid="open-alarms">${openAlarms}</span></button>
          <button class=${tab === "hosts" ? "on" : ""} data-tab="hosts" onClick=${() => setTab("hosts")}>Hosts
            <span class=${"count" + (isolated.size ? " hot" : "")}>${isolated.size} isolated</span></button>
        </nav>
        <div class="tabbody">
          ${tab === "jobs" && html`<${JobsPanel} jobs=${jobs} api=${api} changed=${changed} selected=${selectedJob}
            onSelectJob=${(n) => { setSelectedJob(n); setPath(null); }} onSelectLink=${selectLink} onHighlight=${highlightPath} highlight=${path} />`}
          ${tab === "alarms" && html`<${AlarmsPanel} alarms=${alarms} hosts=${hosts} auth=${auth} actions=${actions}
            selected=${selectedAlarm} onSelect=${selectAlarm} onShow=${showSuspect} onSelectHost=${selectHost} now=${live.at || Date.now()} />`}
          ${tab === "hosts" && html`<${HostsPanel} hosts=${hosts} alarmsById=${alarmsById} auth=${auth} actions=${actions}
            onSelectHost=${selectHost} onAlarm=${selectAlarm} />`}
        </div>
      </section>
    </main>
    <${Toasts} toasts=${toasts} onDismiss=${(id) => setToasts((ts) => ts.filter((t) => t.id !== id))} />
    <${ConfirmDialog} ask=${ask} onClose=${() => setAsk(null)} />
  </div>`;
}

// A reload keeps the session: the console starts at once with the role it had (nothing acts
// before the role is checked again: actions need a confirmation, and the API decides anyway)
// and asks the controller again who the token is.
function savedAuth() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  let who = null;
  try { who = JSON.parse(sessionStorage.getItem(ROLE_KEY) || "null"); } catch (_) { /* ignore */ }
  return token && who ? { token, role: who.role, may: who.may } : null;
}

function App() {
  const [auth, setAuth] = useState(savedAuth);
  const [message, setMessage] = useState(null);
  const login = (a) => {
    sessionStorage.setItem(TOKEN_KEY, a.token);
    sessionStorage.setItem(ROLE_KEY, JSON.stringify({ role: a.role, may: a.may }));
    setMessage(null);
    setAuth(a);
  };
  const logout = (why) => {
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(ROLE_KEY);
    setAuth(null);
    setMessage(why);
  };
  useEffect(() => {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) return;
    whoAmI(token)
      .then((who) => login({ token, role: who.role, may: who.may }))
      .catch((e) => {
        // Only a refused token ends the session; a controller that is busy or restarting
        // does not (the polls say "stale" meanwhile, and a 401 there signs out too).
        if (e.status === 401) logout("Your token is no longer valid; sign in again.");
        else if (!savedAuth()) setMessage(`Could not check the session: ${e.message}`);
      });
  }, []);
  if (!auth) return html`<${Login} onLogin=${login} message=${message} />`;
  return html`<${Console} auth=${auth} onLogout=${logout} />`;
}

render(html`<${App} />`, document.getElementById("app"));
