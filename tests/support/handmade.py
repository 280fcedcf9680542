"""Hand-written fabrics for the C4P bound tests, random jobs on them, and the exact optimum.

`mlag()` is the fixed case of issue 9: a 50G peer link between leaf0 and leaf1 (an MLAG pair)
whose loss lengthens the shortest paths between them, which adds equal-cost candidates and
lowers the optimum (4.0 before, 2.0 after). `random_fabric(rng)` draws small fabrics that no
generator makes: 2 or 3 tiers, leaf-leaf peer links, missing links, mixed capacities, single-
and dual-port NICs, and names that follow no pattern; each passes `topology.validate`.

`exact_optimum` is the API's optimum of one job, computed without the planner: every flow of
the job on one equal-cost path of the fabric as it is (`FabricView.equal_cost_paths`, any up
port of its NICs), the other jobs' flows staying where they are, minimising the maximum
utilization over the link directions the job's flows use; solved exactly by CP-SAT on integers
(every load is a rational multiple of a capacity, scaled by the common denominator). Small
instances only (a few dozen flows).
"""

from __future__ import annotations

import itertools
import math
import random
from collections import defaultdict
from collections.abc import Mapping
from fractions import Fraction

from ortools.sat.python import cp_model

from controller.domain.fabric import Fabric, Hashing, Host, HostPort, Link, Nic, Switch, SwitchRole
from controller.domain.jobs import (
    Assignment,
    Flow,
    FlowKey,
    JobSpec,
    Pattern,
    RankSpec,
    TrafficSpec,
)
from controller.topology.build import build_fabric
from controller.topology.graph import FabricView
from controller.topology.validate import problems

GBPS = (50.0, 100.0, 200.0)


def mlag() -> Fabric:
    """The issue's fabric: leaf0-leaf1 peer link at 50G, leaf0 and leaf2 on spines s0 and s1,
    leaf1 on s0 only, 100G elsewhere; single-port hosts h0..h3 on leaf0, h4, h5 on leaf1, h6,
    h7 on leaf2."""
    switches = [Switch("leaf0", SwitchRole.LEAF, ecmp_seed=3), Switch("leaf1", SwitchRole.LEAF, ecmp_seed=5),
                Switch("leaf2", SwitchRole.LEAF, ecmp_seed=7), Switch("s0", SwitchRole.SPINE, ecmp_seed=11),
                Switch("s1", SwitchRole.SPINE, ecmp_seed=13)]
    links = [Link("", "leaf0", "eth0", "leaf1", "eth0", 50.0), Link("", "leaf0", "eth1", "s0", "eth0", 100.0),
             Link("", "leaf0", "eth2", "s1", "eth0", 100.0), Link("", "leaf1", "eth1", "s0", "eth1", 100.0),
             Link("", "leaf2", "eth1", "s0", "eth2", 100.0), Link("", "leaf2", "eth2", "s1", "eth2", 100.0)]
    leaf_of = ["leaf0"] * 4 + ["leaf1"] * 2 + ["leaf2"] * 2
    hosts = [Host(f"h{i}", (Nic("nic0", 0, (HostPort("p0", f"10.9.0.{i + 2}", leaf_of[i], f"eth{10 + i}", 100.0),)),))
             for i in range(8)]
    fabric = build_fabric("mlag", Hashing(), switches, links, hosts)
    assert problems(fabric) == []
    return fabric


def mlag_job() -> JobSpec:
    return JobSpec("pairs", tuple(RankSpec(i, f"h{i}", "nic0") for i in range(8)),
                   (TrafficSpec(Pattern.PAIRS, pairs=((0, 4), (1, 5), (2, 6), (3, 7))),))


def peer_link(fabric: Fabric) -> str:
    return next(x.name for x in fabric.links if {x.a, x.b} == {"leaf0", "leaf1"})


def _word(rng: random.Random) -> str:
    return "".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(rng.randint(1, 3)))


