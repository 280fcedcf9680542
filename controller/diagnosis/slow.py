"""Slow detectors: communication slow (per job) and non-communication slow (per communicator).

Both read only differences measured on one host's clock, so host clock skew cannot read as
slowness or lateness, and both demand persistence: a connection or rank must be slow in a strict
majority of the last `slow_window` completed collectives, so a one-off straggler never alarms.
- Communication slow: a connection's rate (bytes over `t_last_us - t_first_us`, receiver side)
  divided by the median rate of its communicator's connections in the same collective is a
  cell of the rate matrix. Cells at most 1/slow_factor are slow; the slow cells of all the
  job's communicators are localised together, the healthy ones exonerating what they cross.
- Non-communication slow: a late rank spends longer between collectives than its peers (its
  own gap, from the end of its previous collective in any communicator to its next start) and, because the others wait for it inside
  the collective, its own collective is the shortest. A gap at least slow_factor times the
  median, confirmed by the duration shortfall, is lateness. Pure; no I/O.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.findings import Finding, median, pct
from controller.diagnosis.localize import Localization, localize, rank_suspects
from controller.diagnosis.routes import Connection, JobRoutes
from controller.diagnosis.window import CommWindow
from controller.domain.alarms import AlarmKind

MAX_FAULTS = 4  # distinct comm_slow findings per job and evaluation


def _seq_ratios(window: CommWindow, seq: int, config: DiagnosisConfig) -> dict[Connection, float]:
    rates: dict[Connection, float] = {}
    for dst, rec in window.seqs[seq].items():
        for p in rec.peers:
            if p.dir == "recv" and p.done and p.bytes >= config.min_conn_bytes:
                rate = p.rate_bytes_per_us
                if rate is not None:
                    rates[(p.peer, dst)] = rate
    if len(rates) < 3:
        return {}
    mid = median(list(rates.values()))
    return {c: r / mid for c, r in rates.items()} if mid > 0 else {}


def connection_ratios(window: CommWindow, config: DiagnosisConfig) -> dict[Connection, list[float]]:
    """Per connection, its share of the peers' median rate in each of the last W collectives."""
    out: dict[Connection, list[float]] = {}
    for seq in window.complete_seqs()[-config.slow_window:]:
        for conn, ratio in _seq_ratios(window, seq, config).items():
            out.setdefault(conn, []).append(ratio)
    return out


def detect_comm_slow(
    windows: Sequence[CommWindow], routes: JobRoutes | None, config: DiagnosisConfig
) -> list[Finding]:
    """One finding per fault: the slow connections are explained greedily, the best suspect
    first, then whatever it does not explain (two faults at once give two findings)."""
    slow_limit = 1.0 / config.slow_factor
    bad: dict[Connection, float] = {}
    good: set[Connection] = set()
    bad_comms: dict[Connection, set[str]] = {}
    observed: dict[str, int] = {}
    rank_hosts: dict[int, str] = {}
    for window in windows:
        rank_hosts.update(window.rank_hosts)
        for conn, ratios in sorted(connection_ratios(window, config).items()):
            if len(ratios) < config.persistence:
                continue
            observed[window.comm] = max(observed.get(window.comm, 0), len(ratios))
            if sum(1 for r in ratios if r <= slow_limit) >= config.persistence:
                bad[conn] = min(bad.get(conn, 1.0), median(ratios))
                bad_comms.setdefault(conn, set()).add(window.comm)
            elif median(ratios) >= config.healthy_ratio and min(ratios[-3:]) >= config.healthy_ratio:
                good.add(conn)  # healthy lately too: one turning slow must not exonerate
    findings: list[Finding] = []
    remaining = sorted(bad)
    healthy = sorted(good - set(bad))
    while remaining and len(findings) < MAX_FAULTS:
        found = localize(remaining, healthy, routes, rank_hosts)
        explained = [c for c in remaining if c in found.explained] or remaining
        findings.append(_comm_slow_finding(windows, found, explained, bad, bad_comms,
                                           len(healthy), observed, config))
        remaining = [c for c in remaining if c not in explained]
    return findings


def _comm_slow_finding(
    windows: Sequence[CommWindow],
    found: Localization,
    explained: list[Connection],
    bad: dict[Connection, float],
    bad_comms: dict[Connection, set[str]],
    healthy: int,
    observed: dict[str, int],
    config: DiagnosisConfig,
) -> Finding:
    per_comm: dict[str, int] = {}
    for conn in explained:
        for comm in bad_comms[conn]:
            per_comm[comm] = per_comm.get(comm, 0) + 1
    comm = min(per_comm, key=lambda c: (-per_comm[c], c))
    window = next(w for w in windows if w.comm == comm)
    worst = min(explained, key=lambda c: (bad[c], c))
    first = found.suspects[0].name if found.suspects else "nothing"
    summary = (f"{len(explained)} connection(s) persistently below 1/{config.slow_factor:g} of "
               f"their peers' median rate; worst {worst[0]}->{worst[1]} at {pct(bad[worst])} over "
               f"{observed[comm]} collectives; {healthy} healthy connection(s) clear other "
               f"elements; the slow ones share {first}")
    evidence: dict[str, object] = {
        "summary": summary,
        "slow_connections": {f"{s}->{d}": round(bad[(s, d)], 3) for s, d in explained},
        "healthy_connections": healthy,
        "window_collectives": observed[comm],
        "slow_factor": config.slow_factor,
        "equally_likely": found.tied,
    }
    seq = window.complete_seqs()[-1]
    return Finding(AlarmKind.COMM_SLOW, window.job, comm, seq, found.suspects, evidence)


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
    for seq in window.complete_seqs()[-config.slow_window:]:
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
    op = window.seqs[window.complete_seqs()[-1]][top].op
    own = [median(r) for c, r in connection_ratios(window, config).items() if top in c and r]
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
    seq = window.complete_seqs()[-1]
    return Finding(AlarmKind.NONCOMM_SLOW, window.job, window.comm, seq, suspects, evidence)
