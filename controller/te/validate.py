"""The solver-free plan validator, run on every plan in every test and before a plan is stored.

It checks a job's assignments against the fabric as it is now and nothing else: every flow
exactly once; NIC ports belong to the flow's NICs; the path is an equal-cost path over links
that are up; `links` names the path's links; the source port is a RoCEv2 port that makes the
hash model (or the probe book, in probed mode) give exactly this path; weights are in [0, 1]
and a connection's weights sum to 1. It never calls a solver and never repairs anything.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from controller.domain.fabric import ROCE_SPORT_MAX, ROCE_SPORT_MIN, HashingMode
from controller.domain.jobs import Assignment, Flow, FlowKey
from controller.topology.graph import FabricView
from controller.topology.hashing import ref_v1_path

WEIGHT_TOLERANCE = 1e-6


def plan_problems(
    view: FabricView,
    flows: Iterable[Flow],
    assignments: Mapping[FlowKey, Assignment],
    probed_sports: Mapping[tuple[str, str, tuple[str, ...]], set[int]] | None = None,
) -> list[str]:
    """Every way the assignments break the rules; [] for a valid plan."""
    found: list[str] = []
    flows_by_key = {f.key: f for f in flows}
    for key in sorted(set(flows_by_key) - set(assignments)):
        found.append(f"flow {key} has no assignment")
    for key in sorted(set(assignments) - set(flows_by_key)):
        found.append(f"assignment {key} is not a flow of the job")
    weights: dict[tuple[int, int], float] = defaultdict(float)
    for key in sorted(set(assignments) & set(flows_by_key)):
        a, f = assignments[key], flows_by_key[key]
        weights[(key.src_rank, key.dst_rank)] += a.weight
        found += _one(view, f, a, probed_sports)
    for (s, d), total in sorted(weights.items()):
        if abs(total - 1.0) > WEIGHT_TOLERANCE:
            found.append(f"connection {s}->{d}: weights sum to {total:.6f}, not 1")
    return found


def _one(
    view: FabricView,
    f: Flow,
    a: Assignment,
    probed: Mapping[tuple[str, str, tuple[str, ...]], set[int]] | None,
) -> list[str]:
    where = f"flow {a.key}"
    src, dst = view.ports.get(a.src_node), view.ports.get(a.dst_node)
    if src is None or (src.host, src.nic) != f.src:
        return [f"{where}: source port {a.src_node} is not on NIC {f.src}"]
    if dst is None or (dst.host, dst.nic) != f.dst:
        return [f"{where}: destination port {a.dst_node} is not on NIC {f.dst}"]
    if not (0.0 <= a.weight <= 1.0):
        return [f"{where}: weight {a.weight} outside [0, 1]"]
    if not (ROCE_SPORT_MIN <= a.udp_sport <= ROCE_SPORT_MAX):
        return [f"{where}: source port {a.udp_sport} outside the RoCEv2 range"]
    if a.path not in view.equal_cost_paths(a.src_node, a.dst_node):
        return [f"{where}: path {a.path} is not an equal-cost path over up links"]
    if a.links != view.links_of(a.path):
        return [f"{where}: links do not match the path"]
    if view.fabric.hashing.mode == HashingMode.MODEL:
        if ref_v1_path(view, a.src_node, a.dst_node, a.udp_sport) != a.path:
            return [f"{where}: source port {a.udp_sport} does not give its path under c4-ref-v1"]
    elif probed is not None and a.udp_sport not in probed.get((a.src_node, a.dst_node, a.path), set()):
        return [f"{where}: no fresh probe saw port {a.udp_sport} take its path"]
    return []
