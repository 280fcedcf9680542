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
  suspect. When both ends of a stuck connection report per-flow progress (`peers[].flows`),
  only the flows holding bytes sent but not received are its suspects' source: their planned
  links (matched by source port) are crossed, not those of the flows that delivered their
  share. Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field

from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.findings import Finding
from controller.diagnosis.localize import localize, rank_suspects
from controller.diagnosis.routes import Connection, JobRoutes
from controller.diagnosis.window import CommWindow
from controller.domain.alarms import AlarmKind
from controller.domain.telemetry import CollectiveRecord, PeerProgress


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
    stuck, clean, stalled_flows = _stuck_connections(present)
    return StuckCollective(window.comm, seq, op, window.nranks, tuple(waiting), tuple(stuck),
                           tuple(clean), stall_s, dict(window.rank_hosts), stalled_flows)


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
) -> tuple[list[tuple[Connection, int]], list[Connection], dict[Connection, frozenset[int]]]:
    """(stuck connections with bytes posted but not received, connections that moved cleanly,
    the stalled flows' source ports of the stuck connections that report per-flow progress)."""
    stuck: list[tuple[Connection, int]] = []
    clean: list[Connection] = []
    stalled_flows: dict[Connection, frozenset[int]] = {}
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
                sports = stalled_sports(p, recv)
                if sports:
                    stalled_flows[(src, p.peer)] = sports
            else:
                clean.append((src, p.peer))
    return stuck, clean, stalled_flows


def stalled_sports(send: PeerProgress, recv: PeerProgress | None) -> frozenset[int]:
    """Source ports of a stuck connection's flows that hold bytes sent but never received: the
    sender's per-flow bytes (its share of what it posted) against the receiver's, by sport.
    Empty (cannot tell: use every flow) unless both ends report the same flows."""
    if recv is None or not send.flows or not recv.flows:
        return frozenset()
    got = {f.sport: f.bytes for f in recv.flows}
    if len(got) != len(recv.flows) or set(got) != {f.sport for f in send.flows}:
        return frozenset()
    return frozenset(f.sport for f in send.flows if f.bytes > got[f.sport])


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
    # stuck connection -> source ports of its flows that stalled (only where per-flow progress
    # tells them apart; a connection absent here stalled on all its flows as far as we know)
    stalled_flows: Mapping[Connection, frozenset[int]] = field(default_factory=dict)


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
    narrowed = _narrowed_flows(bad, stuck)
    if bad:
        found = localize(bad, clean, routes, hosts, directed=False, flows=narrowed)
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
    if narrowed:
        evidence["stalled_flows"] = {f"{a}->{b}": sorted(p) for (a, b), p in narrowed.items()}
    return Finding(AlarmKind.COMM_HANG, job, main.comm, main.seq, suspects, evidence)


def _narrowed_flows(
    bad: Sequence[Connection], stuck: Sequence[StuckCollective]
) -> dict[Connection, frozenset[int]]:
    """Stalled flows per stuck connection, over all stalled communicators: the union of what
    each says, and nothing (every flow) for a connection that one of them cannot narrow."""
    out: dict[Connection, frozenset[int]] = {}
    for conn in bad:
        sets = [s.stalled_flows.get(conn) for s in stuck if any(c == conn for c, _ in s.stuck)]
        if sets and all(x for x in sets):
            out[conn] = frozenset().union(*(x for x in sets if x))
    return out
