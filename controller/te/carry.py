"""Which stored lower bounds survive a change, and the proven bound that replaces the others.

A job's `lower_bound` is proven for its instance: its flows with their demands (API.md: a
NIC's capacity over the flows it sources in all active jobs), every candidate route (an up
port of each NIC, an equal-cost path over up links between them) and the other jobs' flows
where they are (its background). A change can only raise that instance's optimum, so the
bound stays proven, when all of these hold:

- its candidates only shrank (`candidates_shrank`): no port of its NICs came up, and for
  every (source leaf, destination leaf) of its port pairs the distance is the same and no
  link that came up lies on a shortest path between the two. Then every equal-cost path now
  was one before (a path of the same length over links that were there). A link going down
  that lengthens a distance does NOT qualify: the longer distance admits paths that were not
  equal-cost before, and the optimum may fall (the MLAG peer link of issue 9: 4.0 -> 2.0);
- its background did not drop on a link direction its candidates cross (`crosses`);
- no demand fell. When demands fell by at most a factor `demand_factor` (a job was posted
  on shared NICs), every utilization, and so the optimum, is at least that factor times what
  it was, which keeps that multiple of the bound proven.

Otherwise the bound is replaced by `pigeonhole`, proven for any state: a NIC's n flows over
its k up ports (of equal capacity) put ceil(n / k) on one port. The planner's refresh then
computes the full bound again. Pure: views and counts in, booleans and numbers out.

Jobs posted and deleted (issue 18) do not rewrite other jobs' bounds: a POST or DELETE costs
the job's own flows, not the number of active jobs. One fabric-wide epoch records what they
did to every bound at once: `log_scale`, the sum of ln(demand_factor) of the jobs posted
(each computed over the NICs it shares: the only demands it lowers), and `drops`, how many
planned jobs left (their flows left some jobs' background). A bound proven at epoch
(l, d) is shown (`shown_bound`) as exp(log_scale - l) times itself while no planned job left
since (the factors compose: every flow keeps at least the product of its old demand), else
as the pigeonhole bound (the crossing test needs the job's candidates: the refresh, not the
request, pays it); never below the pigeonhole bound, never above the stored figure.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping

from controller.domain.fabric import LinkState
from controller.te.candidates import DirectedLink, Nic
from controller.te.instance import demands_gbps
from controller.topology.graph import FabricView


def nic_ports(view: FabricView) -> dict[Nic, list[str]]:
    """Every NIC's port nodes (up or not), sorted."""
    out: dict[Nic, list[str]] = defaultdict(list)
    for p in view.ports.values():
        out[(p.host, p.nic)].append(p.node)
    for ports in out.values():
        ports.sort()
    return dict(out)


def leaf_pairs(view: FabricView, nic_pairs: Iterable[tuple[Nic, Nic]],
               ports: Mapping[Nic, list[str]] | None = None) -> set[tuple[str, str]]:
    """(source leaf, destination leaf) of every pair of up ports of the NIC pairs."""
    ports = ports if ports is not None else nic_ports(view)
    leaves: dict[Nic, set[str]] = {}
    out: set[tuple[str, str]] = set()
    for src, dst in set(nic_pairs):
        for nic in (src, dst):
            if nic not in leaves:
                leaves[nic] = {view.ports[p].switch for p in ports.get(nic, ()) if view.port_up(p)}
        out.update((s, d) for s in leaves[src] for d in leaves[dst])
    return out


def _switch_links_up(view: FabricView) -> set[str]:
    return {x.name for x in view.fabric.links if not x.is_host_link and x.state == LinkState.UP}


def candidates_shrank(before: FabricView, after: FabricView, nics: Collection[Nic],
                      pairs: Collection[tuple[str, str]]) -> bool:
    """Whether every candidate route of a job in `after` was one in `before` (see the module
    docstring). `nics`: the job's NICs; `pairs`: its leaf pairs in `after` (`leaf_pairs`)."""
    ports = nic_ports(after)
    for nic in nics:
        for p in ports.get(nic, ()):
            if after.port_up(p) and not before.port_up(p):
                return False
    came_up = _switch_links_up(after) - _switch_links_up(before)
    added = [(after.links[n].a, after.links[n].b) for n in sorted(came_up)]
    for s, d in pairs:
        to_d = after.distances_to(d)
        dist = to_d.get(s)
        if dist is None:
            continue  # no path now: the job has no candidate there (it fails)
        if before.distances_to(d).get(s) != dist:
            return False
        from_s = after.distances_to(s)
        for u, v in added:
            for x, y in ((u, v), (v, u)):
                if x in from_s and y in to_d and from_s[x] + 1 + to_d[y] == dist:
                    return False
    return True


