"""Link views: every link with its state and planned load per direction (`GET /v1/links`),
one link with each job's share of it, and the links one job uses (`GET /v1/jobs/{name}/links`).

Loads are computed from the stored plans (`te.loads`) with API.md's demand rule over all
active jobs, so every process answers the same; the result is cached per (fabric revision,
active jobs' versions), so a console polling the map costs one small query per request while
nothing changes. Directions: `ab` is from the link's `a` end to its `b` end, `ba` the reverse.

Each link also carries `measured` per direction: the latest smoothed rates from switch
counters (`services.link_measurements`, read from the database on every request, not cached),
null while no sample is fresh.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controller.domain.fabric import Fabric, Link
from controller.services import link_measurements
from controller.services.errors import NotFound
from controller.services.jobs import spec_from_document
from controller.services.runtime import Runtime
from controller.services.topology import link_doc
from controller.store import routes_repo
from controller.te import flows as job_flows
from controller.te.candidates import DirectedLink, Nic
from controller.te.instance import count_by_nic, demands_gbps
from controller.te.loads import DirectionLoad, planned_loads, totals

DIRECTIONS = ("ab", "ba")


@dataclass(frozen=True, slots=True)
class LoadView:
    """Planned loads as of one fabric revision and one set of active job versions."""

    revision: int
    fabric: Fabric
    per_job: dict[str, dict[DirectedLink, DirectionLoad]]
    total: dict[DirectedLink, DirectionLoad]
    versions: dict[str, int]


class LoadCache:
    """The last `LoadView` of this process and the NIC flow counts of each job spec."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.view: tuple[tuple[object, ...], LoadView] | None = None
        self.counts: dict[int, dict[Nic, int]] = {}


_caches: dict[int, LoadCache] = {}
_caches_lock = threading.Lock()


def _cache(rt: Runtime) -> LoadCache:
    with _caches_lock:
        return _caches.setdefault(id(rt), LoadCache())


def loads(rt: Runtime) -> LoadView:
    """The planned load of every link direction, per job and in total."""
    cache = _cache(rt)
    with rt.sessions() as session:
        got = rt.fabric_cache.current(session)
        if got is None:
            raise NotFound("no topology has been stored yet; PUT /v1/topology or POST /v1/topology/generate")
        revision, fabric, view = got
        jobs = routes_repo.active_jobs(session)
        key = (revision, tuple((j.id, j.version, j.status) for j in jobs))
        with cache.lock:
            kept = cache.view
        if kept is not None and kept[0] == key:
            return kept[1]
        routes = {j.name: routes_repo.planned_paths(session, j.id) for j in jobs if j.status == "planned"}
    counts: dict[Nic, int] = {}
    for j in jobs:
        per_nic = cache.counts.get(j.id)
        if per_nic is None:
            per_nic = cache.counts[j.id] = dict(count_by_nic(job_flows.derive_flows(spec_from_document(j.spec))))
        for nic, n in per_nic.items():
            counts[nic] = counts.get(nic, 0) + n
    live = {j.id for j in jobs}
    for job_id in [i for i in cache.counts if i not in live]:
        del cache.counts[job_id]
    per_job = planned_loads(view, {n: [((h, nic), p) for h, nic, p in r] for n, r in routes.items()},
                            demands_gbps(fabric, counts))
    result = LoadView(revision, fabric, per_job, totals(per_job), {j.name: j.version for j in jobs})
    with cache.lock:
        cache.view = (key, result)
    return result


def _load_doc(link: Link, load: DirectionLoad | None) -> dict[str, Any]:
    gbps, flows = (load.gbps, load.flows) if load is not None else (0.0, 0)
    return {"planned_gbps": round(gbps, 6), "planned_utilization": round(gbps / link.capacity_gbps, 9),
            "flows": flows}


def _link_with_load(link: Link, total: Mapping[DirectedLink, DirectionLoad],
                    measured: Mapping[DirectedLink, dict[str, Any]]) -> dict[str, Any]:
    doc = link_doc(link)
    doc["load"] = {d: _load_doc(link, total.get((link.name, d))) for d in DIRECTIONS}
    doc["max_planned_utilization"] = max(doc["load"][d]["planned_utilization"] for d in DIRECTIONS)
    doc["measured"] = {d: measured.get((link.name, d)) for d in DIRECTIONS}
    return doc


