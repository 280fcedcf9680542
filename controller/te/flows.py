"""A job spec checked against a fabric, and the network flows it implies.

`problems(spec, fabric)` lists every broken rule with the request field it came from (the API
turns them into a 422); `derive_flows(spec)` expands `ring`, `pairs` and `alltoall` into
flows `(src_rank, dst_rank, channel, qp)`, drops same-host connections and merges duplicates.
Pure: no I/O, no planning, and no knowledge of host isolation beyond the set it is given.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from controller.domain.fabric import Fabric
from controller.domain.jobs import Flow, FlowKey, JobSpec, Pattern, RankSpec, TrafficSpec
from controller.domain.problems import Problem


def problems(spec: JobSpec, fabric: Fabric) -> list[Problem]:
    """Every rule the spec breaks on this fabric; [] means it can be planned."""
    found: list[Problem] = []
    if not spec.name:
        found.append(Problem(("name",), "a job needs a non-empty name"))
    if not spec.ranks:
        found.append(Problem(("ranks",), "a job needs at least one rank"))
    nics = {(h.name, n.name) for h in fabric.hosts for n in h.nics}
    hosts = {h.name for h in fabric.hosts}
    seen: set[int] = set()
    for i, r in enumerate(spec.ranks):
        if r.rank < 0:
            found.append(Problem(("ranks", i, "rank"), "rank must be >= 0"))
        if r.rank in seen:
            found.append(Problem(("ranks", i, "rank"), f"duplicate rank {r.rank}"))
        seen.add(r.rank)
        if r.host not in hosts:
            found.append(Problem(("ranks", i, "host"), f"unknown host {r.host!r}"))
        elif (r.host, r.nic) not in nics:
            found.append(Problem(("ranks", i, "nic"), f"host {r.host!r} has no NIC {r.nic!r}"))
    if not spec.traffic:
        found.append(Problem(("traffic",), "a job needs at least one traffic pattern"))
    for j, t in enumerate(spec.traffic):
        found += _traffic_problems(j, t, seen)
    return found


def _traffic_problems(j: int, t: TrafficSpec, ranks: set[int]) -> list[Problem]:
    found: list[Problem] = []
    if t.channels < 1:
        found.append(Problem(("traffic", j, "channels"), "channels must be at least 1"))
    if t.qps_per_connection < 1:
        found.append(Problem(("traffic", j, "qps_per_connection"), "qps_per_connection must be at least 1"))
    for k, r in enumerate(t.ranks):
        if r not in ranks:
            found.append(Problem(("traffic", j, "ranks", k), f"unknown rank {r}"))
    if len(set(t.ranks)) != len(t.ranks):
        found.append(Problem(("traffic", j, "ranks"), "a rank appears twice"))
    if t.pattern == Pattern.RING and len(t.ranks) < 2:
        found.append(Problem(("traffic", j, "ranks"), "a ring needs at least 2 ranks"))
    if t.pattern == Pattern.PAIRS:
        if not t.pairs:
            found.append(Problem(("traffic", j, "pairs"), "pairs needs at least one pair"))
        for k, (a, b) in enumerate(t.pairs):
            for m, r in enumerate((a, b)):
                if r not in ranks:
                    found.append(Problem(("traffic", j, "pairs", k, m), f"unknown rank {r}"))
            if a == b:
                found.append(Problem(("traffic", j, "pairs", k), f"a pair joins rank {a} to itself"))
    return found


def hosts_of(spec: JobSpec) -> list[str]:
    """The job's hosts, sorted by name."""
    return sorted({r.host for r in spec.ranks})


def connections(spec: JobSpec) -> list[tuple[int, int, int, int]]:
    """(src_rank, dst_rank, channels, qps_per_connection) per connection, in spec order."""
    out: list[tuple[int, int, int, int]] = []
    all_ranks = tuple(sorted(r.rank for r in spec.ranks))
    for t in spec.traffic:
        pairs: Iterable[tuple[int, int]]
        if t.pattern == Pattern.RING:
            k = len(t.ranks)
            pairs = [(t.ranks[i], t.ranks[(i + 1) % k]) for i in range(k)]
        elif t.pattern == Pattern.PAIRS:
            pairs = t.pairs
        else:
            members = t.ranks or all_ranks
            pairs = [(a, b) for a in members for b in members if a != b]
        out += [(a, b, t.channels, t.qps_per_connection) for a, b in pairs]
    return out


def derive_flows(spec: JobSpec) -> list[Flow]:
    """The job's network flows, sorted by key; same-host connections give none.

    A connection listed twice (a ring and a pair over the same ranks) is one connection whose
    flows are the union of both listings.
    """
    by_rank: dict[int, RankSpec] = {r.rank: r for r in spec.ranks}
    keys: dict[tuple[int, int], set[tuple[int, int]]] = defaultdict(set)
    for a, b, channels, qps in connections(spec):
        ra, rb = by_rank[a], by_rank[b]
        if ra.host == rb.host:
            continue
        keys[(a, b)].update((c, q) for c in range(channels) for q in range(qps))
    flows: list[Flow] = []
    for (a, b), cq in keys.items():
        ra, rb = by_rank[a], by_rank[b]
        for c, q in cq:
            flows.append(Flow(FlowKey(a, b, c, q), ra.host, ra.nic, rb.host, rb.nic, len(cq)))
    flows.sort(key=lambda f: f.key)
    return flows