def random_fabric(rng: random.Random) -> Fabric:
    """A small valid fabric with irregular structure (see the module docstring)."""
    while True:
        fabric = _draw(rng)
        if not problems(fabric):
            return fabric


def _draw(rng: random.Random) -> Fabric:
    three = rng.random() < 0.4
    names: set[str] = set()

    def fresh(prefix: str) -> str:
        while True:
            n = f"{prefix}{_word(rng)}{rng.randint(0, 99)}"
            if n not in names:
                names.add(n)
                return n

    seed = iter(rng.sample(range(1, 10_000), 64))
    switches: list[Switch] = []
    links: list[Link] = []
    port_no: dict[str, int] = defaultdict(int)

    def sw(role: SwitchRole, pod: int | None) -> str:
        name = fresh(rng.choice(["", "sw-", "r", "x"]))
        switches.append(Switch(name, role, pod, next(seed)))
        return name

    def link(a: str, b: str) -> None:
        pa, pb = port_no[a], port_no[b]
        port_no[a] += 1
        port_no[b] += 1
        links.append(Link("", a, f"e{pa}", b, f"e{pb}", rng.choice(GBPS)))

    leaves: list[str] = []
    if three:
        pods = 2
        cores = [sw(SwitchRole.CORE, None) for _ in range(rng.randint(1, 2))]
        for pod in range(pods):
            pod_leaves = [sw(SwitchRole.LEAF, pod) for _ in range(rng.randint(1, 2))]
            spines = [sw(SwitchRole.SPINE, pod) for _ in range(rng.randint(1, 2))]
            for leaf in pod_leaves:
                for i, s in enumerate(spines):
                    if i == 0 or rng.random() < 0.8:
                        link(leaf, s)
            for i, s in enumerate(spines):
                for j, c in enumerate(cores):
                    if (i == 0 and j == 0) or rng.random() < 0.7:
                        link(s, c)
            leaves += pod_leaves
    else:
        leaves = [sw(SwitchRole.LEAF, None) for _ in range(rng.randint(2, 4))]
        spines = [sw(SwitchRole.SPINE, None) for _ in range(rng.randint(1, 3))]
        for leaf in leaves:
            for i, s in enumerate(spines):
                if i == 0 or rng.random() < 0.7:
                    link(leaf, s)
    for a, b in itertools.pairwise(leaves):  # MLAG-style peer links
        if rng.random() < 0.4:
            link(a, b)
    hosts: list[Host] = []
    address = iter(range(2, 250))
    for _ in range(rng.randint(3, 6)):
        nics = []
        for n in range(rng.choice([1, 1, 2])):
            cap = rng.choice((100.0, 200.0))
            ports = []
            home = rng.sample(leaves, 2 if rng.random() < 0.5 and len(leaves) > 1 else 1)
            for p, leaf in enumerate(home):
                ports.append(HostPort(f"p{p}", f"10.{40 + p}.{n}.{next(address)}", leaf, f"h{port_no[leaf]}",
                                      cap if rng.random() < 0.8 else rng.choice(GBPS)))
                port_no[leaf] += 1
            nics.append(Nic(fresh("nic"), n, tuple(ports)))
        hosts.append(Host(fresh("host"), tuple(nics)))
    rng.shuffle(switches)
    return build_fabric(fresh("fab"), Hashing(), switches, links, hosts)


def random_job(rng: random.Random, fabric: Fabric, name: str, max_flows: int = 8) -> JobSpec:
    """A ring or pairs job over a few random NICs, at most `max_flows` flows."""
    nics = [(h.name, n.name) for h in fabric.hosts for n in h.nics]
    k = rng.randint(2, min(4, len(nics)))
    chosen = rng.sample(nics, k)
    ranks = tuple(RankSpec(i, h, n) for i, (h, n) in enumerate(chosen))
    qps = rng.choice((1, 1, 2))
    if rng.random() < 0.5:
        traffic = TrafficSpec(Pattern.RING, tuple(range(k)), channels=1, qps_per_connection=qps)
        conns = k
    else:
        pairs = tuple((a, b) for a in range(k) for b in range(k) if a != b and rng.random() < 0.4) or ((0, 1),)
        traffic = TrafficSpec(Pattern.PAIRS, pairs=pairs, channels=1, qps_per_connection=qps)
        conns = len(pairs)
    if conns * qps > max_flows:
        traffic = TrafficSpec(traffic.pattern, traffic.ranks, traffic.pairs, 1, 1)
    return JobSpec(name, ranks, (traffic,))