def crosses(view: FabricView, pairs: Collection[tuple[str, str]], port_links: Collection[str],
            links: Iterable[DirectedLink], max_checks: int = 500_000) -> bool:
    """Whether any of the link directions lies on a candidate route of a job in `view`: one of
    its NICs' port links (`port_links`, either direction), or a switch link direction on a
    shortest path between one of its leaf pairs. Conservative (True) past `max_checks`."""
    switch: set[tuple[str, str]] = set()
    for name, direction in links:
        link = view.links.get(name)
        if link is None:
            continue
        if link.is_host_link:
            if name in port_links:
                return True
            continue
        switch.add((link.a, link.b) if direction == "ab" else (link.b, link.a))
    if not switch:
        return False
    if len(switch) * len(pairs) > max_checks:
        return True
    for s, d in pairs:
        to_d = view.distances_to(d)
        dist = to_d.get(s)
        if dist is None:
            continue
        from_s = view.distances_to(s)
        for u, v in switch:
            if u in from_s and v in to_d and from_s[u] + 1 + to_d[v] == dist:
                return True
    return False


def demand_factor(before: Mapping[Nic, int], after: Mapping[Nic, int]) -> float:
    """The least ratio new demand / old demand over NICs that source flows both before and
    after (1.0 when no demand fell): every flow that exists in both states has at least this
    share of its old demand, so this multiple of a bound proven before is proven after."""
    out = 1.0
    for nic, n in before.items():
        m = after.get(nic, 0)
        if n > 0 and m > n:
            out = min(out, n / m)
    return out


def pigeonhole(view: FabricView, count: Mapping[Nic, int], demand: Mapping[Nic, float],
               ports: Mapping[Nic, list[str]] | None = None) -> float:
    """Proven for any assignment: a NIC's n flows over k equal up ports put ceil(n/k) on one.
    `count`: the job's flows per source NIC; `demand`: per-flow demand of each NIC."""
    ports = ports if ports is not None else nic_ports(view)
    best = 0.0
    for nic, n in count.items():
        up = [p for p in ports.get(nic, ()) if view.port_up(p)]
        caps = {view.ports[p].capacity_gbps for p in up}
        if len(caps) == 1 and nic in demand:
            best = max(best, -(-n // len(up)) * demand[nic] / caps.pop())
    return best


def port_links(view: FabricView, nics: Iterable[Nic], ports: Mapping[Nic, list[str]] | None = None) -> set[str]:
    """Names of the NICs' port links (up or not)."""
    ports = ports if ports is not None else nic_ports(view)
    return {view.link_between(p, view.ports[p].switch).name for nic in nics for p in ports.get(nic, ())}


def bounds_after_jobs_change(view: FabricView, stored: Mapping[str, float],
                             counts_before: Mapping[str, Mapping[Nic, int]],
                             counts_after: Mapping[str, Mapping[Nic, int]],
                             nic_pairs: Mapping[str, Collection[tuple[Nic, Nic]]],
                             gone: Collection[DirectedLink] = (), background_gone: bool = False) -> dict[str, float]:
    """The proven bounds that replace stored ones after jobs were posted or deleted (only
    those that must fall). `stored`: the planned jobs' bounds, proven before the change;
    `counts_*`: flows per NIC of every active job before and after; `gone`: link directions a
    deleted planned job's flows left (its background for the jobs whose candidates cross
    them); `background_gone`: some job's background may have dropped anywhere. A job whose
    background may have dropped gets the pigeonhole bound; the others keep theirs scaled by
    the demand factor (posted jobs lower shared NICs' demands), never below the pigeonhole."""
    before: Counter[Nic] = Counter()
    after: Counter[Nic] = Counter()
    for c in counts_before.values():
        before.update(c)
    for c in counts_after.values():
        after.update(c)
    alpha = demand_factor(before, after)
    demand = demands_gbps(view.fabric, after)
    ports = nic_ports(view)
    out: dict[str, float] = {}
    for name, lb in stored.items():
        floor = pigeonhole(view, counts_after.get(name, {}), demand, ports)
        dropped = background_gone
        if gone and not dropped:
            pairs = nic_pairs.get(name, ())
            nics = {n for pair in pairs for n in pair}
            dropped = crosses(view, leaf_pairs(view, pairs, ports), port_links(view, nics, ports), gone)
        new = floor if dropped else max(alpha * lb, floor)
        if new < lb:
            out[name] = round(new, 9)
    return out


def shown_bound(stored: float, log_ratio: float, dropped: bool, floor: float) -> float:
    """The proven bound of a stored one after the jobs posted and deleted since it was proven
    (see the module docstring): `log_ratio`, the epoch's log_scale now minus then (<= 0);
    `dropped`, a planned job left since; `floor`, the pigeonhole bound now. Rounded down to
    1e-9 (a shown bound is never rounded up)."""
    if not dropped and log_ratio >= 0.0:
        return stored
    new = floor if dropped else max(stored * math.exp(log_ratio) * (1.0 - 1e-12), floor)
    return min(stored, math.floor(new * 1e9) / 1e9)
