"""After a link change, for the socket transport: which probes are stale, and new weights for
the connections that stay open. Pure: views, assignments, probes and demands in, values out.

Why. A TCP socket keeps its source port for life. When a spine link goes down and routing
converges, every switch whose next-hop set toward a leaf changed re-hashes *all* the flows it
forwards there (Linux and most ASICs use hash-threshold, not resilient hashing): flows move
that never touched the dead link, and the controller's port -> path map for every pair with an
equal-cost path over that link is stale. A re-plan that gives the broken flows new source
ports reaches only the next connection; the live ones keep their sockets and the kernel's new
hash (on the testbed: a planned ring went 0.95 -> 0.65 of ideal and stayed there).

What c4 does (`services.failover`):

1. `stale_pairs`: the port pairs (of active jobs' flows) with an equal-cost path over the
   changed link, in the fabric with that link up. Their probes are stale from the change on;
   the agents are asked to probe them again at once (`GET /v1/probes/requests`).
2. When every stale pair of a job has fresh probes, `reweight`: every flow keeps the source
   port its live socket has (the port it had when the link changed), its path becomes what
   the fresh probe of that port says, and the weights inside each NCCL connection (one
   channel's flows, `(src_rank, dst_rank, channel)`) are chosen by a linear program that
   minimises the highest utilization of any link direction (the other jobs' planned load
   fixed), then, at that utilization, stays as close to equal weights as it can. The shim
   applies weights to live sockets when the ports are the same (`c4_on_assign_update`), so
   the pushed assignment takes effect from the next message, without a reconnect.

A connection with one flow cannot shift anything: weights help only where a channel has
two or more flows (`qps` >= 2), on different paths after the re-hash.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from controller.domain.jobs import Assignment, Flow, FlowKey
from controller.te.candidates import DirectedLink, Nic
from controller.te.probes import ProbeBook
from controller.te.weights import balance
from controller.topology.graph import FabricView

Connection = tuple[int, int, int]  # (src_rank, dst_rank, channel): one NCCL connection's sockets


def stale_pairs(view_up: FabricView, link: str, pairs: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
    """The `(src node, dst node)` port pairs with an equal-cost path over `link` in `view_up`
    (the fabric with that link up): their switches' next-hop sets changed with it."""
    out = set()
    for s, d in set(pairs):
        if any(link in view_up.links_of(p) for p in view_up.equal_cost_paths(s, d)):
            out.add((s, d))
    return out


@dataclass(frozen=True, slots=True)
class Reweighted:
    assignments: dict[FlowKey, Assignment]
    max_utilization: float  # of the link directions these flows cross, after
    changed: int  # flows whose path, port or weight changed
    unknown: tuple[FlowKey, ...] = ()  # flows whose port no fresh probe covers (nothing done then)


def _connection(k: FlowKey) -> Connection:
    return (k.src_rank, k.dst_rank, k.channel)


def reweight(view: FabricView, flows: Iterable[Flow], assignments: Mapping[FlowKey, Assignment],
             live_ports: Mapping[FlowKey, int], book: ProbeBook, demand: Mapping[Nic, float],
             background: Mapping[DirectedLink, float], capacity: Mapping[DirectedLink, float],
             eps: float = 1e-9) -> Reweighted:
    """New assignments keeping each flow's live port (`live_ports`, else its assigned one),
    on the path the fresh probes give that port, with weights per connection from the LP
    (module doc). `background`: load per link direction of everything else (Gb/s);
    `capacity`: per link direction (Gb/s). A flow whose port maps to no fresh path, or to one
    not up in `view`, is listed in `unknown` and nothing is changed."""
    flows = list(flows)
    src_of = {f.key: f.src for f in flows}
    new: dict[FlowKey, Assignment] = {}
    unknown = []
    for f in flows:
        a = assignments[f.key]
        port = live_ports.get(f.key, a.udp_sport)
        path = book.path_of(a.src_node, a.dst_node, port)
        if path is None or path not in view.equal_cost_paths(a.src_node, a.dst_node):
            unknown.append(f.key)
            continue
        new[f.key] = replace(a, udp_sport=port, path=path, links=view.links_of(path))
    if unknown:
        return Reweighted(dict(assignments), 0.0, 0, tuple(sorted(unknown)))
    conns: dict[Connection, list[FlowKey]] = defaultdict(list)
    for k in sorted(new):
        conns[_connection(k)].append(k)
    share: dict[Connection, float] = {}
    load: dict[DirectedLink, list[tuple[float, FlowKey]]] = defaultdict(list)
    for c, keys in conns.items():
        total = sum(assignments[k].weight for k in keys)
        share[c] = total
        # The connection's bytes: its flows' planned demand together, split by the weights.
        dem = sum(demand.get(src_of[k], 0.0) for k in keys)
        for k in keys:
            for d in view.directed_links_of(new[k].path):
                load[d].append((dem / total if total > 0 else 0.0, k))
    got = balance(conns, share, load, background, capacity, eps)
    if got is None:
        return Reweighted(dict(assignments), 0.0, 0, ())
    out = {k: replace(a, weight=float(got.weights[k])) for k, a in new.items()}
    util = got.max_utilization
    changed = sum(1 for k, a in out.items() if a != assignments[k])
    return Reweighted(out, util, changed)