def demands(fabric: Fabric, active: Mapping[str, list[Flow]]) -> dict[tuple[str, str], Fraction]:
    """API.md's demand, exactly: NIC capacity / flows the NIC sources over all active jobs."""
    count: dict[tuple[str, str], int] = defaultdict(int)
    for flows in active.values():
        for f in flows:
            count[f.src] += 1
    caps = {(h.name, n.name): Fraction(n.capacity_gbps).limit_denominator(1000) for h in fabric.hosts for n in h.nics}
    return {nic: caps[nic] / n for nic, n in count.items()}


def _directed(view: FabricView, path: tuple[str, ...]) -> list[tuple[str, str]]:
    return list(view.directed_links_of(path))


def exact_optimum(fabric: Fabric, name: str, active: Mapping[str, list[Flow]],
                  assigned: Mapping[str, Mapping[FlowKey, Assignment]]) -> float | None:
    """The optimum of job `name` (see the module docstring); None if a flow has no path.

    `active`: every active job's flows (pending ones too: they count in the demand);
    `assigned`: the other jobs' stored assignments (their load is the background)."""
    view = FabricView(fabric)
    demand = demands(fabric, active)
    caps = {(x.name, d): Fraction(x.capacity_gbps).limit_denominator(1000) for x in fabric.links for d in ("ab", "ba")}
    bg: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    for other, plan in assigned.items():
        if other == name:
            continue
        src = {f.key: f.src for f in active.get(other, [])}
        for k, a in plan.items():
            for d in _directed(view, a.path):
                bg[d] += demand[src[k]]
    ports: dict[tuple[str, str], list[str]] = defaultdict(list)
    for p in view.ports.values():
        if view.port_up(p.node):
            ports[(p.host, p.nic)].append(p.node)
    options: list[tuple[Flow, list[list[tuple[str, str]]]]] = []
    for f in active[name]:
        routes = [_directed(view, path) for s in sorted(ports[f.src]) for d in sorted(ports[f.dst])
                  for path in view.equal_cost_paths(s, d)]
        if not routes:
            return None
        options.append((f, routes))
    terms: list[Fraction] = [demand[f.src] / caps[e] for f, routes in options for r in routes for e in r]
    terms += [v / caps[e] for e, v in bg.items()]
    scale = math.lcm(*[t.denominator for t in terms]) if terms else 1
    model = cp_model.CpModel()
    used: dict[tuple[str, str], cp_model.IntVar] = {}
    load: dict[tuple[str, str], list[tuple[int, cp_model.IntVar]]] = defaultdict(list)
    for i, (f, routes) in enumerate(options):
        xs = [model.new_bool_var(f"x{i}_{j}") for j in range(len(routes))]
        model.add_exactly_one(xs)
        for x, r in zip(xs, routes, strict=True):
            for e in r:
                if e not in used:
                    used[e] = model.new_bool_var(f"y{len(used)}")
                model.add_implication(x, used[e])
                load[e].append((int(demand[f.src] / caps[e] * scale), x))
    top = sum(int(t * scale) for t in terms) + 1
    z = model.new_int_var(0, top, "z")
    for e, ts in load.items():
        model.add(sum(c * x for c, x in ts) + int(bg.get(e, Fraction(0)) / caps[e] * scale) * used[e] <= z)
    model.minimize(z)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = 30.0
    status = solver.solve(model)
    assert status == cp_model.OPTIMAL, solver.status_name(status)
    return float(Fraction(solver.value(z), scale))
