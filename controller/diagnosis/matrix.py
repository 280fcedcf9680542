"""The rate matrix of a communicator: per collective, each connection's rate as a share of the
median of its peers' in the same collective (a cell of the src x dst matrix), and per flow.

The rate is `bytes / net_us` from the sender's entry wherever the collective's senders report
`net_us`: the time the connection's own chunks were on the network. Where they report it per
flow (`peers[].flows[].net_us`), each flow's rate is compared with the median flow and a cell
is its connection's slowest flow (`"flow"`): a connection's `net_us` counts time once when
its channels overlap, so a connection whose every channel is held back reads up to (channels)
times its flows' rate while a healthy one, whose channels take turns, reads about one flow's;
per flow there is no such bias, and a slow flow also tells which path is slow. NCCL's rings pace every
connection by the slowest one, so the span `t_last - t_first` is about the same on all of them
and hides which one is slow; time on the network does not (a connection held back by its own
path is on the network nearly all the time, one waiting for its neighbour is not). The
receiver's `net_us` is not used: its receive is posted before the sender has data, so it
includes the wait for the peer. Only where fewer than three senders report `net_us` does a
collective fall back to the span from the receiver's entry (`"wall"`), which is blind to which
connection of a coupled ring is slow and counts a late peer's wait as slowness.

Per-flow counters that run from the connection's opening (the shim's TCP transport reports
them so, nccl_shim/FORMAT.md §4: a flow then holds more bytes than the collective moved) are
taken as the difference from the same flow in the rank's latest earlier record that differs: the
rate over the interval between two of the transport's reports. A collective of such a
communicator with too few flow differences has no cell rather than falling back to the
connection's `net_us`, which over sockets runs until the write into the socket buffer.

Each rate is compared with a reference: the median of the upper half of the rates (the median
when all agree). A fault of one host slows both of its ring connections: in a ring of four
that is half of them, and the plain median would sit between the slow and the healthy rates;
the upper half's median is a healthy rate whenever at most half are slow.

Connections moving fewer than `min_conn_bytes` are latency-bound and say nothing. Durations
only (never times of two hosts compared), so clock skew cannot read as slowness. Pure; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from controller.diagnosis.config import DiagnosisConfig
from controller.diagnosis.findings import median
from controller.diagnosis.routes import Connection
from controller.diagnosis.window import CommWindow
from controller.domain.telemetry import PeerProgress

Source = Literal["flow", "net", "wall"]


@dataclass(frozen=True, slots=True)
class SeqRates:
    """One collective's cells: connection -> rate / reference rate (its slowest flow's, per
    flow); per flow (source "flow" only), the flow's rate over the median flow's."""

    source: Source
    cells: dict[Connection, float]
    flows: dict[Connection, dict[int, float]] = field(default_factory=dict)


def reference(values: list[float]) -> float:
    """The rate a connection is compared with: the median of the upper half of `values`."""
    ordered = sorted(values)
    return median(ordered[len(ordered) // 2:])


def cumulative(p: PeerProgress) -> bool:
    """Whether the entry's flows count from the connection's opening, not this collective."""
    # (rounding may give a collective's flows a few bytes more than its entry)
    return bool(p.flows) and sum(f.bytes for f in p.flows) > p.bytes * 1.01 + len(p.flows)


def flow_deltas(window: CommWindow, seq: int, rank: int, p: PeerProgress
                ) -> dict[int, tuple[int, int]]:
    """sport -> (bytes, net_us) of the send entry's flows in this collective: as reported, or,
    for counters from the connection's opening, the difference from the rank's latest earlier
    record of the same peer whose flows report less network time ({} when none does)."""
    if not cumulative(p):
        return {f.sport: (f.bytes, f.net_us) for f in p.flows if f.net_us}
    now = {f.sport: f for f in p.flows if f.net_us}
    for k in sorted((k for k in window.seqs if k < seq), reverse=True):
        rec = window.seqs[k].get(rank)
        if rec is None:
            continue
        for q in rec.peers:
            if q.dir != "send" or q.peer != p.peer:
                continue
            out = {b.sport: (f.bytes - b.bytes, f.net_us - b.net_us)
                   for b in q.flows if (f := now.get(b.sport)) is not None and b.net_us
                   and f.net_us and f.net_us > b.net_us and f.bytes >= b.bytes}
            if out:
                return out
    return {}


def seq_rates(window: CommWindow, seq: int, config: DiagnosisConfig) -> SeqRates | None:
    """The cells of collective `seq`, or None when fewer than three connections tell."""
    net: dict[Connection, float] = {}
    flow_rates: dict[Connection, dict[int, float]] = {}
    wall: dict[Connection, float] = {}
    counters = False  # some sender's flows count from the connection's opening (sockets)
    for rank, rec in window.seqs[seq].items():
        for p in rec.peers:
            if not p.done or p.bytes < config.min_conn_bytes:
                continue
            if p.dir == "send":
                rate = p.net_rate_bytes_per_us
                if rate is None:
                    continue
                net[(rank, p.peer)] = rate
                counters = counters or cumulative(p)
                min_flow = config.min_conn_bytes / max(1, len(p.flows))
                per_flow = {sp: b / n for sp, (b, n) in flow_deltas(window, seq, rank, p).items()
                            if n > 0 and b >= min_flow}
                if per_flow:
                    flow_rates[(rank, p.peer)] = per_flow
            else:
                rate = p.rate_bytes_per_us
                if rate is not None:
                    wall[(p.peer, rank)] = rate
    every_flow = [r for per in flow_rates.values() for r in per.values()]
    if len(flow_rates) >= 3 and len(every_flow) >= 3:
        f_mid = reference(every_flow)
        if f_mid > 0:
            flows = {c: {sp: r / f_mid for sp, r in per.items()} for c, per in flow_rates.items()}
            return SeqRates("flow", {c: min(per.values()) for c, per in flows.items()}, flows)
    if counters:
        return None  # over sockets the connection's net_us is buffer time: no cell
    if len(net) >= 3:
        mid = reference(list(net.values()))
        return SeqRates("net", {c: r / mid for c, r in net.items()}) if mid > 0 else None
    if len(wall) >= 3:
        mid = reference(list(wall.values()))
        return SeqRates("wall", {c: r / mid for c, r in wall.items()}) if mid > 0 else None
    return None


@dataclass(slots=True)
class Ratios:
    """Per connection (and per flow), its cells over the last `slow_window` settled
    collectives, oldest first; `sources` counts collectives per rate source."""

    cells: dict[Connection, list[float]] = field(default_factory=dict)
    flows: dict[Connection, dict[int, list[float]]] = field(default_factory=dict)
    sources: dict[str, int] = field(default_factory=dict)


def connection_ratios(window: CommWindow, config: DiagnosisConfig) -> Ratios:
    out = Ratios()
    for seq in window.settled_seqs()[-config.slow_window:]:
        rates = window.cached(f"rates/{config.min_conn_bytes}", seq,
                              lambda s=seq: seq_rates(window, s, config))  # type: ignore[misc]
        if rates is None:
            continue
        out.sources[rates.source] = out.sources.get(rates.source, 0) + 1
        for conn, ratio in rates.cells.items():
            out.cells.setdefault(conn, []).append(ratio)
        for conn, per in rates.flows.items():
            mine = out.flows.setdefault(conn, {})
            for sport, ratio in per.items():
                mine.setdefault(sport, []).append(ratio)
    return out


def matrix(window: CommWindow, config: DiagnosisConfig) -> dict[str, object]:
    """The matrix as operators read it: median cell per connection over the window."""
    ratios = connection_ratios(window, config)
    cells = [{"src": s, "dst": d, "ratio": round(median(r), 3), "collectives": len(r)}
             for (s, d), r in sorted(ratios.cells.items())]
    return {"comm": window.comm, "sources": dict(sorted(ratios.sources.items())), "cells": cells}
