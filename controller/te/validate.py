"""The solver-free plan validator, run on every plan in every test and on every plan the
planning service stores, before its transaction commits.

It checks a job's assignments against the fabric as it is now and nothing else: every flow
exactly once; NIC ports belong to the flow's NICs and are up; the path is an equal-cost path
over links that are up (it starts at the source port's leaf, every switch hop is one of the
switch's equal-cost next hops toward the destination leaf, and it ends at the destination
port); `links` names the path's links; the source port is a RoCEv2 port that makes the hash
model give exactly this path (model mode) or that a fresh probe saw take it (probed mode:
`probed_sports`, required there); weights are in [0, 1] and a connection's weights sum to 1.
It never calls a solver and never repairs anything.

`unchanged_since`: a view of the fabric an earlier, validated version of these assignments
was checked on, and `unchanged` the keys whose assignment is the same as then, grouped by
(source port, destination port). Such an assignment is valid now if its ports are up and
every switch on its path has the same equal-cost next hops toward the destination leaf as
then (same hops, same hash decisions), which holds for every flow of a port pair when it
holds for every switch between the pair's leaves: the link re-plan's case, where a 16k-flow
job changes a few hundred assignments and the rest are checked per port pair. The others
are checked in full. Work is shared between flows with the same path or port.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from hashlib import sha256

from controller.domain.fabric import ROCE_SPORT_MAX, ROCE_SPORT_MIN, HashingMode
from controller.domain.jobs import Assignment, Flow, FlowKey
from controller.te.ports import TAILS
from controller.topology.graph import FabricView, Path

WEIGHT_TOLERANCE = 1e-6
ProbedSports = Mapping[tuple[str, str, Path], set[int]]


class _Checker:
    """Per-view memos shared by every assignment of one validation."""

    def __init__(self, view: FabricView, probed: ProbedSports | None, before: FabricView | None) -> None:
        self.view = view
        self.model = view.fabric.hashing.mode == HashingMode.MODEL
        self.probed = probed
        self.before = before
        self.port_info: dict[str, tuple[str, str, str, bool] | None] = {}
        self.choices: dict[tuple[str, ...], list[tuple[int, tuple[str, ...], bytes]]] = {}
        self.addresses: dict[tuple[str, str], bytes] = {}
        self.port_links: dict[str, str] = {}
        self.core_ok: dict[tuple[str, ...], bool] = {}
        self.core_same: dict[tuple[str, ...], bool] = {}
        self.leaves_same: dict[tuple[str, str], bool] = {}
        self.changed_toward: dict[str, list[str]] = {}
        self.links: dict[tuple[str, ...], tuple[str, ...]] = {}  # switch path -> its links

    def _core_ok(self, core: tuple[str, ...]) -> bool:
        hit = self.core_ok.get(core)
        if hit is None:
            view, dst_leaf = self.view, core[-1]
            hit = all(core[i + 1] in view.next_hops(core[i], dst_leaf) for i in range(len(core) - 1))
            self.core_ok[core] = hit
        return hit

    def _core_same(self, core: tuple[str, ...]) -> bool:
        hit = self.core_same.get(core)
        if hit is None:
            assert self.before is not None
            view, before, dst_leaf = self.view, self.before, core[-1]
            hit = all(view.next_hops(u, dst_leaf) == before.next_hops(u, dst_leaf) for u in core[:-1])
            self.core_same[core] = hit
        return hit

    def pair_same(self, src_node: str, dst_node: str) -> bool:
        """Both ports up, and every switch on an equal-cost path between their leaves (in the
        earlier view) has the same next hops toward the destination leaf now."""
        view, before = self.view, self.before
        assert before is not None
        if not (view.port_up(src_node) and view.port_up(dst_node)):
            return False
        s, d = view.ports[src_node].switch, view.ports[dst_node].switch
        hit = self.leaves_same.get((s, d))
        if hit is None:
            changed = self.changed_toward.get(d)
            if changed is None:  # the switches whose next hops toward d differ (few: near the change)
                changed = self.changed_toward[d] = [x for x in view.switches
                                                    if before.next_hops(x, d) != view.next_hops(x, d)]
            to_d, from_s = before.distances_to(d), before.distances_to(s)
            dist = to_d.get(s)
            hit = dist is not None and not any(
                x in from_s and x in to_d and from_s[x] + to_d[x] == dist for x in changed)
            self.leaves_same[(s, d)] = hit
        return hit

    def one_since(self, a: Assignment) -> bool:
        """An unchanged assignment still valid: ports up, its switches' next hops unchanged."""
        view = self.view
        return view.port_up(a.src_node) and view.port_up(a.dst_node) and self._core_same(a.path[1:-1])

    def _choices(self, core: tuple[str, ...]) -> list[tuple[int, tuple[str, ...], bytes]]:
        """The switch hops of a (valid) switch path where the hash chooses: (index in the node
        path, next hops, seed prefix)."""
        hit = self.choices.get(core)
        if hit is None:
            view, dst_leaf = self.view, core[-1]
            hit = []
            for i, here in enumerate(core[:-1]):
                hops = view.next_hops(here, dst_leaf)
                if len(hops) > 1:
                    hit.append((i + 1, hops, f"{view.switches[here].ecmp_seed}|".encode()))
            self.choices[core] = hit
        return hit

    def _hashes_onto(self, a: Assignment, core: tuple[str, ...]) -> bool:
        """`c4-ref-v1` gives exactly `a.path` for `a.udp_sport` (the path's switch hops are
        known to be equal-cost next hops already)."""
        choices = self._choices(core)
        if not choices:
            return True
        path = a.path
        ends = self.addresses.get((a.src_node, a.dst_node))
        if ends is None:
            ends = self.addresses[(a.src_node, a.dst_node)] = (
                f"{self.view.ports[a.src_node].address}|{self.view.ports[a.dst_node].address}|17|".encode())
        tail = ends + TAILS[a.udp_sport - ROCE_SPORT_MIN]
        for i, hops, seed in choices:
            h = int.from_bytes(sha256(seed + tail).digest()[:8], "big")
            if hops[h % len(hops)] != path[i + 1]:
                return False
        return True

    def _port_link(self, node: str, leaf: str) -> str:
        name = self.port_links.get(node)
        if name is None:
            name = self.port_links[node] = self.view.link_between(node, leaf).name
        return name

    def _port(self, node: str) -> tuple[str, str, str, bool] | None:
        """A port node's (host, NIC, leaf, up), or None if the fabric has no such port."""
        hit = self.port_info.get(node, 0)
        if hit == 0:
            p = self.view.ports.get(node)
            hit = self.port_info[node] = None if p is None else (p.host, p.nic, p.switch, self.view.port_up(node))
        return hit  # type: ignore[return-value]

    def one(self, f: Flow, a: Assignment, same: bool) -> str | None:
        view = self.view
        src, dst = self._port(a.src_node), self._port(a.dst_node)
        if src is None or src[0] != f.src_host or src[1] != f.src_nic:
            return f"flow {a.key}: source port {a.src_node} is not on NIC {f.src}"
        if dst is None or dst[0] != f.dst_host or dst[1] != f.dst_nic:
            return f"flow {a.key}: destination port {a.dst_node} is not on NIC {f.dst}"
        if not (src[3] and dst[3]):
            return f"flow {a.key}: a NIC port of the flow is not up"
        ok = (src[2], dst[2])
        if not (0.0 <= a.weight <= 1.0):
            return f"flow {a.key}: weight {a.weight} outside [0, 1]"
        if not (ROCE_SPORT_MIN <= a.udp_sport <= ROCE_SPORT_MAX):
            return f"flow {a.key}: source port {a.udp_sport} outside the RoCEv2 range"
        path = a.path
        if len(path) < 3 or path[0] != a.src_node or path[-1] != a.dst_node or path[1] != ok[0] or path[-2] != ok[1]:
            return f"flow {a.key}: path {path} is not an equal-cost path over up links"
        core = path[1:-1]
        if same and self._core_same(core):
            return None  # validated before on a fabric where its switches had the same next hops
        if not self._core_ok(core):
            return f"flow {a.key}: path {path} is not an equal-cost path over up links"
        # links: the port links (per port) and the switch links (per switch path, shared)
        head, tail = self._port_link(a.src_node, ok[0]), self._port_link(a.dst_node, ok[1])
        mid = self.links.get(core)
        if mid is None:
            mid = self.links[core] = view.links_of(core)
        got = a.links
        if len(got) != len(mid) + 2 or got[0] != head or got[-1] != tail or got[1:-1] != mid:
            return f"flow {a.key}: links do not match the path"
        if self.model:
            if not self._hashes_onto(a, core):
                return f"flow {a.key}: source port {a.udp_sport} does not give its path under c4-ref-v1"
        elif self.probed is None:
            return f"flow {a.key}: probed mode and no probe table to check the source port against"
        elif a.udp_sport not in self.probed.get((a.src_node, a.dst_node, path), ()):
            return f"flow {a.key}: no fresh probe saw port {a.udp_sport} take its path"
        return None


