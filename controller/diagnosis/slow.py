"""Slow detectors: communication slow (across jobs) and non-communication slow (per communicator).

Both read only durations or differences measured on one host's clock, so host clock skew
cannot read as slowness or lateness, and both demand persistence: a connection or rank must be
slow in a strict majority of the last `slow_window` settled collectives, so a one-off
straggler never alarms. Settled collectives are those every reporting rank finished
(`CommWindow.settled_seqs`): ranks whose records were lost do not silence a communicator.
- Communication slow: each cell of a communicator's rate matrix (`matrix`: the connection's
  `bytes / net_us` over its peers' median, or the span where no `net_us` is reported) at
  most 1/slow_factor is slow. The slow cells of every job are localised together (a degraded
  link slows connections of several jobs, and only together do they name it), the healthy
  connections and the healthy flows of slow connections exonerating what they cross; a slow
  connection whose flows report `net_us` is narrowed to its slow flows.
- Non-communication slow: a late rank spends longer between collectives than its peers (its
  own gap, from the end of its previous collective in any communicator to its next start) and,
  because the others wait for it inside the collective, its own collective is the shortest. A
  gap at least slow_factor times the median, confirmed by the duration shortfall, is lateness.
Pure; no I/O.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.findings import Finding, median, pct
from controller.diagnosis.localize import (
    FlowItem,
    Item,
    Localization,
    Scope,
    localize,
    rank_suspects,
)
from controller.diagnosis.matrix import connection_ratios
from controller.diagnosis.routes import Connection, JobRoutes
from controller.diagnosis.window import CommWindow
from controller.domain.alarms import AlarmKind

MAX_FAULTS = 4  # distinct comm_slow findings per job and evaluation


@dataclass(slots=True)
class SlowCells:
    """One job's verdicts on its rate matrices: persistently slow connections (with their
    median share), healthy ones, and per slow connection its slow and healthy flows."""

    job: str
    config: DiagnosisConfig
    windows: list[CommWindow]
    bad: dict[Connection, float] = field(default_factory=dict)
    good: set[Connection] = field(default_factory=set)
    bad_comms: dict[Connection, set[str]] = field(default_factory=dict)
    bad_flows: dict[Connection, frozenset[int]] = field(default_factory=dict)
    good_flows: set[tuple[Connection, int]] = field(default_factory=set)
    observed: dict[str, int] = field(default_factory=dict)
    sources: dict[str, int] = field(default_factory=dict)
    rank_hosts: dict[int, str] = field(default_factory=dict)


def _persistently(ratios: list[float], limit: float, config: DiagnosisConfig) -> bool:
    return sum(1 for r in ratios if r <= limit) >= config.persistence


def _healthy(ratios: list[float], config: DiagnosisConfig) -> bool:
    # healthy lately too: one turning slow must not exonerate
    return median(ratios) >= config.healthy_ratio and min(ratios[-3:]) >= config.healthy_ratio


def slow_cells(job: str, windows: Sequence[CommWindow], config: DiagnosisConfig) -> SlowCells:
    slow_limit = 1.0 / config.slow_factor
    out = SlowCells(job, config, list(windows))
    for window in windows:
        out.rank_hosts.update(window.rank_hosts)
        ratios = connection_ratios(window, config)
        for source, n in ratios.sources.items():
            out.sources[source] = out.sources.get(source, 0) + n
        for conn, cells in sorted(ratios.cells.items()):
            if len(cells) < config.persistence:
                continue
            out.observed[window.comm] = max(out.observed.get(window.comm, 0), len(cells))
            if _persistently(cells, slow_limit, config):
                out.bad[conn] = min(out.bad.get(conn, 1.0), median(cells))
                out.bad_comms.setdefault(conn, set()).add(window.comm)
                flows = ratios.flows.get(conn, {})
                slow = frozenset(sp for sp, r in flows.items()
                                 if len(r) >= config.persistence
                                 and _persistently(r, slow_limit, config))
                if slow:
                    out.bad_flows[conn] = out.bad_flows.get(conn, frozenset()) | slow
                out.good_flows.update((conn, sp) for sp, r in flows.items()
                                      if sp not in slow and len(r) >= config.persistence
                                      and _healthy(r, config))
            elif _healthy(cells, config):
                out.good.add(conn)
    out.good -= set(out.bad)
    out.good_flows = {(c, sp) for c, sp in out.good_flows if sp not in out.bad_flows.get(c, ())}
    return out


def detect_comm_slow(cells: Sequence[SlowCells], routes: Mapping[str, JobRoutes | None]
                     ) -> list[Finding]:
    """One finding per fault and job: the slow connections of every job are explained
    greedily, the best suspect first, then whatever it does not explain (two faults at once
    give two findings); a suspect that explains slow connections of several jobs gives each
    of them a finding naming it."""
    by_job = {c.job: c for c in cells}
    scope = Scope({c.job: routes.get(c.job) for c in cells},
                  {c.job: c.rank_hosts for c in cells})
    remaining: list[Item] = sorted((c.job, s, d) for c in cells for s, d in c.bad)
    good: list[Item | FlowItem] = [(c.job, s, d) for c in cells for s, d in sorted(c.good)]
    good += [(c.job, s, d, sp) for c in cells for (s, d), sp in sorted(c.good_flows)]
    narrowed = {(c.job, s, d): sports for c in cells for (s, d), sports in c.bad_flows.items()}
    findings: list[Finding] = []
    count: dict[str, int] = {}
    while remaining:
        found = localize(remaining, good, scope, flows=narrowed)
        hit = set(found.explained)
        explained = [i for i in remaining if i in hit] or remaining
        for job in sorted({j for j, _, _ in explained}):
            if count.get(job, 0) >= MAX_FAULTS:
                continue
            count[job] = count.get(job, 0) + 1
            mine = [(s, d) for j, s, d in explained if j == job]
            findings.append(_comm_slow_finding(by_job[job], found, mine, len(good)))
        gone = set(explained)
        remaining = [i for i in remaining if i not in gone]
    return findings


def _comm_slow_finding(cells: SlowCells, found: Localization, explained: list[Connection],
                       healthy: int) -> Finding:
    config = cells.config
    per_comm: dict[str, int] = {}
    for conn in explained:
        for comm in cells.bad_comms[conn]:
            per_comm[comm] = per_comm.get(comm, 0) + 1
    comm = min(per_comm, key=lambda c: (-per_comm[c], c))
    window = next(w for w in cells.windows if w.comm == comm)
    worst = min(explained, key=lambda c: (cells.bad[c], c))
    suspects = found.suspects_for(cells.job)
    first = suspects[0].name if suspects else "nothing"
    others = found.other_jobs(cells.job)
    source = max(cells.sources, key=lambda s: (cells.sources[s], s)) if cells.sources else "net"
    rate = {"flow": "each flow's time on the network", "net": "time on the network",
            "wall": "transfer span"}[source]
    also = f"; it also slows job(s) {', '.join(others)}" if others else ""
    summary = (f"{len(explained)} connection(s) persistently below 1/{config.slow_factor:g} of "
               f"their peers' rate (bytes over {rate}); worst {worst[0]}->{worst[1]} at "
               f"{pct(cells.bad[worst])} over {cells.observed[comm]} collectives; {healthy} "
               f"healthy connection(s) and flow(s) clear other elements; the slow ones share "
               f"{first}{also}")
    evidence: dict[str, object] = {
        "summary": summary,
        "slow_connections": {f"{s}->{d}": round(cells.bad[(s, d)], 3) for s, d in explained},
        "healthy_connections": healthy,
        "window_collectives": cells.observed[comm],
        "slow_factor": config.slow_factor,
        "rate_source": source,
        "equally_likely": found.tied,
        "equally_likely_any_kind": found.ties_any,
    }
    slow_flows = {f"{s}->{d}": sorted(cells.bad_flows[(s, d)]) for s, d in explained
                  if (s, d) in cells.bad_flows}
    if slow_flows:
        evidence["slow_flows"] = slow_flows
    if others:
        evidence["correlated_jobs"] = others
    seq = window.settled_seqs()[-1]
    return Finding(AlarmKind.COMM_SLOW, cells.job, comm, seq, suspects, evidence)


def rank_timelines(windows: Sequence[CommWindow]) -> dict[int, list[int]]:
    """rank -> sorted end times (its own clock) of its finished collectives in any comm."""
    ends: dict[int, list[int]] = {}
    for window in windows:
        for by_rank in window.seqs.values():
            for rank, rec in by_rank.items():
                if rec.t_end_us is not None:
                    ends.setdefault(rank, []).append(rec.t_end_us)
    for values in ends.values():
        values.sort()
    return ends


def _gap_us(ends: list[int], start_us: int) -> float | None:
    """Time the rank spent outside collectives just before `start_us` (compute, mostly)."""
    i = bisect.bisect_right(ends, start_us)
    return None if i == 0 else float(start_us - ends[i - 1])


def _lateness(
    window: CommWindow, timelines: dict[int, list[int]], config: DiagnosisConfig
) -> dict[int, list[float]]:
    """rank -> per collective, its gap over the peers' median gap when late (0 when not)."""
    out: dict[int, list[float]] = {}
    for seq in window.settled_seqs()[-config.slow_window:]:
        gaps: dict[int, float] = {}
        durations: dict[int, float] = {}
        for rank, rec in window.seqs[seq].items():
            gap = _gap_us(timelines.get(rank, []), rec.t_start_us)
            if gap is None or rec.t_end_us is None:
                continue
            gaps[rank] = gap
            durations[rank] = float(rec.t_end_us - rec.t_start_us)
        if len(gaps) < 3:
            continue
        gap_mid = max(median(list(gaps.values())), 1.0)
        dur_mid = median(list(durations.values()))
        for rank in sorted(gaps):
            extra_us = gaps[rank] - gap_mid
            shortfall_us = dur_mid - durations[rank]
            late = (gaps[rank] >= config.slow_factor * gap_mid
                    and extra_us >= config.min_late_us and shortfall_us >= 0.5 * extra_us)
            out.setdefault(rank, []).append(gaps[rank] / gap_mid if late else 0.0)
    return out


