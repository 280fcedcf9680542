"""Fault cases on the simulator's fabric that need a search: a link two jobs share.

Two single-ring jobs of `nranks` ranks each, placed alternately over the hosts of a
leaf-spine fabric (job A on hosts 0, 2, 4, ..., job B on 1, 3, 5, ... in a shuffled ring
order), one flow per connection. A link is shared when exactly one connection of each job
crosses it in the same direction and the two connections cross nothing else in common: each
job alone then has one slow connection, which its endpoints explain as well as the link, and
only the two together name it. Used by tests and the benchmark; pure and deterministic.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from controller.diagnosis.routes import JobRoutes
from controller.diagnosis.simfabric import Fault
from controller.diagnosis.simulator import SimConfig


@dataclass(frozen=True, slots=True)
class SharedLink:
    jobs: tuple[SimConfig, SimConfig]
    link: str
    direction: str

    def with_fault(self, fault: Fault) -> tuple[SimConfig, SimConfig]:
        return (replace(self.jobs[0], faults=(fault,)), replace(self.jobs[1], faults=(fault,)))


def _crossing(routes: JobRoutes, link: str, direction: str) -> list[tuple[int, int]]:
    return [c for c, flows in sorted(routes.connections.items())
            if any((lk, dr) == (link, direction) for f in flows for lk, dr in f.directed_links())]


def shared_link(base: SimConfig, seed: int, tries: int = 50) -> SharedLink | None:
    """The first (fabric seed, link) from `seed` on where the two jobs share exactly one link."""
    n = base.nranks
    for attempt in range(tries):
        s = seed * 1000 + attempt
        order = list(range(n))
        random.Random(s).shuffle(order)
        a = replace(base, job="job-a", seed=s, workload="ring", channels=1,
                    placement=tuple(2 * r for r in order))
        b = replace(base, job="job-b", seed=s, workload="ring", channels=1,
                    placement=tuple(2 * r + 1 for r in reversed(order)))
        ra = a.fabric().routes(a.job, _ring(n), 1)
        rb = b.fabric().routes(b.job, _ring(n), 1)
        links = sorted({(lk, dr) for r in (ra, rb) for fl in r.connections.values() for f in fl
                        for lk, dr in f.directed_links() if lk.startswith("leaf")})
        for link, direction in links:
            hit_a, hit_b = _crossing(ra, link, direction), _crossing(rb, link, direction)
            if len(hit_a) != 1 or len(hit_b) != 1:
                continue
            pa = set(ra.connections[hit_a[0]][0].directed_links())
            pb = set(rb.connections[hit_b[0]][0].directed_links())
            if pa & pb == {(link, direction)}:
                return SharedLink((a, b), link, direction)
    return None


def _ring(n: int) -> list[tuple[int, int]]:
    return [(r, (r + 1) % n) for r in range(n)]
