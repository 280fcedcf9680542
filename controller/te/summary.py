"""The plan summary of one job (API.md's `plan` object) from the plan as it now stands.

For the job's own instance (other jobs' flows as background): the max utilization over the
link directions its flows use, a proven lower bound (the best of GLOP's dual bound, dual
bounds from the plan's hot links, the NIC pigeonhole bound, lifted by integrality when all
demands are equal), ECMP's expected max utilization, and the max-min fair simulation's bus
bandwidth fraction for the plan and for ECMP draws. Pure.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping

import numpy as np

from controller.domain.fabric import Fabric
from controller.domain.jobs import PlanSummary
from controller.te import bound, ecmp, simulate
from controller.te.candidates import Candidates, DirectedLink, Nic
from controller.te.config import Config
from controller.te.instance import (
    ActiveJob,
    FloatArray,
    Instance,
    IntArray,
    background,
    build_instance,
    to_route,
)
from controller.te.pathspace import PathSpace
from controller.te.solution import (
    Status,
    counts_of_current,
    loads_gbps,
    max_utilization,
    utilization,
)
from controller.topology.graph import FabricView

LARGE_JOB_FLOWS = 8192
BOUND_TOLERANCE = 1e-9  # utilizations are compared with this slack (float sums of demands)


class LoadBook:
    """Every job's assigned flows counted once, for summarising many jobs of one state (a
    batch of new plans, a batch of refreshes) without a pass over every job's flows per job:
    per job, flows per (link direction, demand) and per (path's link indices, demand). A
    job's background is then the total less its own counts (integers: exact), and so are the
    simulator's other-job classes. Built for one `jobs`/`demand`; read-only afterwards."""

    def __init__(self, fabric: Fabric, view: FabricView, jobs: Mapping[str, ActiveJob],
                 demand: Mapping[Nic, float]) -> None:
        self.index: dict[DirectedLink, int] = {}
        for link in fabric.links:
            for d in ("ab", "ba"):
                self.index[(link.name, d)] = len(self.index)
        self.links: dict[str, Counter[tuple[DirectedLink, float]]] = {}
        self.classes: dict[str, Counter[tuple[tuple[int, ...], float]]] = {}
        self.total_links: Counter[tuple[DirectedLink, float]] = Counter()
        self.total_classes: Counter[tuple[tuple[int, ...], float]] = Counter()
        hops: dict[tuple[str, ...], tuple[DirectedLink, ...]] = {}
        for name, job in jobs.items():
            src = {f.key: f.src for f in job.flows}
            per_link: Counter[tuple[DirectedLink, float]] = Counter()
            per_class: Counter[tuple[tuple[int, ...], float]] = Counter()
            for k, a in job.assignments.items():
                if k not in src:
                    continue
                h = hops.get(a.path)
                if h is None:
                    h = hops[a.path] = view.directed_links_of(a.path)
                dem = demand[src[k]]
                for x in h:
                    per_link[(x, dem)] += 1
                per_class[(tuple(self.index[x] for x in h), dem)] += 1
            self.links[name], self.classes[name] = per_link, per_class
            self.total_links.update(per_link)
            self.total_classes.update(per_class)
        self._rates: dict[tuple[tuple[int, ...], float], float] | None = None
        self._all: dict[DirectedLink, float] | None = None  # every job's load per link direction
        self._prepared: simulate.Prepared | None = None  # every job's classes, indexed (`member_fraction`)
        self._where: dict[tuple[tuple[int, ...], float], int] = {}
        self.caps = np.array([c for link in fabric.links for c in (link.capacity_gbps, link.capacity_gbps)] + [np.inf])

    def background(self, name: str) -> dict[DirectedLink, float]:
        """Load per link direction of every job's assigned flows but `name`'s: every job's
        load (summed once per book), each link direction the job uses summed again without
        its flows, in the same order (so the same floats as a sum over every direction)."""
        if self._all is None:
            self._by_link: dict[DirectedLink, list[tuple[float, int]]] = defaultdict(list)
            for (x, dem), n in self.total_links.items():
                self._by_link[x].append((dem, n))
            self._all = {}
            for x, terms in self._by_link.items():
                total = 0.0
                for dem, n in terms:
                    total += dem * n
                self._all[x] = total
        own = self.links.get(name, Counter())
        out = dict(self._all)
        for x in {x for x, _ in own}:
            total, any_left = 0.0, False
            for dem, n in self._by_link[x]:
                left = n - own.get((x, dem), 0)
                if left:
                    total += dem * left
                    any_left = True
            if any_left:
                out[x] = total
            else:
                del out[x]
        return out

    def plan_fraction(self, fabric: Fabric, name: str) -> float:
        """The simulator's bus bandwidth fraction of job `name` as every job is planned: the
        max-min fair rates of all jobs' flows depend on the plans only (not on whose flows
        they are), so they are computed once for the book and each job reads its classes'."""
        if self._rates is None:
            keys = list(self.total_classes)
            caps = [c for link in fabric.links for c in (link.capacity_gbps, link.capacity_gbps)] + [np.inf]
            width = max((len(k[0]) for k in keys), default=1)
            links = np.full((len(keys), width), len(caps) - 1, dtype=np.int64)
            for i, k in enumerate(keys):
                links[i, : len(k[0])] = k[0]
            classes = simulate.FlowClasses(links, np.array([self.total_classes[k] for k in keys], dtype=np.int64),
                                           np.array([k[1] for k in keys]))
            rates = simulate.max_min_rates(classes, np.array(caps))
            self._rates = {k: float(r) for k, r in zip(keys, rates.tolist(), strict=True)}
        own = self.classes.get(name)
        if not own:
            return 1.0
        return min(self._rates[k] / k[1] for k in own)

    def member_fraction(self, name: str, mine: Mapping[tuple[tuple[int, ...], float], int]) -> float:
        """The simulator's bus bandwidth fraction of job `name` placed as `mine` (its flows per
        (link-direction indices, demand)), every other job's flows as in the book: the book's
        classes less the job's own, then `mine` as the member classes. The classes are indexed
        once for every job the book summarises (`simulate.prepare`); the same fraction, bit
        for bit, as `simulate.member_fraction` over those classes in one array."""
        if self._prepared is None:
            keys = list(self.total_classes)
            width = max((len(k[0]) for k in keys), default=1)
            links = np.full((len(keys), width), len(self.caps) - 1, dtype=np.int64)
            for i, k in enumerate(keys):
                links[i, : len(k[0])] = k[0]
            self._where = {k: i for i, k in enumerate(keys)}
            self._prepared = simulate.prepare(simulate.FlowClasses(
                links, np.array([self.total_classes[k] for k in keys], dtype=np.int64),
                np.array([k[1] for k in keys], dtype=np.float64)), self.caps)
        minus = {self._where[k]: n for k, n in self.classes.get(name, Counter()).items()}
        own = list(mine)
        width = max((len(k[0]) for k in own), default=1)
        links = np.full((len(own), width), len(self.caps) - 1, dtype=np.int64)
        for i, k in enumerate(own):
            links[i, : len(k[0])] = k[0]
        extra = simulate.FlowClasses(links, np.array([mine[k] for k in own], dtype=np.int64),
                                     np.array([k[1] for k in own], dtype=np.float64))
        return simulate.member_fraction_with(self._prepared, minus, extra, self.caps)


def job_instance(fabric: Fabric, cands: Candidates, jobs: Mapping[str, ActiveJob], name: str,
                 demand: Mapping[Nic, float], max_routes: int | None = None,
                 routes_per_flow: int | None = None, book: LoadBook | None = None) -> Instance:
    """The instance of one job with every other job's plan as background, current = its plan."""
    job = jobs[name]
    bg = book.background(name) if book is not None else background(cands.view, jobs, {name}, demand)
    current = {(name, k): to_route(cands.view, a) for k, a in job.assignments.items()}
    inst, _ = build_instance(fabric, cands, {name: job.flows}, demand, bg, current, max_routes=max_routes,
                             routes_per_flow=routes_per_flow)
    return inst


def proven_bound(inst: Instance, counts: list[IntArray], config: Config, extra: float = 0.0,
                 cands: Candidates | None = None, space: PathSpace | None = None) -> tuple[float, str]:
    """The best proven bound; the LP runs only when the cheap bounds leave a gap to the plan.

    `extra` is a bound proven elsewhere for this same instance (CP-SAT's objective bound).
    An instance whose routes are not every equal-cost path (`Instance.complete` False) gets
    `bound.structural_bound` (over the fabric's paths, from `cands`) instead: a bound over
    its own routes would be proven for those routes only."""
    util = utilization(inst, loads_gbps(inst, counts))
    if not inst.complete:
        assert cands is not None, "an incomplete instance needs the candidates for its bound"
        return bound.structural_bound(inst, cands, util, space)
    best, how = bound.heuristic_bound(inst, util), "dual"
    if extra > best:
        best, how = extra, "cp-sat"
    nic = bound.nic_bound(inst)
    if nic > best:
        best, how = nic, "nic"
    receive = bound.receive_bound(inst)  # (where many jobs converge on a NIC the LP misses it)
    if receive > best:
        best, how = receive, "receive"
    achieved = max_utilization(inst, counts, only_used=False)
    lifted = bound.rounded(inst, best)  # (once: with many background loads the lift is not cheap)
    if config.with_bound and lifted < achieved - 1e-9:
        lp, lp_how = bound.lp_bound(inst, config.lp_time_limit_s)
        if lp > best:
            best, how = lp, lp_how
            lifted = bound.rounded(inst, best)
    return lifted, how


Drawn = tuple[list[tuple[str, str]], IntArray, FloatArray]  # a `FabricSampler` draw: links, rows, demands


def _fraction(fabric: Fabric, cands: Candidates, jobs: Mapping[str, ActiveJob], demand: Mapping[Nic, float],
              name: str, own: tuple[Instance, list[IntArray]] | None = None, drawn: Drawn | None = None,
              book: LoadBook | None = None) -> float:
    """The simulator's bus bandwidth fraction of job `name` placed as in `own` or `drawn` (see
    `_classes`), every other job as planned; with a book, over its prepared classes (issue
    18: the other jobs' classes indexed once per book, not once per simulation)."""
    if book is None:
        cl, mem, caps = _classes(fabric, cands, jobs, demand, name, own, drawn)
        return simulate.member_fraction(cl, caps, mem)
    return book.member_fraction(name, _class_counts(fabric, cands, {name: jobs[name]}, demand, name, own, drawn))


def _class_counts(fabric: Fabric, cands: Candidates, jobs: Mapping[str, ActiveJob], demand: Mapping[Nic, float],
                  name: str, own: tuple[Instance, list[IntArray]] | None = None, drawn: Drawn | None = None,
                  ) -> dict[tuple[tuple[int, ...], float], int]:
    """Job `name`'s flows per (link-direction indices, demand), placed as in `own` or `drawn`."""
    counts: dict[tuple[tuple[int, ...], float], int] = defaultdict(int)
    for (links, dem, mine), n in _counts(fabric, cands, jobs, demand, name, own, drawn)[0].items():
        if mine:
            counts[(links, dem)] += n
    return counts


def _classes(fabric: Fabric, cands: Candidates, jobs: Mapping[str, ActiveJob], demand: Mapping[Nic, float],
             name: str, own: tuple[Instance, list[IntArray]] | None = None, drawn: Drawn | None = None,
             ) -> tuple[simulate.FlowClasses, IntArray, np.ndarray]:
    """Flow classes of every job's flows for the simulator; job `name`'s flows come from
    `own` (its instance and counts: the plan, or an ECMP draw) or `drawn` (an ECMP draw
    over the fabric's paths) when given."""
    counts, caps = _counts(fabric, cands, jobs, demand, name, own, drawn)
    keys = sorted(counts)
    width = max((len(k[0]) for k in keys), default=1)
    links = np.full((len(keys), width), len(caps) - 1, dtype=np.int64)
    for i, k in enumerate(keys):
        links[i, : len(k[0])] = k[0]
    classes = simulate.FlowClasses(links, np.array([counts[k] for k in keys], dtype=np.int64),
                                   np.array([k[1] for k in keys]))
    members = np.array([i for i, k in enumerate(keys) if k[2]], dtype=np.int64)
    return classes, members, np.array(caps)


def _counts(fabric: Fabric, cands: Candidates, jobs: Mapping[str, ActiveJob], demand: Mapping[Nic, float],
            name: str, own: tuple[Instance, list[IntArray]] | None = None, drawn: Drawn | None = None,
            ) -> tuple[dict[tuple[tuple[int, ...], float, bool], int], list[float]]:
    """Flows per (link-direction indices, demand, whether job `name`'s) and the capacities."""
    index: dict[tuple[str, str], int] = {}
    caps: list[float] = []
    for link in fabric.links:
        for d in ("ab", "ba"):
            index[(link.name, d)] = len(caps)
            caps.append(link.capacity_gbps)
    caps.append(np.inf)
    counts: dict[tuple[tuple[int, ...], float, bool], int] = defaultdict(int)
    for job_name, job in sorted(jobs.items()):
        mine = job_name == name
        if mine and drawn is not None:
            names, rows, demands = drawn
            to_full = np.array([index[d] for d in names] + [len(caps) - 1], dtype=np.int64)
            pad = len(caps) - 1
            for row, dem in zip(to_full[rows].tolist(), demands.tolist(), strict=True):
                counts[(tuple(x for x in row if x != pad), dem, True)] += 1
            continue
        if mine and own is not None:
            inst, cnt = own
            to_full = np.array([index[d] for d in inst.links] + [len(caps) - 1], dtype=np.int64)
            pad = len(caps) - 1
            if inst.groups:
                flat, demands = inst.flat_routes()
                per_route = np.concatenate(cnt)
                chosen = np.flatnonzero(per_route)
                for row, dem, n in zip(to_full[flat[chosen]].tolist(), demands[chosen].tolist(),
                                       per_route[chosen].tolist(), strict=True):
                    counts[(tuple(x for x in row if x != pad), dem, True)] += n
            continue
        src = {f.key: f.src for f in job.flows}
        for fk, a in job.assignments.items():
            path_links = cands.view.directed_links_of(a.path)
            counts[(tuple(index[x] for x in path_links), demand[src[fk]], mine)] += 1
    return counts, caps


def summarize(fabric: Fabric, cands: Candidates, jobs: Mapping[str, ActiveJob], name: str,
              demand: Mapping[Nic, float], config: Config, t0: float, solver: str,
              moved: int = 0, extra_bound: float = 0.0,
              solved: tuple[Instance, list[IntArray]] | None = None,
              book: LoadBook | None = None) -> tuple[Status, PlanSummary, str | None]:
    """The summary of job `name` as planned in `jobs`; `solved` is the job's own instance and
    counts when the caller has them (same demands and background), saving a rebuild; `book`:
    the same `jobs` and `demand` counted once (`LoadBook`), when summarising many jobs.

    The bound is never clamped to the plan: one above the plan is a bug, returned as the third
    value (what was found, with the instance) and replaced by a safe bound."""
    if solved is not None:
        inst, counts = solved
    else:
        inst = job_instance(fabric, cands, jobs, name, demand, config.max_routes, config.routes_per_flow, book)
        counts = counts_of_current(inst)
    achieved = max_utilization(inst, counts, only_used=True)
    space = None if inst.complete else PathSpace(cands, inst)
    lb, how = proven_bound(inst, counts, config, extra_bound if inst.complete else 0.0, cands, space)
    violation = None
    if lb > achieved + BOUND_TOLERANCE:
        violation = f"bound {lb!r} ({how}) above the plan's {achieved!r} for job {name!r}: {describe(inst)}"
        safe = bound.nic_bound(inst) if inst.complete else 0.0
        lb, how = (safe, "nic (after a violation)") if safe <= achieved + BOUND_TOLERANCE else (0.0, "none (after a violation)")
    ecmp_max, ecmp_frac, frac = 0.0, 0.0, 1.0
    # (in a batch the ECMP draws' simulations may wait for the refresh: see `Config`)
    ecmp_sim = config.with_simulation and not (config.ecmp_simulation_later and book is not None)
    if inst.groups and config.with_ecmp and not inst.complete:
        # the instance has some paths only: ECMP draws from all of them
        fabric_sampler = ecmp.FabricSampler(cands, inst, config.seed, space)
        n_draws = config.ecmp_draws if inst.n_flows <= LARGE_JOB_FLOWS else max(4, config.ecmp_draws // 2)
        rows = [fabric_sampler.draw() for _ in range(n_draws)]
        ecmp_max = float(np.mean([fabric_sampler.max_utilization(r) for r in rows]))
        if ecmp_sim:
            ecmp_frac = _fraction(fabric, cands, jobs, demand, name,
                                  drawn=(fabric_sampler.links, rows[0], fabric_sampler.demand), book=book)
    elif inst.groups and config.with_ecmp:
        sampler = ecmp.EcmpSampler(cands.view, inst, config.seed)
        # the max over many flows varies little between draws: fewer draws for big jobs
        n_draws = config.ecmp_draws if inst.n_flows <= LARGE_JOB_FLOWS else max(4, config.ecmp_draws // 2)
        draws = [sampler.draw() for _ in range(n_draws)]
        ecmp_max = float(np.mean([sampler.max_utilization(c) for c in draws]))
        if ecmp_sim:
            fr = []
            for c in draws[: config.sim_ecmp_draws if inst.n_flows <= LARGE_JOB_FLOWS else 1]:
                fr.append(_fraction(fabric, cands, jobs, demand, name, (inst, sampler.counts(c)), book=book))
            ecmp_frac = float(np.mean(fr)) if fr else 0.0
    if config.with_simulation and book is not None and solved is None:
        frac = book.plan_fraction(fabric, name)  # the plan as it stands: the same rates for every job
    elif config.with_simulation:
        frac = _fraction(fabric, cands, jobs, demand, name, (inst, counts), book=book)
    status = Status.OPTIMAL if achieved <= lb + BOUND_TOLERANCE else Status.FEASIBLE
    solve_ms = round((time.monotonic() - t0) * 1000)
    later = bool(inst.groups) and config.with_ecmp and config.with_simulation and not ecmp_sim
    return status, PlanSummary(inst.n_flows, round(achieved, 9), round(lb, 9), round(ecmp_max, 9), solve_ms,
                               f"{solver}; bound={how}", round(frac, 6), None if later else round(ecmp_frac, 6), moved,
                               round(paths_known(cands, [(g.src, g.dst) for g in inst.groups]), 6)), violation


def paths_known(cands: Candidates, nic_pairs: list[tuple[Nic, Nic]]) -> float:
    """The share of the NIC pairs' equal-cost paths (every up port pair) that have a known
    source port: 1.0 under the hash model (every path has one); under probes, those seen."""
    if cands.hashed_by_model:
        return 1.0
    known = total = 0
    for src, dst in nic_pairs:
        for a in cands.up_ports(src):
            for b in cands.up_ports(dst):
                total += cands.path_count(a, b)
                known += len(cands.port_routes(a, b))
    return known / total if total else 1.0


def describe(inst: Instance, max_groups: int = 64) -> str:
    """The instance as JSON for a log line: link directions with capacity and background,
    groups with their NICs, flow count, demand and routes (the first `max_groups` groups)."""
    links = [[name, d, float(inst.capacity_gbps[i]), float(inst.background_gbps[i])]
             for i, (name, d) in enumerate(inst.links)]
    groups = [{"src": list(g.src), "dst": list(g.dst), "flows": len(g.flows), "demand_gbps": g.demand_gbps,
               "routes": [list(r.path) for r in g.routes]} for g in inst.groups[:max_groups]]
    return json.dumps({"links": links, "groups": groups, "groups_total": len(inst.groups)}, separators=(",", ":"))


def job_maxima(view: FabricView, jobs: Mapping[str, ActiveJob], demand: Mapping[Nic, float],
               names: Iterable[str]) -> dict[str, float]:
    """Each named job's `max_link_utilization` as the plans now stand: the highest total
    utilization over the link directions its flows use (every job's flows counted). Cheap
    (one pass over the flows), for keeping the other jobs' summaries right when a plan is
    written; the full summary (bound, ECMP, simulation) is the refresh's."""
    caps = {(x.name, d): x.capacity_gbps for x in view.fabric.links for d in ("ab", "ba")}
    load: dict[DirectedLink, float] = defaultdict(float)
    used: dict[str, set[DirectedLink]] = {n: set() for n in names}
    paths: dict[tuple[str, ...], tuple[DirectedLink, ...]] = {}
    for name, job in jobs.items():
        src = {f.key: f.src for f in job.flows}
        mine = used.get(name)
        for key, a in job.assignments.items():
            hops = paths.get(a.path)
            if hops is None:
                hops = paths[a.path] = view.directed_links_of(a.path)
            d = demand[src[key]]
            for h in hops:
                load[h] += d
            if mine is not None:
                mine.update(hops)
    return {n: max((load[h] / caps[h] for h in links), default=0.0) for n, links in used.items()}