def detect_noncomm_slow(
    window: CommWindow,
    timelines: dict[int, list[int]],
    routes: JobRoutes | None,
    config: DiagnosisConfig,
) -> Finding | None:
    """`timelines` from `rank_timelines` over all the job's windows: a rank's gap before a
    collective is measured against its previous collective in any communicator."""
    late: dict[int, float] = {}
    seen = 0
    for rank, factors in sorted(_lateness(window, timelines, config).items()):
        seen = max(seen, len(factors))
        hits = [f for f in factors if f > 0]
        if len(hits) >= config.persistence:
            late[rank] = median(hits)
    if not late:
        return None
    ordered = sorted(late, key=lambda r: (-late[r], r))
    suspects = rank_suspects(ordered, routes, window.rank_hosts)
    top = ordered[0]
    last = window.settled_seqs()[-1]
    op = window.seqs[last][top].op if top in window.seqs[last] else "its collectives"
    own = [median(r) for c, r in connection_ratios(window, config).cells.items()
           if top in c and r]
    rate_share = median(own) if own else None
    rates = ("" if rate_share is None else
             f"; its connections run at {pct(rate_share)} of their peers' median rate")
    summary = (f"rank {top} on {window.rank_hosts.get(top, '?')} arrives late at {op} in comm "
               f"{window.comm}: {late[top]:.1f}x its peers' median time between collectives in "
               f"most of the last {seen}, while its own collectives are the shortest "
               f"(the others wait for it){rates}")
    evidence: dict[str, object] = {
        "summary": summary,
        "late_ranks": {str(r): round(late[r], 2) for r in ordered},
        "window_collectives": seen,
        "connection_rate_share": None if rate_share is None else round(rate_share, 3),
        "slow_factor": config.slow_factor,
    }
    return Finding(AlarmKind.NONCOMM_SLOW, window.job, window.comm, last, suspects, evidence)