def plan_problems(
    view: FabricView,
    flows: Iterable[Flow],
    assignments: Mapping[FlowKey, Assignment],
    probed_sports: ProbedSports | None = None,
    unchanged_since: FabricView | None = None,
    unchanged: Mapping[tuple[str, str], Collection[FlowKey]] | None = None,
) -> list[str]:
    """Every way the assignments break the rules; [] for a valid plan (see the module
    docstring for `unchanged_since`; `unchanged` groups those unchanged flows by their
    (source port, destination port))."""
    found: list[str] = []
    flow_list = list(flows)
    flows_by_key = {f.key: f for f in flow_list}
    keys = assignments.keys()
    for key in sorted(flows_by_key.keys() - keys):
        found.append(f"flow {key} has no assignment")
    for key in sorted(keys - flows_by_key.keys()):
        found.append(f"assignment {key} is not a flow of the job")
    checker = _Checker(view, probed_sports, unchanged_since)
    same: set[FlowKey] = set()
    if unchanged_since is not None and unchanged:
        # A port pair whose ports are up and whose switches (every switch on an equal-cost
        # path between its leaves, then) kept their next hops keeps every path and every
        # hash decision: its unchanged flows are valid as they were, not looked at one by one.
        for pair, group in unchanged.items():
            if checker.pair_same(*pair):
                same.update(group)
            else:
                for key in group:
                    a = assignments.get(key)
                    if a is not None and checker.one_since(a):
                        same.add(key)
    touched: set[tuple[int, int]] = set()
    for key in (keys & flows_by_key.keys()) - same:
        touched.add((key.src_rank, key.dst_rank))
        problem = checker.one(flows_by_key[key], assignments[key], False)
        if problem is not None:
            found.append(problem)
    # The weights of connections none of whose flows changed are as they were.
    weights: dict[tuple[int, int], float] = defaultdict(float)
    if touched:
        for f in flow_list:
            conn = (f.key.src_rank, f.key.dst_rank)
            if conn in touched and f.key in assignments:
                weights[conn] += assignments[f.key].weight
    for (s, d), total in sorted(weights.items()):
        if abs(total - 1.0) > WEIGHT_TOLERANCE:
            found.append(f"connection {s}->{d}: weights sum to {total:.6f}, not 1")
    return sorted(found)
