"""Hang detectors: communication hang and non-communication hang, over one communicator.

A rank whose record for seq k is in flight with no activity (start or any peer's progress) for
`hang_timeout_s` is stalled; only `now` can tell, so these detectors take it. Times are compared
with `now` only at the scale of the timeout, so host clock skew of tens of milliseconds does not
matter. Only a communicator's latest seq can hang (see `stalled_seq`).
- Some ranks never entered seq k (their latest seq is below k): non-communication hang; the
  missing ranks' hosts are the suspects, ranks stalled in another communicator of the job last
  (they are victims of a hang elsewhere, not its cause).
- Every rank entered: communication hang. A connection is stuck when its sender posted bytes
  its receiver never got; what the stuck connections share, and the moving ones avoid, is the
  suspect. Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass

from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.findings import Finding
from controller.diagnosis.localize import localize, rank_suspects
from controller.diagnosis.routes import Connection, JobRoutes
from controller.diagnosis.window import CommWindow
from controller.domain.alarms import AlarmKind
from controller.domain.telemetry import CollectiveRecord


def stalled_seq(window: CommWindow, config: DiagnosisConfig, now_us: int) -> int | None:
    """The communicator's latest seq, if it holds an in-flight record with no activity for the
    hang timeout. Only the latest: once any rank has entered a later collective, the earlier
    one completed everywhere, and an in-flight record left behind in it is stale telemetry (an
    agent that died or lost its last report), not a hang."""
    if not window.seqs:
        return None
    seq = max(window.seqs)
    for rec in window.seqs[seq].values():
        if rec.t_end_us is None and now_us - rec.last_activity_us >= config.hang_timeout_us:
            return seq
    return None


def stalled_ranks(window: CommWindow, config: DiagnosisConfig, now_us: int) -> set[int]:
    seq = stalled_seq(window, config, now_us)
    if seq is None:
        return set()
    return {r for r, rec in window.seqs[seq].items() if rec.t_end_us is None}


def detect_hang(
    window: CommWindow,
    routes: JobRoutes | None,
    config: DiagnosisConfig,
    now_us: int,
    stalled_elsewhere: Set[int],
) -> Finding | StuckCollective | None:
    """A non-communication hang as a finding, a communication hang as the stuck collective
    (to be merged job-wide by `detect_comm_hang`), or None."""
    seq = stalled_seq(window, config, now_us)
    if seq is None:
        return None
    present = window.seqs[seq]
    latest = window.latest_seq_of()
    missing = [r for r in sorted(latest) if r not in present and latest[r] < seq]
    unseen = max(0, window.nranks - len(latest))
    waiting = sorted(r for r, rec in present.items() if rec.t_end_us is None)
    stall_s = max(now_us - present[r].last_activity_us for r in waiting) / 1e6
    op = present[waiting[0]].op
    if missing and set(missing) <= stalled_elsewhere and not unseen:
        return None  # a victim: the communicator where those ranks hang reports it
    if missing or unseen:
        return _noncomm_hang(window, routes, seq, op, missing, unseen, waiting, stall_s, latest,
                             stalled_elsewhere)
    stuck, clean = _stuck_connections(present)
    return StuckCollective(window.comm, seq, op, window.nranks, tuple(waiting), tuple(stuck),
                           tuple(clean), stall_s, dict(window.rank_hosts))


def _noncomm_hang(
    window: CommWindow,
    routes: JobRoutes | None,
    seq: int,
    op: str,
    missing: list[int],
    unseen: int,
    waiting: list[int],
    stall_s: float,
    latest: dict[int, int],
    stalled_elsewhere: Set[int],
) -> Finding:
    ordered = sorted(missing, key=lambda r: (r in stalled_elsewhere, latest.get(r, -1), r))
    suspects = rank_suspects(ordered, routes, window.rank_hosts)
    shown = ", ".join(str(r) for r in ordered[:8]) + (" ..." if len(ordered) > 8 else "")
    if unseen:
        shown = f"{shown}{', ' if shown else ''}{unseen} never seen"
    summary = (f"rank(s) {shown} never entered {op} seq {seq} of comm {window.comm}; "
               f"{len(waiting)} of {window.nranks} ranks waiting with no progress for "
               f"{stall_s:.1f} s")
    evidence: dict[str, object] = {
        "summary": summary,
        "missing_ranks": ordered,
        "missing_last_seq": {str(r): latest.get(r) for r in ordered},
        "unseen_ranks": unseen,
        "waiting_ranks": len(waiting),
        "stalled_s": round(stall_s, 3),
        "stalled_in_other_comm": sorted(set(missing) & set(stalled_elsewhere)),
    }
    return Finding(AlarmKind.NONCOMM_HANG, window.job, window.comm, seq, suspects, evidence)


def _stuck_connections(
    present: dict[int, CollectiveRecord],
) -> tuple[list[tuple[Connection, int]], list[Connection]]:
    """(stuck connections with bytes posted but not received, connections that moved cleanly)."""
    stuck: list[tuple[Connection, int]] = []
    clean: list[Connection] = []
    for src in sorted(present):
        for p in present[src].peers:
            if p.dir != "send":
                continue
            dst_rec = present.get(p.peer)
            recv = None if dst_rec is None else dst_rec.peer(src, "recv")
            received = 0 if recv is None else recv.bytes
            if recv is not None and recv.done:
                clean.append((src, p.peer))
            elif p.bytes > received:
                stuck.append(((src, p.peer), p.bytes - received))
            else:
                clean.append((src, p.peer))
    return stuck, clean


@dataclass(frozen=True, slots=True)
class StuckCollective:
    """A communicator whose ranks all entered seq `seq` and stalled there."""

    comm: str
    seq: int
    op: str
    nranks: int
    waiting: tuple[int, ...]
    stuck: tuple[tuple[Connection, int], ...]  # (connection, bytes sent but not received)
    clean: tuple[Connection, ...]
    stall_s: float
    rank_hosts: Mapping[int, str]


def detect_comm_hang(
    job: str, stuck: Sequence[StuckCollective], routes: JobRoutes | None
) -> Finding | None:
    """One finding for all the job's stalled communicators: a dead link stalls several at once,
    and only together do their stuck connections pin it down."""
    if not stuck:
        return None
    main = min(stuck, key=lambda s: (-len(s.stuck), s.comm))
    bad = sorted({c for s in stuck for c, _ in s.stuck})
    clean = sorted({c for s in stuck for c in s.clean} - set(bad))
    hosts: dict[int, str] = {}
    for s in stuck:
        hosts.update(s.rank_hosts)
    held = {f"{a}->{b}": n for s in stuck for (a, b), n in s.stuck}
    comms = ", ".join(sorted(s.comm for s in stuck))
    stall_s = max(s.stall_s for s in stuck)
    if bad:
        found = localize(bad, clean, routes, hosts, directed=False)
        suspects, tied = found.suspects, found.tied
        shown = ", ".join(f"{a}->{b}" for a, b in bad[:8]) + (" ..." if len(bad) > 8 else "")
        summary = (f"every rank entered {main.op} seq {main.seq} of comm {main.comm} and is "
                   f"stalled (comms stalled: {comms}); connection(s) {shown} hold "
                   f"{sum(held.values())} bytes sent but never received, no progress for "
                   f"{stall_s:.1f} s; {len(clean)} connection(s) show nothing stuck")
    else:
        suspects, tied = rank_suspects(main.waiting, routes, hosts), len(main.waiting)
        summary = (f"every rank entered {main.op} seq {main.seq} of comm {main.comm}; "
                   f"{len(main.waiting)} still in it with no progress for {stall_s:.1f} s")
    evidence: dict[str, object] = {
        "summary": summary,
        "stalled_comms": sorted(s.comm for s in stuck),
        "stuck_bytes": held,
        "clean_connections": len(clean),
        "waiting_ranks": len(main.waiting),
        "stalled_s": round(stall_s, 3),
        "equally_likely": tied,
    }
    return Finding(AlarmKind.COMM_HANG, job, main.comm, main.seq, suspects, evidence)
