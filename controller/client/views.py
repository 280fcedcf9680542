"""What `c4 get` and `c4 describe` show of each resource: table columns (plain and `wide`) and
the describe pages. Values in, renderables out; no HTTP here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from controller.client.render import Column, age, cell, num, table


def _plan(field: str, digits: int = 3) -> Any:
    def value(job: dict[str, Any]) -> str:
        plan = job.get("plan") or {}
        return num(plan.get(field), digits) if field in plan else "-"
    return value


def _first_suspect(alarm: dict[str, Any]) -> str:
    suspects = alarm.get("suspects") or []
    return f"{suspects[0]['kind']}:{suspects[0]['name']}" if suspects else "-"


def _load(direction: str, field: str, digits: int = 3) -> Any:
    return lambda link: num(((link.get("load") or {}).get(direction) or {}).get(field), digits)


JOBS = [
    Column("NAME", lambda j: j["name"]),
    Column("STATUS", lambda j: j["status"]),
    Column("VERSION", lambda j: j.get("version"), right=True),
    Column("FLOWS", _plan("flows"), right=True),
    Column("MAX-UTIL", _plan("max_link_utilization"), right=True),
    Column("BOUND", _plan("lower_bound"), right=True),
    Column("ECMP", _plan("ecmp_expected_max_utilization"), right=True),
    Column("AGE", lambda j: age(j.get("created_at_us"))),
    Column("RANKS", lambda j: len(j.get("ranks") or []), wide_only=True, right=True),
    Column("BUSBW-C4", _plan("predicted_busbw_fraction"), wide_only=True, right=True),
    Column("BUSBW-ECMP", _plan("ecmp_predicted_busbw_fraction"), wide_only=True, right=True),
    Column("SOLVE-MS", _plan("solve_ms"), wide_only=True, right=True),
    Column("SOLVER", _plan("solver"), wide_only=True),
    Column("FLAGGED", lambda j: j.get("flag_reason") or "-", wide_only=True),
    Column("ERROR", lambda j: j.get("error") or "-", wide_only=True),
]

ALARMS = [
    Column("ID", lambda a: a["id"]),
    Column("JOB", lambda a: a["job"]),
    Column("KIND", lambda a: a["kind"]),
    Column("STATE", lambda a: a["state"]),
    Column("FIRST-SUSPECT", _first_suspect),
    Column("AGE", lambda a: age(a.get("opened_at_us"))),
    Column("SUSPECTS", lambda a: len(a.get("suspects") or []), wide_only=True, right=True),
    Column("COMM", lambda a: a.get("comm"), wide_only=True),
    Column("SEQ", lambda a: a.get("seq"), wide_only=True, right=True),
    Column("SUMMARY", lambda a: (a.get("evidence") or {}).get("summary"), wide_only=True),
]

HOSTS = [
    Column("NAME", lambda h: h["name"]),
    Column("STATE", lambda h: h["state"]),
    Column("SINCE", lambda h: age(h.get("changed_at_us"))),
    Column("ALARM", lambda h: h.get("alarm")),
    Column("REASON", lambda h: h.get("reason")),
]

LINKS = [
    Column("NAME", lambda x: x["name"]),
    Column("STATE", lambda x: x["state"]),
    Column("GBPS", lambda x: num(x.get("capacity_gbps"), 0), right=True),
    Column("UTIL-AB", _load("ab", "planned_utilization"), right=True),
    Column("UTIL-BA", _load("ba", "planned_utilization"), right=True),
    Column("FLOWS-AB", _load("ab", "flows"), right=True),
    Column("FLOWS-BA", _load("ba", "flows"), right=True),
    Column("KIND", lambda x: "host" if x.get("host_link") else "fabric", wide_only=True),
    Column("A", lambda x: f"{x['a']}:{x['a_port']}" if x.get("a_port") else x["a"], wide_only=True),
    Column("B", lambda x: f"{x['b']}:{x['b_port']}" if x.get("b_port") else x["b"], wide_only=True),
    Column("GBPS-AB", _load("ab", "planned_gbps", 1), wide_only=True, right=True),
    Column("GBPS-BA", _load("ba", "planned_gbps", 1), wide_only=True, right=True),
]

WEBHOOKS = [
    Column("ID", lambda w: w["id"], right=True),
    Column("URL", lambda w: w["url"]),
    Column("EVENTS", lambda w: w.get("events")),
    Column("AGE", lambda w: age(w.get("created_at_us"))),
]

TOKENS = [
    Column("ID", lambda t: t["id"], right=True),
    Column("NAME", lambda t: t["name"]),
    Column("ROLE", lambda t: t["role"]),
    Column("STATE", lambda t: "revoked" if t.get("revoked_at_us") else "active"),
    Column("AGE", lambda t: age(t.get("created_at_us"))),
    Column("REVOKED", lambda t: t.get("revoked_at") or "-", wide_only=True),
]

JOB_LINKS = [
    Column("LINK", lambda r: r["name"]),
    Column("DIR", lambda r: r["direction"]),
    Column("FROM", lambda r: r.get("from")),
    Column("TO", lambda r: r.get("to")),
    Column("STATE", lambda r: r.get("state")),
    Column("GBPS", lambda r: num(r.get("capacity_gbps"), 0), right=True),
    Column("JOB-GBPS", lambda r: num(r.get("job_gbps"), 1), right=True),
    Column("JOB-FLOWS", lambda r: r.get("job_flows"), right=True),
    Column("PLANNED-UTIL", lambda r: num(r.get("planned_utilization")), right=True),
]

# kind -> (the list's key in the API's answer, columns, the fields those columns show)
KINDS: dict[str, tuple[str, list[Column], frozenset[str]]] = {
    "jobs": ("jobs", JOBS, frozenset({"name", "status", "version", "plan", "ranks", "traffic", "flagged",
                                      "flag_reason", "error"})),
    "alarms": ("alarms", ALARMS, frozenset({"id", "job", "kind", "state", "suspects", "comm", "seq", "evidence",
                                            "resolved_by"})),
    "hosts": ("hosts", HOSTS, frozenset({"name", "state", "alarm", "reason"})),
    "links": ("links", LINKS, frozenset({"name", "state", "capacity_gbps", "load", "host_link", "a", "a_port",
                                         "b", "b_port", "max_planned_utilization"})),
    "webhooks": ("webhooks", WEBHOOKS, frozenset({"id", "url", "events"})),
    "tokens": ("tokens", TOKENS, frozenset({"id", "name", "role"})),
}


def _fields(pairs: Sequence[tuple[str, Any]]) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    for key, value in pairs:
        grid.add_row(f"{key}:", cell(value) if not isinstance(value, Text) else value)
    return grid


def _when(doc: dict[str, Any], field: str) -> str | None:
    if not isinstance(doc.get(f"{field}_us"), int):
        return None
    return f"{doc.get(field) or doc[field + '_us']} ({age(doc[field + '_us'])} ago)"


def _others(doc: dict[str, Any], known: set[str]) -> list[tuple[str, Any]]:
    """Scalar fields this CLI does not know yet (added by a newer controller), shown as they are."""
    return [(k, v) for k, v in doc.items()
            if k not in known and not isinstance(v, dict | list) and not k.endswith("_us") and f"{k}_us" not in doc]


def _section(title: str, body: RenderableType) -> RenderableType:
    return Group(Text(""), Text(title, style="bold"), body)


def describe_job(job: dict[str, Any], links: dict[str, Any] | None, alarms: list[dict[str, Any]],
                 top: int) -> RenderableType:
    plan = job.get("plan") or {}
    ranks = job.get("ranks") or []
    hosts = sorted({r["host"] for r in ranks})
    traffic = "; ".join(f"{t['pattern']} over {len(t.get('ranks') or []) or len(t.get('pairs') or []) or len(ranks)}"
                        f" {'pairs' if t['pattern'] == 'pairs' else 'ranks'}, {t.get('channels', 1)} channel(s) x "
                        f"{t.get('qps_per_connection', 1)} QP(s)" for t in job.get("traffic") or [])
    pairs: list[tuple[str, Any]] = [
        ("Name", job["name"]),
        ("Status", f"{job['status']} (version {job.get('version')})"),
        ("Created", _when(job, "created_at")),
        ("Updated", _when(job, "updated_at")),
        ("Ranks", f"{len(ranks)} on {len(hosts)} host(s)"),
        ("Traffic", traffic or "-"),
    ]
    if job.get("error"):
        pairs.append(("Error", job["error"]))
    if job.get("flagged"):
        pairs.append(("Flagged", job.get("flag_reason")))
    pairs += _others(job, {"name", "status", "version", "error", "flagged", "flag_reason"})
    parts: list[RenderableType] = [_fields(pairs)]
    if plan:
        summary = Table(box=None, show_edge=False, pad_edge=False, header_style="bold", padding=(0, 2, 0, 0))
        summary.add_column("")
        summary.add_column("c4", justify="right")
        summary.add_column("ECMP", justify="right")
        summary.add_row("max link utilization", num(plan.get("max_link_utilization")),
                        num(plan.get("ecmp_expected_max_utilization")))
        summary.add_row("lower bound (proven)", num(plan.get("lower_bound")), "")
        if "predicted_busbw_fraction" in plan:
            summary.add_row("bus bandwidth / ideal", num(plan.get("predicted_busbw_fraction")),
                            num(plan.get("ecmp_predicted_busbw_fraction")))
        known = {"max_link_utilization", "ecmp_expected_max_utilization", "lower_bound", "predicted_busbw_fraction",
                 "ecmp_predicted_busbw_fraction"}
        rest = ", ".join(f"{k} {cell(v)}" for k, v in plan.items() if k not in known and not isinstance(v, dict | list))
        parts.append(_section("Plan", Group(summary, Text(rest))))
    else:
        parts.append(_section("Plan", Text("none yet" if job["status"] == "pending" else "none")))
    if links is not None:
        rows = links.get("links") or []
        shown = rows if top == 0 else rows[:top]
        title = f"Links (most utilized first; {len(shown)} of {len(rows)} link directions)"
        parts.append(_section(title, table(shown, JOB_LINKS, wide=True) if shown else Text("none")))
    parts.append(_section("Alarms", table(alarms, ALARMS, wide=False) if alarms else Text("none")))
    return Group(*parts)


def describe_alarm(alarm: dict[str, Any], suspect_states: dict[str, str]) -> RenderableType:
    pairs: list[tuple[str, Any]] = [
        ("ID", alarm["id"]), ("Job", alarm["job"]), ("Kind", alarm["kind"]), ("State", alarm["state"]),
        ("Communicator", alarm.get("comm")), ("Sequence", alarm.get("seq")),
        ("Opened", _when(alarm, "opened_at")),
    ]
    if alarm.get("acknowledged_at_us"):
        pairs.append(("Acknowledged", _when(alarm, "acknowledged_at")))
    if alarm.get("resolved_at_us"):
        pairs.append(("Resolved", f"{_when(alarm, 'resolved_at')} by {alarm.get('resolved_by')}"))
    pairs += _others(alarm, {"id", "job", "kind", "state", "comm", "seq", "resolved_by"})
    suspects = Table(box=None, show_edge=False, pad_edge=False, header_style="bold", padding=(0, 2, 0, 0))
    for header in ("#", "KIND", "NAME", "NOW"):
        suspects.add_column(header)
    for i, s in enumerate(alarm.get("suspects") or [], 1):
        suspects.add_row(str(i), s["kind"], s["name"], suspect_states.get(s["name"], "-"))
    evidence = dict(alarm.get("evidence") or {})
    summary = evidence.pop("summary", None)
    figures = _fields([(k, _short(v)) for k, v in evidence.items()])
    return Group(_fields(pairs), _section("Evidence", Group(Text(str(summary or "-")), figures)),
                 _section("Suspects (most likely first)", suspects))


def _short(value: Any, limit: int = 12) -> str:
    if isinstance(value, list) and len(value) > limit:
        return f"{cell(value[:limit])} ... ({len(value)} in all)"
    if isinstance(value, list | dict):
        return json.dumps(value)
    return cell(value)


def describe_link(link: dict[str, Any], alarms: list[dict[str, Any]]) -> RenderableType:
    load = link.get("load") or {}
    pairs: list[tuple[str, Any]] = [
        ("Name", link["name"]), ("State", link["state"]),
        ("Kind", "host port" if link.get("host_link") else "switch to switch"),
        ("A", f"{link['a']}:{link['a_port']}" if link.get("a_port") else link["a"]),
        ("B", f"{link['b']}:{link['b_port']}" if link.get("b_port") else link["b"]),
        ("Capacity", f"{num(link.get('capacity_gbps'), 0)} Gbit/s per direction"),
    ]
    for side in ("a_address", "b_address"):
        if link.get(side):
            pairs.append((side, link[side]))
    pairs += _others(link, {"name", "state", "host_link", "a", "a_port", "b", "b_port", "capacity_gbps",
                            "a_address", "b_address", "max_planned_utilization"})
    directions = Table(box=None, show_edge=False, pad_edge=False, header_style="bold", padding=(0, 2, 0, 0))
    for header in ("DIR", "FROM", "TO", "PLANNED-GBPS", "PLANNED-UTIL", "FLOWS"):
        directions.add_column(header)
    for d, (x, y) in (("ab", (link["a"], link["b"])), ("ba", (link["b"], link["a"]))):
        v = load.get(d) or {}
        directions.add_row(d, x, y, num(v.get("planned_gbps"), 1), num(v.get("planned_utilization")),
                           cell(v.get("flows")))
    jobs = Table(box=None, show_edge=False, pad_edge=False, header_style="bold", padding=(0, 2, 0, 0))
    for header in ("JOB", "GBPS-AB", "FLOWS-AB", "GBPS-BA", "FLOWS-BA"):
        jobs.add_column(header)
    for j in link.get("jobs") or []:
        jobs.add_row(j["job"], num((j.get("ab") or {}).get("planned_gbps"), 1), cell((j.get("ab") or {}).get("flows")),
                     num((j.get("ba") or {}).get("planned_gbps"), 1), cell((j.get("ba") or {}).get("flows")))
    return Group(_fields(pairs), _section("Planned load", directions),
                 _section("Jobs on it", jobs if link.get("jobs") else Text("none")),
                 _section("Alarms naming it", table(alarms, ALARMS, wide=False) if alarms else Text("none")))
