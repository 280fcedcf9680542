"""The routes C4D localises with after a re-plan moved a running connection's flows: the live
sockets keep their source ports, so the earlier plan's flows of those ports stay, and a hang on
the old path is named there, not on the path the new plan gave ports nobody uses yet."""

from __future__ import annotations

from dataclasses import replace

from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.engine import Diagnoser
from controller.diagnosis.routes import JobRoutes
from controller.domain.alarms import SuspectKind
from controller.services.telemetry import with_earlier_sports
from tests.unit.diagnosis.test_sockets import RING, ROUTES, Ring, _stalled


def _moved(routes: JobRoutes, conn: tuple[int, int], onto: tuple[int, int]) -> JobRoutes:
    """`conn`'s flows moved onto `onto`'s fabric path, with new source ports."""
    moved = []
    for f, g in zip(routes.connections[conn], routes.connections[onto], strict=True):
        links = (f.links[0], *g.links[1:-1], f.links[-1])
        directions = (f.directions[0], *g.directions[1:-1], f.directions[-1]) if f.directions else ()
        moved.append(replace(f, links=links, directions=directions, sport=(f.sport or 0) + 100))
    return JobRoutes(routes.job, routes.rank_hosts, {**routes.connections, conn: tuple(moved)})


def test_earlier_ports_keep_their_paths_after_the_current_flows() -> None:
    new = _moved(ROUTES, (1, 2), (3, 0))
    merged = with_earlier_sports(new, ROUTES)
    got = merged.connections[(1, 2)]
    assert [f.sport for f in got] == [f.sport for f in new.connections[(1, 2)]] + \
        [f.sport for f in ROUTES.connections[(1, 2)]]
    assert got[2:] == ROUTES.connections[(1, 2)]
    for conn in RING:
        if conn != (1, 2):
            assert merged.connections[conn] == ROUTES.connections[conn]
    assert with_earlier_sports(ROUTES, ROUTES) == ROUTES


def test_a_hang_on_the_old_path_is_named_there_after_a_replan() -> None:
    ring = Ring()
    for _ in range(4):
        ring.collective(500_000, {c: 480_000 for c in RING})
    stall_us = 8_000_000
    batches = [*ring.batches, (ring.t + stall_us - 100_000, _stalled(ring, (1, 2), stall_us))]
    new = _moved(ROUTES, (1, 2), (3, 0))
    old_fabric = set(ROUTES.connections[(1, 2)][0].links[1:-1])
    new_fabric = set(new.connections[(1, 2)][0].links[1:-1])
    assert old_fabric.isdisjoint(new_fabric)

    def first(routes: JobRoutes) -> tuple[SuspectKind, str]:
        d = Diagnoser(DiagnosisConfig(hang_timeout_s=6.0))
        for arrival, records in batches:
            d.ingest(records, arrival)
        (finding,) = d.findings({"j": routes}, ring.t + stall_us)
        return finding.suspects[0].kind, finding.suspects[0].name

    kind, name = first(with_earlier_sports(new, ROUTES))
    assert kind == SuspectKind.LINK and name in old_fabric
    assert first(new)[1] not in old_fabric  # the current plan alone points elsewhere
