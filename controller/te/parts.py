"""Independent parts of a plan: target jobs that share no switch with each other's jobs.

A batch of new jobs on a fabric of several pods is often several problems that touch
nothing in common: jobs inside pod 1 and jobs inside pod 2 cross different links, load
different NICs, and their plans, bounds and summaries depend only on the jobs of their own
pod. `split` finds those parts so that each can be planned on its own (issue 18: by the
runner `te.planner.plan` is given, in parallel processes or one after the other).

A part is a set of switches closed under the jobs: every target job joins the switches of
every equal-cost path its flows may take (between every leaf of its source NIC and every
leaf of its destination NIC), every active job the switches of the paths it is assigned and
the leaves of its NICs (a NIC's demand is shared by every flow it sends), and two jobs that
share a switch are in one part. Coarser than links on purpose: two jobs in one part may
share no link (a pod's jobs always share its spines here), but two jobs in different parts
never share a link direction, a NIC or a flow's max-min bottleneck: a part planned alone,
with only its own active jobs as background, has the same loads on every link its jobs can
use, the same demands and the same max-min rates as with every job. Its plans are valid and
its bounds proven exactly as one plan's are. They are not always the same figures as one
plan of the whole batch gives (a review found four ways, each a consequence of one plan
seeing the whole batch): one plan's search and CP-SAT only take changes that lower the
batch's overall maximum, so a part that does not hold it is not improved there, and is in
parts; one plan's instance holds every loaded link direction of the batch, which can weaken
its integrality and dual bounds (a part's bound can be higher: still proven, on the same
links); a batch over the route budget gets a window of routes that a part may not need; and a
part of one job is summarised as a job alone (its ECMP figure at once, CP-SAT's bound when
nothing else loads its links). Jobs that cross pods join the pods they cross (and the
core): on a fabric whose jobs all cross pods, or on any two-tier fabric whose jobs cross
leaves, there is one part.
Pure: values in, values out.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controller.domain.jobs import Flow
from controller.te.candidates import Nic
from controller.te.instance import ActiveJob
from controller.topology.graph import FabricView


@dataclass(frozen=True, slots=True)
class Part:
    """Target jobs planned together and the active jobs that are their whole background (in
    the orders given to `split`; a target that is active is in both)."""

    targets: tuple[str, ...]
    active: tuple[str, ...]


class _Switches:
    """Union-find over switch names."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def root(self, s: str) -> str:
        parent = self.parent
        parent.setdefault(s, s)
        r = s
        while parent[r] != r:
            r = parent[r]
        while parent[s] != r:
            parent[s], s = r, parent[s]
        return r

    def join(self, nodes: Iterable[str]) -> str | None:
        first: str | None = None
        for n in nodes:
            r = self.root(n)
            if first is None:
                first = r
            elif r != first:
                a, b = sorted((first, r))
                self.parent[b] = a
                first = a
        return first


_LEAVES: weakref.WeakKeyDictionary[FabricView, dict[Nic, set[str]]] = weakref.WeakKeyDictionary()


def _leaves_of(view: FabricView) -> dict[Nic, set[str]]:
    """The leaves of every NIC's ports (memoised per view: a view never changes)."""
    got = _LEAVES.get(view)
    if got is None:
        got = {}
        for p in view.ports.values():
            got.setdefault((p.host, p.nic), set()).add(p.switch)
        _LEAVES[view] = got
    return got


def apart(view: FabricView, targets: Mapping[str, list[Flow]]) -> bool:
    """Whether the target jobs alone fall in more than one part. Active jobs only join parts,
    never split one, so when this is False `split` has one part whatever the active jobs, and
    its pass over every active job (~10 ms at 1,000 small jobs) can be skipped."""
    sw, anchor, _ = _targets(view, targets)
    return len({sw.root(a) for a in anchor.values()}) + (len(targets) - len(anchor)) > 1


def _targets(view: FabricView, targets: Mapping[str, list[Flow]]
             ) -> tuple[_Switches, dict[str, str], dict[Nic, set[str]]]:
    """The switches joined by the targets' equal-cost paths, a switch of each target (none for
    a target with no NIC on the fabric), and the leaves of every NIC."""
    leaves = _leaves_of(view)
    reach: dict[tuple[str, str], frozenset[str]] = {}

    def between(a: str, b: str) -> frozenset[str]:
        """The switches on some shortest path between two leaves (the leaves themselves when
        none is up)."""
        key = (a, b) if a <= b else (b, a)
        hit = reach.get(key)
        if hit is None:
            da, db = view.distances_to(a), view.distances_to(b)
            total = da.get(b)
            if total is None:
                hit = frozenset((a, b))
            else:
                hit = frozenset(s for s, d in da.items() if d + db.get(s, total + 1) == total)
            reach[key] = hit
        return hit

    sw = _Switches()
    anchor: dict[str, str] = {}
    for name, flows in targets.items():
        nodes: set[str] = set()
        for pair in {(f.src, f.dst) for f in flows}:
            for a in leaves.get(pair[0], ()):
                for b in leaves.get(pair[1], ()):
                    nodes |= between(a, b)
        first = sw.join(sorted(nodes))
        if first is not None:
            anchor[name] = first
    return sw, anchor, leaves


def split(view: FabricView, targets: Mapping[str, list[Flow]], active: Mapping[str, ActiveJob]) -> list[Part]:
    """The target jobs in parts that share no switch (see the module docstring), ordered by
    their first target in `targets`' order; active jobs outside every part are left out."""
    sw, anchor, leaves = _targets(view, targets)
    for name, job in active.items():
        nodes: set[str] = set()
        for f in job.flows:
            nodes |= leaves.get(f.src, set()) | leaves.get(f.dst, set())
        for assigned in job.assignments.values():
            nodes.update(assigned.path[1:-1])
        first = sw.join(sorted(nodes))
        if first is not None:
            if name in anchor:
                first = sw.join((anchor[name], first))
            assert first is not None
            anchor[name] = first
    by_root: dict[str, tuple[list[str], list[str]]] = {}
    order: list[str] = []
    for name in targets:
        if name not in anchor:  # no NIC on the fabric: a part of its own (it fails there, alone)
            by_root[f"\0{name}"] = ([name], [name] if name in active else [])
            order.append(f"\0{name}")
            continue
        r = sw.root(anchor[name])
        if r not in by_root:
            by_root[r] = ([], [])
            order.append(r)
        by_root[r][0].append(name)
    for name in active:
        if name in anchor:
            got = by_root.get(sw.root(anchor[name]))
            if got is not None:
                got[1].append(name)
    return [Part(tuple(by_root[r][0]), tuple(by_root[r][1])) for r in order]
