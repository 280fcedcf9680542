"""Hang detectors: communication hang and non-communication hang.

A rank whose record for seq k is in flight with no activity (start or any peer's progress) for
`hang_timeout_s` is stalled. Its last activity is on its host's clock; `HangContext` turns it
into controller time (`clocks.HostClocks`), so a host whose clock is seconds off neither hangs
early nor late, and discounts announced pauses: no hang is found during a pause, and a stall
that overlapped one counts from its end. Only a communicator's latest seq can hang (see
`stalled_seq`).
- Some ranks never entered seq k (their latest seq is below k): non-communication hang; the
  missing ranks' hosts are the suspects. Ranks inside a collective of another communicator of
  the job are not stuck outside collectives: when every missing rank is, this communicator is
  a victim and the other one reports the hang; otherwise they are named last. A rank whose
  host's agent is silent (a telemetry gap) is unknown, not missing: silence names nobody.
- Every rank entered (or is unknown): communication hang. Stuck connections, in order of
  evidence: a send still on the network long after its last completion (`net_us` beyond its
  span: RDMA or socket alike); else bytes sent but not received (socket semantics); else, where
  some connections are done, those not done and short of their share (RDMA semantics: both
  ends report the same bytes). Per-flow progress narrows a stuck connection to its stuck flows.
  What the stuck connections share is the suspect; flows that received bytes after the stall
  began show their paths work. Without any such evidence (a coupled ring stalled and nothing
  reports `net_us`) the alarm names no suspect rather than a bystander. Over TCP (the shim's
  per-flow `net_us` until acknowledged, counters from the connection's opening) the flows
  decide; a flow whose receiver got its bytes is stuck on its ACKs' path and left out; where
  nothing is stuck on the network but delivered bytes are never read, the ranks that stopped
  reading are a non-communication hang. Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field, replace

from controller.diagnosis.clocks import HostClocks
from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.findings import Finding
from controller.diagnosis.localize import (
    ALL_FLOWS,
    FlowItem,
    Item,
    Scope,
    localize,
    rank_suspects,
)
from controller.diagnosis.matrix import cumulative
from controller.diagnosis.routes import Connection, JobRoutes
from controller.diagnosis.window import CommWindow
from controller.domain.alarms import AlarmKind, Suspect, SuspectKind
from controller.domain.telemetry import CollectiveRecord, PeerProgress

SHARE_TOLERANCE = 0.02


@dataclass(frozen=True, slots=True)
class HangContext:
    """What hang detection needs besides the windows, for one job at `now_us`."""

    now_us: int
    config: DiagnosisConfig
    clocks: HostClocks
    pauses: tuple[tuple[int, int], ...] = ()  # announced [from_us, until_us), controller time

    def stall_us(self, host: str, last_activity_us: int) -> int:
        """How long a record has been stalled, in controller time, pauses discounted
        (negative while a pause that covers it lasts)."""
        since = self.clocks.to_controller_us(host, last_activity_us)
        for begin, until in self.pauses:
            if begin <= self.now_us and until > since:
                since = max(since, until)
        return self.now_us - since

    def silent(self, host: str) -> bool:
        return self.clocks.silent_since_us(host, self.now_us, self.config.telemetry_gap_us) \
            is not None

    def to_controller_us(self, host: str, host_us: int) -> int:
        return self.clocks.to_controller_us(host, host_us)


def stalled_seq(window: CommWindow, ctx: HangContext) -> int | None:
    """The communicator's latest seq, if it holds an in-flight record and none of its ranks
    has shown activity (entering, a peer's progress, finishing) for the hang timeout. Only the
    latest: once any rank has entered a later collective, the earlier one completed
    everywhere, and an in-flight record left behind in it is stale telemetry (an agent that
    died or lost its last report), not a hang. And collective-wide: a rank that progressed or
    finished lately shows the collective moving, whatever a slower agent last said."""
    if not window.seqs:
        return None
    records = window.seqs[max(window.seqs)].values()
    if all(rec.t_end_us is not None for rec in records):
        return None
    stall = min(ctx.stall_us(rec.host, rec.last_activity_us) for rec in records)
    return max(window.seqs) if stall >= ctx.config.hang_timeout_us else None


def in_flight_ranks(window: CommWindow) -> set[int]:
    """Ranks inside the communicator's latest collective (an in-flight record): waiting in a
    collective, not stuck outside one."""
    if not window.seqs:
        return set()
    return {r for r, rec in window.seqs[max(window.seqs)].items() if rec.t_end_us is None}


@dataclass(frozen=True, slots=True)
class StuckCollective:
    """A communicator whose ranks all entered seq `seq` (or are unknown) and stalled there."""

    job: str
    comm: str
    seq: int
    op: str
    nranks: int
    waiting: tuple[int, ...]
    stuck: tuple[tuple[Connection, int], ...]  # (connection, bytes it is short or holds)
    stall_s: float
    rank_hosts: Mapping[int, str]
    # stuck connection -> source ports of its stuck flows (only where per-flow progress tells
    # them apart; a connection absent here stalled on all its flows as far as we know)
    stalled_flows: Mapping[Connection, frozenset[int]] = field(default_factory=dict)
    method: str = ""  # which evidence named the stuck connections
    stalled_since_us: int | None = None  # controller time of the stuck flows' last progress
    unknown: tuple[int, ...] = ()  # ranks on hosts in a telemetry gap
    # flows (or connections) of the collective that are not stuck: neither proven to work
    # nor stuck, they may only have been idle when the element died
    not_stuck: tuple[tuple[int, int, int], ...] = ()  # (src, dst, sport or -1)
    # stuck flows told by TCP's acknowledgements (the shim's socket transport), where a flow
    # whose receiver got its bytes is stuck on its ACKs' path, not its own (`_pending`)
    sockets: bool = False


def detect_hang(
    window: CommWindow,
    routes: JobRoutes | None,
    ctx: HangContext,
    inside_elsewhere: Set[int],
) -> Finding | StuckCollective | None:
    """A non-communication hang as a finding, a communication hang as the stuck collective
    (to be localised with every job's by `detect_comm_hang`), or None."""
    seq = stalled_seq(window, ctx)
    if seq is None:
        return None
    present = window.seqs[seq]
    latest = window.latest_seq_of()
    behind = [r for r in sorted(latest) if r not in present and latest[r] < seq]
    unknown = [r for r in behind if ctx.silent(window.rank_hosts.get(r, ""))]
    missing = [r for r in behind if r not in unknown]
    unseen = max(0, window.nranks - len(latest))
    waiting = sorted(r for r, rec in present.items() if rec.t_end_us is None)
    stall_s = max(ctx.stall_us(present[r].host, present[r].last_activity_us)
                  for r in waiting) / 1e6
    op = present[waiting[0]].op
    if missing and set(missing) <= inside_elsewhere and not unseen:
        return None  # a victim: the communicator those ranks wait in reports it
    earlier = _stuck_behind(window, ctx, missing, latest) if missing and not unseen else None
    if earlier is not None:
        return earlier
    if missing or unseen:
        return _noncomm_hang(window, routes, seq, op, missing, unseen, waiting, stall_s, latest,
                             inside_elsewhere, unknown)
    found = stuck_connections(present, ctx, previous_records(window, seq))
    if found.method == "not_read" and found.stuck:
        return _not_read(window, routes, seq, op, waiting, stall_s, found)
    return StuckCollective(window.job, window.comm, seq, op, window.nranks, tuple(waiting),
                           tuple(found.stuck), stall_s, dict(window.rank_hosts), found.flows,
                           found.method, found.since_us, tuple(unknown),
                           _not_stuck(present, found), found.sockets)


def _stuck_behind(window: CommWindow, ctx: HangContext, missing: Sequence[int],
                  latest: Mapping[int, int]) -> StuckCollective | None:
    """The ranks that never entered the latest collective are all still inside one earlier
    collective (an in-flight record), every rank reported it, and some of its connections are
    stuck: a communication hang in that collective, not a non-communication hang. A ring rank
    whose own part of a collective is done enters the next one while its peers still wait on
    a dead path (seen on the testbed: two ranks of a 4-ring in seq k+1, two stuck in seq k
    behind a black-holed link). None where that does not hold (a rank stopped between
    collectives keeps its non-communication hang)."""
    seqs = {latest[r] for r in missing}
    if len(seqs) != 1:
        return None
    seq = seqs.pop()
    present = window.seqs.get(seq, {})
    if len(present) != window.nranks or any(present[r].t_end_us is None for r in present if r not in missing) \
            or any(r not in present or present[r].t_end_us is not None for r in missing):
        return None
    found = stuck_connections(present, ctx, previous_records(window, seq))
    if not found.stuck or found.method == "not_read":
        # the stuck connection's sender may have left the collective itself: its bytes were
        # in its socket buffer (over TCP a send completes there), its record of `seq` is final
        # and froze its flows' counters; they run on in its record of the later collective.
        # Only time on the network counts there (its later entry's bytes are the later
        # collective's: short of k's share by construction, sent-not-received meaningless)
        present, previous = _moved_on_sends(window, seq, missing, latest)
        found = stuck_connections(present, ctx, previous, network_only=True) if previous else _Stuck()
        if not found.stuck or not found.method.startswith("net"):
            return None
    waiting = tuple(sorted(missing))
    stall_s = max(ctx.stall_us(present[r].host, present[r].last_activity_us) for r in waiting) / 1e6
    if stall_s * 1e6 < ctx.config.hang_timeout_us:
        return None
    return StuckCollective(window.job, window.comm, seq, present[waiting[0]].op, window.nranks, waiting,
                           tuple(found.stuck), stall_s, dict(window.rank_hosts), found.flows,
                           found.method, found.since_us, (), _not_stuck(present, found), found.sockets)


def _moved_on_sends(window: CommWindow, seq: int, missing: Sequence[int], latest: Mapping[int, int]
                    ) -> tuple[dict[int, CollectiveRecord], dict[int, CollectiveRecord]]:
    """Collective `seq`'s records with, for each rank that left it and is in flight in a later
    one, its sends to ranks still inside `seq` as its later record reports them, where their
    per-flow counters run from the connection's opening (the shim's TCP transport: the same
    sockets, counting on); the baseline of those entries is the rank's final record of `seq`.
    A sender whose last bytes of `seq` sit unacknowledged behind a dead path finished `seq`
    (its writes completed into the socket buffer) with its counters frozen a few ms later; the
    time its flows stay unacknowledged shows only in its later record. Returns (records,
    baselines); no baselines when no rank's sends were taken from a later record."""
    present = dict(window.seqs.get(seq, {}))
    previous = previous_records(window, seq)
    baselines: dict[int, CollectiveRecord] = {}
    inside = set(missing)
    for rank, rec in sorted(present.items()):
        if rank in inside or rec.t_end_us is None or latest.get(rank, seq) <= seq:
            continue
        later = window.seqs.get(latest[rank], {}).get(rank)
        if later is None or later.t_end_us is not None:
            continue
        sends = {p.peer: p for p in later.peers if p.dir == "send" and p.peer in inside and cumulative(p)}
        if not sends:
            continue
        present[rank] = replace(rec, peers=tuple(sends.get(p.peer, p) if p.dir == "send" else p
                                                  for p in rec.peers))
        before = {(p.peer, p.dir): p for p in (previous[rank].peers if rank in previous else ())}
        before.update({(p.peer, "send"): p for p in rec.peers if p.dir == "send" and p.peer in sends})
        baselines[rank] = replace(rec, peers=tuple(before.values()))
    if not baselines:
        return present, {}
    return present, {**previous, **baselines}


def _not_read(window: CommWindow, routes: JobRoutes | None, seq: int, op: str,
              waiting: list[int], stall_s: float, found: _Stuck) -> Finding:
    """Every rank entered; over TCP no byte is stuck on the network, but some ranks stopped
    reading bytes their peers delivered (acknowledged, window-held): their hosts first. The
    network did its part, the rank's process does not drive its communication (stopped, or
    hung inside): a non-communication hang, whatever collective it stopped in."""
    ranks = sorted({dst for (_, dst), _ in found.stuck})
    suspects = rank_suspects(ranks, routes, window.rank_hosts)
    shown = ", ".join(f"{a}->{b}" for (a, b), _ in found.stuck[:8])
    summary = (f"every rank entered {op} seq {seq} of comm {window.comm}; {len(waiting)} of "
               f"{window.nranks} waiting with no progress for {stall_s:.1f} s; rank(s) "
               f"{', '.join(map(str, ranks[:8]))} stopped reading: connection(s) {shown} "
               f"delivered bytes (acknowledged, none left on the network) never received, and "
               f"nothing downstream holds those ranks")
    evidence: dict[str, object] = {
        "summary": summary,
        "stuck_by": ["not_read"],
        "stuck_bytes": {f"{a}->{b}": n for (a, b), n in found.stuck},
        "not_reading_ranks": ranks,
        "waiting_ranks": len(waiting),
        "stalled_s": round(stall_s, 3),
    }
    return Finding(AlarmKind.NONCOMM_HANG, window.job, window.comm, seq, suspects, evidence)


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
    inside_elsewhere: Set[int],
    unknown: list[int],
) -> Finding:
    ordered = sorted(missing, key=lambda r: (r in inside_elsewhere, latest.get(r, -1), r))
    suspects = rank_suspects(ordered, routes, window.rank_hosts)
    shown = ", ".join(str(r) for r in ordered[:8]) + (" ..." if len(ordered) > 8 else "")
    if unseen:
        shown = f"{shown}{', ' if shown else ''}{unseen} never seen"
    summary = (f"rank(s) {shown} never entered {op} seq {seq} of comm {window.comm}; "
               f"{len(waiting)} of {window.nranks} ranks waiting with no progress for "
               f"{stall_s:.1f} s")
    if unknown:
        summary += f"; rank(s) {', '.join(map(str, unknown[:8]))} unknown (telemetry gap)"
    evidence: dict[str, object] = {
        "summary": summary,
        "missing_ranks": ordered,
        "missing_last_seq": {str(r): latest.get(r) for r in ordered},
        "unseen_ranks": unseen,
        "waiting_ranks": len(waiting),
        "stalled_s": round(stall_s, 3),
        "in_other_collective": sorted(set(missing) & set(inside_elsewhere)),
    }
    if unknown:
        evidence["telemetry_gap_ranks"] = unknown
    return Finding(AlarmKind.NONCOMM_HANG, window.job, window.comm, seq, suspects, evidence)


@dataclass(slots=True)
class _Stuck:
    stuck: list[tuple[Connection, int]] = field(default_factory=list)
    flows: dict[Connection, frozenset[int]] = field(default_factory=dict)
    method: str = ""
    since_us: int | None = None
    sockets: bool = False


def _not_stuck(present: Mapping[int, CollectiveRecord], found: _Stuck
               ) -> tuple[tuple[int, int, int], ...]:
    stuck = {c for c, _ in found.stuck}
    out: list[tuple[int, int, int]] = []
    for rank in sorted(present):
        for p in present[rank].peers:
            if p.dir != "send":
                continue
            conn = (rank, p.peer)
            if conn in stuck and conn not in found.flows:
                continue
            if p.flows:
                out.extend((rank, p.peer, f.sport) for f in p.flows
                           if conn not in stuck or f.sport not in found.flows[conn])
            elif conn not in stuck:
                out.append((rank, p.peer, ALL_FLOWS))
    return tuple(out)


def _span_us(p: PeerProgress) -> int:
    if p.t_first_us is None or p.t_last_us is None:
        return 0
    return p.t_last_us - p.t_first_us


def previous_records(window: CommWindow, seq: int) -> dict[int, CollectiveRecord]:
    """Per rank, its record of the latest earlier seq in the window (the baseline of counters
    that run from a connection's opening, see `_flow_baselines`)."""
    out: dict[int, CollectiveRecord] = {}
    for k in sorted((k for k in window.seqs if k < seq), reverse=True):
        for rank, rec in window.seqs[k].items():
            out.setdefault(rank, rec)
    return out


def _flow_baselines(p: PeerProgress, before: PeerProgress | None) -> dict[int, int]:
    """sport -> the flow's `net_us` before this collective, where the flows' counters run from
    the connection's opening (the shim's TCP transport, FORMAT.md §4: they hold more bytes
    than this collective moved) and the same connection's previous record reports them;
    otherwise nothing (counters of this collective only, or no baseline)."""
    if before is None or not cumulative(p):
        return {}
    earlier = {f.sport: (f.net_us, f.bytes) for f in before.flows if f.net_us is not None}
    out: dict[int, int] = {}
    for f in p.flows:
        net, nbytes = earlier.get(f.sport, (None, 0))
        if net is not None and f.net_us is not None and net <= f.net_us and nbytes <= f.bytes:
            out[f.sport] = net
    return out


def stuck_connections(present: Mapping[int, CollectiveRecord], ctx: HangContext,
                      previous: Mapping[int, CollectiveRecord] | None = None,
                      network_only: bool = False) -> _Stuck:
    """The stuck connections of a stalled collective, by the strongest evidence present.
    `previous`: each rank's record of an earlier seq, the baseline of per-flow counters that
    run from the connection's opening. `network_only`: time on the network only (the entries
    of senders that left the collective, whose bytes are a later collective's)."""
    sends: dict[Connection, tuple[PeerProgress, str]] = {}
    before: dict[Connection, PeerProgress] = {}
    for rank, rec in (previous or {}).items():
        for p in rec.peers:
            if p.dir == "send":
                before[(rank, p.peer)] = p
    recvs: dict[Connection, PeerProgress] = {}
    for rank in sorted(present):
        rec = present[rank]
        for p in rec.peers:
            if p.dir == "send":
                sends[(rank, p.peer)] = (p, rec.host)
            else:
                recvs[(p.peer, rank)] = p
    out = _pending(sends, ctx, before, recvs)
    if network_only:
        out.stuck.sort()
        return out
    socket = _sent_not_received(sends, recvs, ctx)  # never with RDMA completions
    have = {c for c, _ in out.stuck}
    added = False
    unread: dict[Connection, int] = {}
    for conn, held in socket.stuck:
        # A sender whose flows report their own network time and none of them is still on
        # the network holds its unreceived bytes in the receiver's buffers (over TCP: acked,
        # window-limited): it waits on its receiver, which waits downstream; not stuck.
        if conn in have:
            continue
        if _flows_clear(sends[conn][0], before.get(conn), ctx):
            unread[conn] = held
            continue
        out.stuck.append((conn, held))
        added = True
        if conn in socket.flows:
            out.flows[conn] = socket.flows[conn]
    if added:
        out.method = "net+sent_not_received" if have else socket.method
        out.since_us = _earliest(out.since_us, socket.since_us)
    out.stuck.sort()
    if not out.stuck and unread:
        # Nothing is stuck on the network, but bytes were delivered and acknowledged and never
        # read: the receivers that stopped reading though their own sends are not held by
        # theirs (a stopped or hung process; the others wait on it, back-pressure upstream).
        holders = {dst for _, dst in unread}
        roots = {dst for dst in holders if not any(src == dst for src, _ in unread)}
        return _Stuck(sorted((c, n) for c, n in unread.items() if c[1] in roots), {}, "not_read",
                      socket.since_us, True)
    if not out.stuck:
        out = _short_of_share(sends, recvs, ctx)
    return out


def _since(ctx: HangContext, host: str, p: PeerProgress, sports: Set[int]) -> int | None:
    """Controller time of the stuck flows' (or the connection's) last progress."""
    times = [f.t_last_us for f in p.flows if f.sport in sports and f.t_last_us is not None]
    host_us = min(times) if times else (p.t_last_us if p.t_last_us is not None else p.t_first_us)
    return None if host_us is None else ctx.to_controller_us(host, host_us)


def _earliest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


_NO_PEER = PeerProgress(-1, "recv", 0, None, None, False)


def _flow_extra(p: PeerProgress, baseline: Mapping[int, int]) -> dict[int, int]:
    """sport -> a flow's time on the network after its last completion in this collective:
    its `net_us` (less the baseline) beyond its span from the collective's first progress to
    the flow's last completion. Flows that report `net_us` only; where the counters run from
    the connection's opening (`cumulative`), flows with a baseline only: without one a flow's
    whole life on the network would read as this collective's (a lost record, the window's
    first seq, a reconnect), which is no evidence."""
    first = p.t_first_us
    since_opening = cumulative(p)
    out: dict[int, int] = {}
    for f in p.flows:
        if f.net_us is None or (since_opening and f.sport not in baseline):
            continue
        span = f.t_last_us - first if f.t_last_us is not None and first is not None else 0
        out[f.sport] = f.net_us - baseline.get(f.sport, 0) - max(0, span)
    return out


def _flows_clear(p: PeerProgress, before: PeerProgress | None, ctx: HangContext) -> bool:
    """Every flow of the send reports its network time and none is stuck on the network."""
    if not p.flows or any(f.net_us is None for f in p.flows):
        return False
    extra = _flow_extra(p, _flow_baselines(p, before))
    return len(extra) == len(p.flows) and all(x < ctx.config.pending_us for x in extra.values())


def _pending(sends: Mapping[Connection, tuple[PeerProgress, str]], ctx: HangContext,
             before: Mapping[Connection, PeerProgress] | None = None,
             recvs: Mapping[Connection, PeerProgress] | None = None) -> _Stuck:
    """Sends on the network well past their last completion: `net_us` counts time with a
    chunk handed to the network and not completed, so beyond `t_last - t_first` it is time
    stuck on the network after the last completion. Where every flow of a send reports its
    own `net_us`, the flows decide: over TCP the connection's `net_us` from the profiler runs
    until the write into the socket buffer, so a sender held by its receiver's window looks
    pending too, while a flow's runs until acknowledged and leaves window-held time out
    (nccl_shim/FORMAT.md); counters from the connection's opening are taken relative to the
    same flow in the previous collective's record.

    Over TCP (flow counters from the connection's opening) a flow whose receiver got every byte
    its sender wrote is stuck on its acknowledgements, not its data: the ACKs' path (the
    reverse 5-tuple, neither planned nor probed) crosses the dead element and the flow's own
    path worked, so it is left out of the stuck ones (its receipt, when after the stall began,
    shows its path works: `working_paths`)."""
    out = _Stuck(method="net")
    limit = ctx.config.pending_us
    for conn, (p, host) in sorted(sends.items()):
        if p.flows and all(f.net_us is not None for f in p.flows):
            extra = _flow_extra(p, _flow_baselines(p, (before or {}).get(conn)))
            sports = frozenset(sp for sp, x in extra.items() if x >= limit)
            if sports and cumulative(p):
                out.sockets = True
                got = {f.sport: f.bytes for f in ((recvs or {}).get(conn) or _NO_PEER).flows}
                sent = {f.sport: f.bytes for f in p.flows}
                sports = frozenset(sp for sp in sports if got.get(sp, -1) < sent[sp])
            if not sports:
                continue
            out.stuck.append((conn, max(extra[sp] for sp in sports)))
            if len(sports) < len(p.flows):
                out.flows[conn] = sports
            out.since_us = _earliest(out.since_us, _since(ctx, host, p, sports))
            continue
        if p.net_us is None or p.net_us - _span_us(p) < limit:
            continue
        out.stuck.append((conn, p.net_us - _span_us(p)))
        sports = frozenset(sp for sp, x in _flow_extra(p, {}).items() if x >= limit)
        if sports and len(sports) < len(p.flows):
            out.flows[conn] = sports
        out.since_us = _earliest(out.since_us, _since(ctx, host, p, sports))
    return out


def _sent_not_received(sends: Mapping[Connection, tuple[PeerProgress, str]],
                       recvs: Mapping[Connection, PeerProgress], ctx: HangContext) -> _Stuck:
    """Socket semantics: a sender's bytes written into its sockets that never arrived."""
    out = _Stuck(method="sent_not_received")
    for conn, (p, host) in sorted(sends.items()):
        r = recvs.get(conn)
        received = 0 if r is None else r.bytes
        if (r is not None and r.done) or p.bytes <= received:
            continue
        out.stuck.append((conn, p.bytes - received))
        sports = stalled_sports(p, r)
        if sports:
            out.flows[conn] = sports
        out.since_us = _earliest(out.since_us, _since(ctx, host, p, sports))
    return out


def _short_of_share(sends: Mapping[Connection, tuple[PeerProgress, str]],
                    recvs: Mapping[Connection, PeerProgress], ctx: HangContext) -> _Stuck:
    """RDMA semantics (a sender's completed bytes equal its receiver's): where some
    connections are done, the ones not done and short of a done one's bytes are stuck."""
    out = _Stuck(method="short_of_share")
    entries: dict[Connection, list[PeerProgress]] = {}
    for conn, (p, _) in sends.items():
        entries.setdefault(conn, []).append(p)
    for conn, r in recvs.items():
        entries.setdefault(conn, []).append(r)
    done = [max(e.bytes for e in es) for es in entries.values() if all(e.done for e in es)]
    if not done:
        return out
    share = max(done)
    for conn, es in sorted(entries.items()):
        moved = min(e.bytes for e in es)
        if all(e.done for e in es) or moved >= share * (1 - SHARE_TOLERANCE):
            continue
        out.stuck.append((conn, share - moved))
        flows = [f for e in es for f in e.flows]
        if flows:
            top = max(f.bytes for f in flows)
            sports = frozenset(f.sport for f in flows if f.bytes < top * (1 - SHARE_TOLERANCE))
            if sports and len(sports) < len({f.sport for f in flows}):
                out.flows[conn] = sports
        if conn in sends:
            p, host = sends[conn]
            out.since_us = _earliest(out.since_us,
                                     _since(ctx, host, p, out.flows.get(conn, frozenset())))
    return out


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


def working_paths(job: str, records: Sequence[CollectiveRecord], after_us: int,
                  ctx: HangContext) -> list[Item | FlowItem]:
    """Connections and flows that received bytes after `after_us` (controller time): their
    paths work. Receive entries only: a socket send completes into a buffer, not the peer."""
    out: list[Item | FlowItem] = []
    for rec in records:
        for p in rec.peers:
            if p.dir != "recv":
                continue
            if p.flows:
                out.extend((job, p.peer, rec.rank, f.sport) for f in p.flows
                           if f.t_last_us is not None
                           and ctx.to_controller_us(rec.host, f.t_last_us) > after_us)
            elif p.t_last_us is not None and \
                    ctx.to_controller_us(rec.host, p.t_last_us) > after_us:
                out.append((job, p.peer, rec.rank))
    return out


def detect_comm_hang(
    stuck: Sequence[StuckCollective],
    evidence: Mapping[str, Sequence[CollectiveRecord]],
    routes: Mapping[str, JobRoutes | None],
    contexts: Mapping[str, HangContext],
    down_links: Mapping[str, str] | None = None,
) -> list[Finding]:
    """One finding per job for its stalled communicators, localised with every job's: a dead
    link stalls several communicators and jobs at once, and only together do their stuck
    connections pin it down. `evidence`: per job, recent records whose receipts after the
    stall exonerate the paths they crossed. `down_links`: links reported down now (name ->
    why), named first where stuck flows cross them (`localize`'s `down`)."""
    down = down_links or {}
    jobs = sorted({s.job for s in stuck})
    scope = Scope({j: routes.get(j) for j in jobs},
                  {j: {r: h for s in stuck if s.job == j for r, h in s.rank_hosts.items()}
                   for j in jobs})
    bad: list[Item] = sorted({(s.job, c[0], c[1]) for s in stuck for c, _ in s.stuck})
    narrowed = _narrowed_flows(bad, stuck)
    good: list[Item | FlowItem] = []
    for job in jobs:
        since = [s.stalled_since_us for s in stuck if s.job == job and s.stalled_since_us]
        if since:
            after = min(since) + contexts[job].config.after_stall_us
            good += working_paths(job, evidence.get(job, ()), after, contexts[job])
    idle: list[FlowItem] = [(s.job, a, b, sp) for s in stuck for a, b, sp in s.not_stuck]
    findings: list[Finding] = []
    remaining, done_jobs = list(bad), set[str]()
    while remaining:
        found = localize(remaining, good, scope, directed=False, flows=narrowed, bystanders=idle,
                         dead=True, directed_links=any(s.sockets for s in stuck), down=down)
        hit = set(found.explained)
        explained = [i for i in remaining if i in hit] or remaining
        for job in sorted({j for j, _, _ in explained} - done_jobs):
            done_jobs.add(job)
            mine = [s for s in stuck if s.job == job]
            suspects = found.suspects_for(job)
            reported = {s.name: down[s.name] for s in suspects[:1]
                        if s.kind == SuspectKind.LINK and s.name in down}
            findings.append(_comm_hang_finding(job, mine, suspects, found.tied,
                                               found.other_jobs(job), narrowed, len(good), reported))
        gone = set(explained)
        remaining = [i for i in remaining if i not in gone]
    for job in jobs:
        if job not in done_jobs:  # stalled, but no connection-level evidence
            mine = [s for s in stuck if s.job == job]
            findings.append(_comm_hang_finding(job, mine, (), 0, [], {}, len(good)))
    return findings


def _comm_hang_finding(job: str, stuck: Sequence[StuckCollective], suspects: tuple[Suspect, ...],
                       tied: int, others: list[str], narrowed: Mapping[Item, frozenset[int]],
                       working: int, reported_down: Mapping[str, str] | None = None) -> Finding:
    main = min(stuck, key=lambda s: (-len(s.stuck), s.comm))
    bad = sorted({c for s in stuck for c, _ in s.stuck})
    held = {f"{a}->{b}": n for s in stuck for (a, b), n in s.stuck}
    comms = ", ".join(sorted(s.comm for s in stuck))
    stall_s = max(s.stall_s for s in stuck)
    unknown = sorted({r for s in stuck for r in s.unknown})
    methods = sorted({m for s in stuck if s.stuck for m in s.method.split("+")})
    how = {"net": "still on the network", "sent_not_received": "sent but never received",
           "short_of_share": "not done and short of their share"}
    gap = f"; rank(s) {', '.join(map(str, unknown[:8]))} unknown (telemetry gap)" if unknown else ""
    if bad:
        shown = ", ".join(f"{a}->{b}" for a, b in bad[:8]) + (" ..." if len(bad) > 8 else "")
        also = f"; the same element stalls job(s) {', '.join(others)}" if others else ""
        also += "".join(f"; link {name} reported down ({why})" for name, why in (reported_down or {}).items())
        summary = (f"every rank entered {main.op} seq {main.seq} of comm {main.comm} and is "
                   f"stalled (comms stalled: {comms}); connection(s) {shown} "
                   f"{' / '.join(how[m] for m in methods)}, no progress for {stall_s:.1f} s; "
                   f"{working} flow(s) received after the stall began{also}{gap}")
    else:
        summary = (f"every rank entered {main.op} seq {main.seq} of comm {main.comm}; "
                   f"{len(main.waiting)} still in it with no progress for {stall_s:.1f} s; no "
                   f"connection shows where (no send left on the network, none sent but not "
                   f"received, none done){gap}")
    evidence: dict[str, object] = {
        "summary": summary,
        "stalled_comms": sorted(s.comm for s in stuck),
        "stuck_bytes": held,
        "stuck_by": methods,
        "working_flows": working,
        "waiting_ranks": len(main.waiting),
        "stalled_s": round(stall_s, 3),
        "equally_likely": tied,
    }
    flows = {f"{a}->{b}": sorted(p) for (j, a, b), p in narrowed.items() if j == job}
    if flows:
        evidence["stalled_flows"] = flows
    if others:
        evidence["correlated_jobs"] = others
    if reported_down:
        evidence["reported_down"] = dict(reported_down)
    if unknown:
        evidence["telemetry_gap_ranks"] = unknown
    return Finding(AlarmKind.COMM_HANG, job, main.comm, main.seq, suspects, evidence)


def _narrowed_flows(bad: Sequence[Item], stuck: Sequence[StuckCollective]
                    ) -> dict[Item, frozenset[int]]:
    """Stalled flows per stuck connection, over all stalled communicators: the union of what
    each says, and nothing (every flow) for a connection that one of them cannot narrow."""
    out: dict[Item, frozenset[int]] = {}
    for item in bad:
        job, conn = item[0], (item[1], item[2])
        sets = [s.stalled_flows.get(conn) for s in stuck
                if s.job == job and any(c == conn for c, _ in s.stuck)]
        if sets and all(x for x in sets):
            out[item] = frozenset().union(*(x for x in sets if x))
    return out
