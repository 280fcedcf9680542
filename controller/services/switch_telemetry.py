"""Switch counters → rates per link direction → the congestion detector, kept with retention.

`POST /v1/telemetry/switches` carries raw monotonic counters (API.md). Ingest checks each poll
against the fabric, turns consecutive polls of a port into per-second rates (`te.counters`
handles wraps and resets; a changed `counter_epoch` — the switch agent saw the switch restart
— gives no rate for that interval), maps each port to its link's directions
(`te.measured`), folds the rates into the congestion detector (`te.congestion`, pure) and
stores, in one transaction: each port's latest counters, one sample per link direction and
interval (raw and smoothed), and each direction's detector state.

Decision — where the series live: in the database (`store.link_telemetry_repo`, migration
0002), not in the leader's memory. Any process may ingest (a switch agent needs no leader and
is never refused with 503), any process answers `measured`, `/series`, `GET /v1/congestion`
and `/metrics` the same, and a new leader inherits the detector's state (EWMA, congested
since when) instead of starting cold — a leader change cannot make congestion "leave" and
flows move back. The cost is a few rows per port and poll (at 100 switches x 64 ports every
10 s, about 640 sample rows per second: fine for PostgreSQL, heavy for the embedded SQLite at
that scale, where the retention keeps it bounded). Samples and states older than
`C4_LINK_SERIES_RETENTION_S` are pruned by the leader's `link-telemetry` worker, which also
ends congestion on directions whose samples stopped (`congestion.expire`).

The per-flow hold-downs (`self.holds`) are the rebalancer's bookkeeping; they live in the
leader's memory until the rebalancer, which owns them, decides otherwise.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter
from sqlalchemy.exc import IntegrityError

from controller.domain.fabric import Fabric
from controller.domain.problems import Problem
from controller.services import collector
from controller.services.clock import now_us
from controller.services.errors import Invalid, NotFound
from controller.services.runtime import Runtime
from controller.services.workers import PeriodicWorker
from controller.settings import Settings
from controller.store import link_telemetry_repo as repo
from controller.store.db import transaction
from controller.te.congestion import (
    CongestionConfig,
    DirectionState,
    HoldDowns,
    Transition,
    expire,
    observe,
)
from controller.te.counters import Sample, rates_per_s
from controller.te.measured import DirectionRates, PortEnd, port_directions, port_map

log = logging.getLogger(__name__)

SAMPLES = Counter("c4_switch_port_samples_total", "Switch port counter samples accepted")
IGNORED = Counter("c4_switch_port_samples_ignored_total", "Switch port samples ignored (unknown switch or port)")
LINK_SAMPLES = Counter("c4_link_samples_total", "Link-direction rate samples derived from switch counters")
TRANSITIONS = Counter("c4_congestion_transitions_total", "Link directions entering or leaving congestion", ["kind"])
PRUNE_EVERY_S = 60.0
WORKER_INTERVAL_S = 5.0


def congestion_config(s: Settings) -> CongestionConfig:
    return CongestionConfig(
        ewma_tau_s=s.congestion_ewma_tau_s, ecn_enter_fraction=s.congestion_ecn_enter_fraction,
        ecn_leave_fraction=s.congestion_ecn_leave_fraction, min_pkts_per_s=s.congestion_min_pkts_per_s,
        pfc_enter_per_s=s.congestion_pfc_enter_per_s, pfc_leave_per_s=s.congestion_pfc_leave_per_s,
        enter_samples=s.congestion_enter_samples, leave_samples=s.congestion_leave_samples,
        min_congested_s=s.congestion_min_congested_s, stale_s=s.congestion_stale_s,
        hold_down_s=s.congestion_hold_down_s, fast_enter_fraction=s.congestion_fast_enter_fraction,
        fast_enter_fall=s.congestion_fast_enter_fall, fast_confirm_min_s=s.congestion_fast_confirm_min_s,
        fast_confirm_span_s=s.congestion_fast_confirm_span_s)


@dataclass(frozen=True, slots=True)
class PortPoll:
    port: str
    counters: Mapping[str, int]
    oper_status: str | None = None  # IF-MIB ifOperStatus, when the agent polled it


@dataclass(frozen=True, slots=True)
class SwitchPoll:
    switch: str
    t_us: int
    ports: Sequence[PortPoll]
    counter_epoch: str | None = None


@dataclass(frozen=True, slots=True)
class IngestResult:
    accepted: int
    ignored: list[Problem] = field(default_factory=list)
    link_samples: int = 0
    transitions: list[Transition] = field(default_factory=list)
    # Congested directions whose lost capacity the detector confirmed with this ingest.
    lost: list[tuple[str, str]] = field(default_factory=list)


def _raw_doc(p: DirectionRates) -> dict[str, Any]:
    return {"bytes_per_s": p.bytes_per_s, "pkts_per_s": p.pkts_per_s, "ecn_marks_per_s": p.ecn_marks_per_s,
            "drops_per_s": p.drops_per_s, "pfc_pauses_per_s": dict(p.pfc_pauses_per_s)}


def _smoothed_doc(state: DirectionState) -> dict[str, Any]:
    doc = state.to_doc()
    del doc["link"], doc["direction"]
    return doc


class SwitchTelemetry:
    """One per process: ingest (any process) and the leader's `link-telemetry` worker."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.config = congestion_config(rt.settings)
        self.holds = HoldDowns()
        self._lock = threading.Lock()
        self._ends: tuple[int, dict[tuple[str, str], PortEnd], frozenset[str]] | None = None
        self._last_prune = 0.0
        self.worker = PeriodicWorker("link-telemetry", WORKER_INTERVAL_S, self.step)
        # Told the transitions of each ingest that had some, or that confirmed lost capacity on a
        # congested direction (the rebalancer wakes on them).
        self.on_transitions: Callable[[list[Transition]], None] | None = None

    def _port_ends(self) -> tuple[Fabric, dict[tuple[str, str], PortEnd], frozenset[str]]:
        with self.rt.sessions() as session:
            got = self.rt.fabric_cache.current(session)
        if got is None:
            raise NotFound("no topology has been stored yet; PUT /v1/topology or POST /v1/topology/generate")
        revision, fabric, _ = got
        cached = self._ends
        if cached is None or cached[0] != revision:
            with collector.lasting():  # O(ports) objects that live until the fabric changes
                cached = (revision, port_map(fabric), frozenset(s.name for s in fabric.switches))
            self._ends = cached
        return fabric, cached[1], cached[2]

    def ingest(self, polls: Sequence[SwitchPoll], unknown: str = "refuse") -> IngestResult:
        """Check every poll against the fabric and keep it. With `unknown="refuse"` a poll naming
        a switch or port the fabric does not link refuses the whole batch (Invalid, nothing
        kept); with `"ignore"` those are left out and listed in the result."""
        fabric, ends, switches = self._port_ends()
        capacity = {link.name: link.capacity_gbps * 1e9 / 8 for link in fabric.links}
        problems = []
        kept: list[SwitchPoll] = []
        for i, poll in enumerate(polls):
            if poll.switch not in switches:
                problems.append(Problem(("samples", i, "switch"), f"unknown switch {poll.switch!r}"))
                continue
            ports = []
            for j, p in enumerate(poll.ports):
                if (poll.switch, p.port) not in ends:
                    problems.append(Problem(("samples", i, "ports", j, "port"),
                                            f"switch {poll.switch!r} has no linked port {p.port!r}"))
                else:
                    ports.append(p)
            kept.append(SwitchPoll(poll.switch, poll.t_us, ports, poll.counter_epoch))
        if problems and unknown != "ignore":
            raise Invalid(problems)
        IGNORED.inc(len(problems))
        with self._lock:
            try:
                result = self._store(kept, ends, capacity)
            except IntegrityError:
                # Another process stored the first poll of one of these ports meanwhile.
                result = self._store(kept, ends, capacity)
        SAMPLES.inc(result.accepted)
        LINK_SAMPLES.inc(result.link_samples)
        for t in result.transitions:
            TRANSITIONS.labels(t.kind).inc()
            log.info("link %s %s %s congestion: %s", t.link, t.direction, t.kind, t.reason)
        if (result.transitions or result.lost) and self.on_transitions is not None:
            self.on_transitions(result.transitions)
        return IngestResult(result.accepted, problems, result.link_samples, result.transitions, result.lost)

    def _store(self, polls: Sequence[SwitchPoll], ends: Mapping[tuple[str, str], PortEnd],
               capacity: Mapping[str, float]) -> IngestResult:
        now = now_us()
        fresh_us = int(self.rt.settings.link_sample_fresh_s * 1e6)
        with transaction(self.rt.sessions) as session:
            stored = repo.port_counters(session, (p.switch for p in polls))
            reporting = repo.switches_reporting_since(session, now - fresh_us) | {p.switch for p in polls}
            latest: dict[tuple[str, str], dict[str, Any]] = {
                k: {"switch": r.switch, "port": r.port, "t_us": r.t_us, "epoch": r.epoch, "counters": r.counters,
                    "rates": r.rates, "interval_us": r.interval_us, "oper_status": r.oper_status}
                for k, r in stored.items()}
            touched: set[tuple[str, str]] = set()
            points: list[DirectionRates] = []
            accepted = 0
            for poll in sorted(polls, key=lambda p: p.t_us):
                for p in poll.ports:
                    key = (poll.switch, p.port)
                    prev = latest.get(key)
                    if prev is not None and prev["t_us"] >= poll.t_us:
                        continue  # late or repeated: changes nothing
                    accepted += 1
                    rates: dict[str, float] = {}
                    if prev is not None and prev["epoch"] == poll.counter_epoch:
                        rates = rates_per_s(Sample(prev["t_us"], prev["counters"]), Sample(poll.t_us, dict(p.counters)))
                    interval_us = None if prev is None else poll.t_us - prev["t_us"]
                    # a sample without a state clears it: a state counts only while it is fresh
                    oper = p.oper_status
                    latest[key] = {"switch": poll.switch, "port": p.port, "t_us": poll.t_us, "epoch": poll.counter_epoch,
                                   "counters": dict(p.counters), "rates": rates, "interval_us": interval_us,
                                   "oper_status": oper}
                    touched.add(key)
                    if rates and interval_us:
                        end = ends[key]
                        points += port_directions(end, poll.switch, p.port, poll.t_us, interval_us / 1e6, rates,
                                                  use_rx=end.peer not in reporting)
            repo.save_port_counters(session, [latest[k] for k in sorted(touched - stored.keys())],
                                    [latest[k] for k in sorted(touched & stored.keys())])
            samples, transitions, lost = self._detect(session, points, capacity)
        return IngestResult(accepted, [], samples, transitions, lost)

    def _detect(self, session: Any, points: Sequence[DirectionRates],
                capacity: Mapping[str, float]) -> tuple[int, list[Transition], list[tuple[str, str]]]:
        if not points:
            return 0, [], []
        docs = repo.direction_states(session, {p.link for p in points}, lock=True)
        states = {k: DirectionState.from_doc(d) for k, d in docs.items()}
        before = dict(states)
        rows = []
        transitions = []
        lost: list[tuple[str, str]] = []
        for point in sorted(points, key=lambda p: (p.t_us, p.link, p.direction)):
            key = (point.link, point.direction)
            state, transition = observe(states.get(key), point, self.config, capacity.get(point.link))
            if state is states.get(key):
                continue  # not newer than what the detector has seen
            was = states.get(key)
            states[key] = state
            if transition is not None:
                transitions.append(transition)
            elif (state.congested and state.lost_confirmed_us is not None
                  and (was is None or was.lost_confirmed_us is None)):
                lost.append(key)
            rows.append({"link": point.link, "direction": point.direction, "t_us": point.t_us,
                         "interval_us": int(point.interval_s * 1e6), "source": point.source, "side": point.side,
                         "raw": _raw_doc(point), "smoothed": _smoothed_doc(state), "congested": state.congested})
        changed = [k for k, s in states.items() if before.get(k) is not s]
        docs_out = {k: {"link": k[0], "direction": k[1], "t_us": states[k].t_us, "congested": states[k].congested,
                        "state": states[k].to_doc()} for k in changed}
        repo.add_samples(session, rows)
        repo.save_direction_states(session, [docs_out[k] for k in sorted(set(changed) - before.keys())],
                                   [docs_out[k] for k in sorted(set(changed) & before.keys())])
        return len(rows), transitions, lost

    def step(self) -> None:
        """The leader's round: end congestion where samples stopped; prune past the retention."""
        now = now_us()
        transitions = []
        with transaction(self.rt.sessions) as session:
            docs = repo.direction_states(session, lock=True, congested_only=True)
            changed = []
            for key, doc in docs.items():
                state, transition = expire(DirectionState.from_doc(doc), now, self.config)
                if transition is not None:
                    transitions.append(transition)
                    changed.append({"link": key[0], "direction": key[1], "t_us": state.t_us,
                                    "congested": False, "state": state.to_doc()})
            repo.save_direction_states(session, [], changed)
        for t in transitions:
            TRANSITIONS.labels(t.kind).inc()
            log.info("link %s %s %s congestion: %s", t.link, t.direction, t.kind, t.reason)
        self.holds.expire(now)
        if now / 1e6 - self._last_prune >= PRUNE_EVERY_S:
            self.prune(now)

    def prune(self, now: int) -> tuple[int, int, int]:
        try:
            fabric, _, _ = self._port_ends()
            links = [link.name for link in fabric.links]
        except NotFound:
            links = []
        before = now - int(self.rt.settings.link_series_retention_s * 1e6)
        with transaction(self.rt.sessions) as session:
            deleted = repo.prune(session, before, links)
        self._last_prune = now / 1e6
        return deleted

    def ports(self, switch: str | None = None) -> list[dict[str, Any]]:
        """The latest counters and per-second rates of every reported port (any process)."""
        with self.rt.sessions() as session:
            rows = repo.latest_ports(session, switch)
        return [{"switch": r.switch, "port": r.port, "t_us": r.t_us, "counters": dict(r.counters),
                 "rates_per_s": dict(r.rates), "counter_epoch": r.epoch, "oper_status": r.oper_status}
                for r in rows]

    def links_reported_down(self, now: int) -> dict[str, str]:
        """`links_reported_down` of the stored fabric (any process may answer)."""
        with self.rt.sessions() as session:
            got = self.rt.fabric_cache.current(session)
            if got is None:
                return {}
            return links_reported_down(session, got[1], now, self.rt.settings.link_sample_fresh_s)


def oper_reported_since(session: Any, since_us: int) -> bool:
    """Whether any switch reported a port's operational state at or after `since_us`."""
    return repo.oper_reported_since(session, since_us)


def links_reported_down(session: Any, fabric: Fabric, now: int, fresh_s: float) -> dict[str, str]:
    """Fabric links reported down, each with why: set down (or drained) by an operator
    (`PATCH /v1/links/{name}`), or with an end whose switch reported it not operationally up
    (IF-MIB ifOperStatus) in a sample at most `fresh_s` old. C4D takes these as strong
    evidence for a hang whose stuck flows cross them: a switch sees its own port go down at
    once, while the rest of the fabric may keep hashing flows onto the link until routing
    converges (a black hole)."""
    out: dict[str, str] = {lk.name: f"state {lk.state.value}" for lk in fabric.links if lk.state.value != "up"}
    rows = repo.ports_not_up_since(session, now - int(fresh_s * 1e6))
    ends = port_map(fabric) if rows else {}
    for switch, port, status in rows:
        end = ends.get((switch, port))
        if end is not None:
            why = f"{switch}:{port} ifOperStatus {status}"
            out[end.link] = f"{out[end.link]}, {why}" if end.link in out else why
    return out