def list_links(rt: Runtime, state: str | None = None, kind: str | None = None) -> list[dict[str, Any]]:
    """Every link (optionally only those in `state`, or only `fabric`/`host` links) with its
    planned load per direction, sorted by name."""
    lv = loads(rt)
    measured = link_measurements.measured(rt, lv.fabric)
    out = []
    for link in sorted(lv.fabric.links, key=lambda x: x.name):
        if state is not None and link.state.value != state:
            continue
        if kind is not None and link.is_host_link != (kind == "host"):
            continue
        out.append(_link_with_load(link, lv.total, measured))
    return out


def get_link(rt: Runtime, name: str) -> dict[str, Any]:
    """One link with its planned load per direction and each job's part of it."""
    lv = loads(rt)
    link = next((x for x in lv.fabric.links if x.name == name), None)
    if link is None:
        raise NotFound(f"no link named {name!r}", {"link": name})
    doc = _link_with_load(link, lv.total, link_measurements.measured(rt, lv.fabric))
    jobs = []
    for job in sorted(lv.per_job):
        mine = {d: lv.per_job[job].get((name, d)) for d in DIRECTIONS}
        if any(v is not None for v in mine.values()):
            jobs.append({"job": job, **{d: _load_doc(link, mine[d]) for d in DIRECTIONS}})
    doc["jobs"] = jobs
    return doc


def job_links(rt: Runtime, job: str) -> dict[str, Any]:
    """The link directions a planned job's flows cross: its own load there, the total load
    (every job) and the resulting utilization, most utilized first."""
    lv = loads(rt)
    if job not in lv.versions:
        with rt.sessions() as session:
            known = routes_repo.job_exists(session, job)
        if not known:
            raise NotFound(f"no job named {job!r}", {"job": job})
        return {"job": job, "links": []}
    by_name = {x.name: x for x in lv.fabric.links}
    measured = link_measurements.measured(rt, lv.fabric)
    rows: list[dict[str, Any]] = []
    for (name, d), mine in lv.per_job.get(job, {}).items():
        link = by_name[name]
        total = lv.total[(name, d)]
        rows.append({"name": name, "direction": d, "from": link.a if d == "ab" else link.b,
                     "to": link.b if d == "ab" else link.a, "state": link.state.value,
                     "capacity_gbps": link.capacity_gbps, "host_link": link.is_host_link,
                     "job_gbps": round(mine.gbps, 6), "job_flows": mine.flows,
                     "planned_gbps": round(total.gbps, 6), "flows": total.flows,
                     "planned_utilization": round(total.gbps / link.capacity_gbps, 9),
                     "measured": measured.get((name, d))})
    rows.sort(key=lambda r: (-float(r["planned_utilization"]), r["name"], r["direction"]))
    return {"job": job, "version": lv.versions[job], "links": rows}


def link_series(rt: Runtime, name: str, window_s: float) -> dict[str, Any]:
    """`GET /v1/links/{name}/series`: both directions' measured samples of the last `window_s`."""
    with rt.sessions() as session:
        got = rt.fabric_cache.current(session)
    if got is None:
        raise NotFound("no topology has been stored yet; PUT /v1/topology or POST /v1/topology/generate")
    return link_measurements.series(rt, got[1], name, window_s)


def congestion(rt: Runtime) -> list[dict[str, Any]]:
    """The congestion detector's current output with each direction's planned load beside it."""
    lv = loads(rt)
    planned = {k: v.gbps for k, v in lv.total.items()}
    return [{"link": c.link, "direction": c.direction, "since_us": c.since_us, "t_us": c.t_us,
             "reason": c.reason, "capacity_gbps": c.capacity_gbps, "measured_gbps": c.measured_gbps,
             "utilization": c.utilization, "planned_gbps": round(c.planned_gbps, 6),
             "background_gbps": c.background_gbps, "ecn_marked_fraction": c.ecn_marked_fraction,
             "pfc_pauses_per_s": c.pfc_pauses_per_s}
            for c in link_measurements.congested_now(rt, lv.fabric, planned)]
