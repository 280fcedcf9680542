"""Telemetry simulator: the record streams of a training job on NCCL, with injectable faults.

Ranks loop compute -> collective over a workload's communicators. Each collective's bytes move
with the chunk-level physics of `simphysics` (bounded slots per connection, rings forward
chunk by chunk so the slowest connection paces the ring, alltoall and pairs uncoupled, RDMA or
socket completions). Records carry what the shim reports: `t_start_us` when the rank entered,
`t_first_us` when this rank's proxy op started (so a receiver's span includes waiting for a
late peer), `t_last_us` at the last completion, `net_us` (time this connection's chunks were
on the network) and per-flow progress, all stamped on the host's own clock (skewed by up to
`skew_us`). Agents re-send in-flight records every `resend_period_us`, batch within
`batch_delay_us`, post a heartbeat every `heartbeat_period_us`, may lose or duplicate
records, and may go silent for a while (`AgentGap`). A checkpoint makes some ranks pause while
the others wait in the next collective, and is announced as a pause when `announce` is set.

Workloads: `ring` (one world ring, as a job with one ring pattern), `rings` (two world rings,
one data-parallel ring per position within a leaf),
`mixed` (the same rings with sizes from 512 KiB to `world_bytes` interleaved), `moe` (a world
ring and expert-parallel alltoalls with per-peer imbalance of +-`moe_imbalance`), `pp`
(pipeline-parallel stages exchanging activations and gradients by pairs, then a world ring).
Seeded `random.Random`; no I/O, no clock. Output: `SimRun`, deliveries sorted by arrival.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from controller.diagnosis.routes import Connection, JobRoutes
from controller.diagnosis.simfabric import (
    SPORT_BASE,
    Fault,
    FaultMap,
    SimFabric,
    ring_edges,
)
from controller.diagnosis.simphysics import (
    INF,
    Finals,
    Physics,
    Transfer,
    chunk_sizes,
    finals,
    ring_sizes,
    side_at,
    simulate_transfer,
)
from controller.domain.telemetry import CollectiveRecord, FlowProgress, PeerProgress

Workload = Literal["ring", "rings", "mixed", "moe", "pp"]
MIXED_SIZES = (1.0, 1 / 64, 1 / 4, 1 / 512, 1 / 16)  # fractions of world_bytes, interleaved


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """From `onset_s`, `ranks` spend `duration_s` saving before their next collective while
    the other ranks wait inside it; announced (by the training loop) as a pause when
    `announce`, for `announced_s` (default: the duration)."""

    onset_s: float
    duration_s: float
    ranks: tuple[int, ...] = (0,)
    announce: bool = True
    announced_s: float | None = None


@dataclass(frozen=True, slots=True)
class AgentGap:
    """The agent of `rank`'s host sends nothing (not even heartbeats) for `duration_s` from
    `onset_s`; its records are lost, or delivered when it comes back if `buffered`."""

    rank: int
    onset_s: float
    duration_s: float
    buffered: bool = False


@dataclass(frozen=True, slots=True)
class SimConfig:
    job: str = "sim-job"
    nranks: int = 64
    hosts_per_leaf: int = 8
    spines: int = 4
    channels: int = 2
    duration_s: float = 60.0
    start_us: int = 1_764_430_000_000_000
    seed: int = 1
    compute_us: int = 100_000
    world_bytes: int = 256 << 20
    dp_bytes: int = 64 << 20
    moe_bytes: int = 64 << 20  # per rank per alltoall, spread over its peers
    moe_imbalance: float = 0.5
    pp_bytes: int = 32 << 20
    conn_rate_bytes_per_us: float = 20_000.0  # a connection's healthy rate over its channels
    jitter: float = 0.10
    straggler_prob: float = 0.0
    straggler_factor: float = 3.0
    skew_us: int = 50_000
    batch_delay_us: int = 300_000
    resend_period_us: int = 1_000_000
    heartbeat_period_us: int = 1_000_000
    duplicate_prob: float = 0.0
    loss_prob: float = 0.0
    report_net_us: bool = True
    report_flows: bool = True
    workload: Workload = "rings"
    physics: Physics = field(default_factory=Physics)
    placement: tuple[int, ...] = ()  # host index of each rank; () = rank r on host r
    faults: tuple[Fault, ...] = ()
    checkpoints: tuple[Checkpoint, ...] = ()
    agent_gaps: tuple[AgentGap, ...] = ()
    # Deliveries arriving after the end are dropped (a cut-off capture), unless `drain`: then
    # the collectives begun before the end finish and are reported (a job that ends cleanly).
    drain: bool = False

    def fabric(self) -> SimFabric:
        placement = self.placement or tuple(range(self.nranks))
        if len(placement) != self.nranks:
            raise ValueError("placement names one host per rank")
        return SimFabric(self.hosts_per_leaf, self.spines, self.seed, placement)


@dataclass(frozen=True, slots=True)
class Delivery:
    arrival_us: int
    record: CollectiveRecord


@dataclass(frozen=True, slots=True)
class Pause:
    """A pause announced by the job at `announced_us` for [from_us, until_us) (controller
    time, which the simulator takes as true time)."""

    announced_us: int
    job: str
    from_us: int
    until_us: int


@dataclass(frozen=True, slots=True)
class SimRun:
    config: SimConfig
    routes: JobRoutes
    deliveries: tuple[Delivery, ...]
    collectives: int
    end_us: int
    heartbeats: tuple[tuple[int, str], ...] = ()  # (arrival, host) of empty batches
    pauses: tuple[Pause, ...] = ()
    skew_us: tuple[int, ...] = ()  # per rank: its host clock minus true time

    def true_us(self, rank: int, host_us: int) -> int:
        """A time stamped by `rank`'s host, in true time."""
        return host_us - (self.skew_us[rank] if self.skew_us else 0)


@dataclass(frozen=True, slots=True)
class Comm:
    name: str
    pattern: Literal["ring", "alltoall", "pairs"]
    members: tuple[int, ...]  # ring order for rings


def layout(cfg: SimConfig) -> tuple[dict[str, Comm], list[list[str]]]:
    """The workload's communicators and its schedule: a list of steps, each a list of
    communicators that run side by side (no rank is in two of one step)."""
    n, hpl = cfg.nranks, cfg.hosts_per_leaf
    shuffled = list(range(n))
    random.Random(cfg.seed).shuffle(shuffled)
    comms = {"world": Comm("world", "ring", tuple(range(n)))}
    if cfg.workload == "ring":
        return comms, [["world"]]
    groups = [tuple(range(g, n, hpl)) for g in range(min(hpl, n))]
    groups = [g for g in groups if len(g) >= 3]
    if cfg.workload == "moe":
        comms.update({f"ep{i}": Comm(f"ep{i}", "alltoall", g) for i, g in enumerate(groups)})
        eps = [f"ep{i}" for i in range(len(groups))]
        return comms, [eps, eps, ["world"]]
    if cfg.workload == "pp":
        stages = 4 if n % 4 == 0 and n >= 8 else 2
        width = n // stages
        pairs: list[str] = []
        for s in range(stages - 1):
            for i in range(width):
                name = f"pp{i}.{s}"
                comms[name] = Comm(name, "pairs", (s * width + i, (s + 1) * width + i))
                pairs.append(name)
        fwd = [[f"pp{i}.{s}" for i in range(width)] for s in range(stages - 1)]
        return comms, [*fwd, *reversed(fwd), ["world"]]
    comms["world-b"] = Comm("world-b", "ring", tuple(shuffled))
    comms.update({f"dp{g[0]}": Comm(f"dp{g[0]}", "ring", g) for g in groups})
    return comms, [["world"], [f"dp{g[0]}" for g in groups], ["world-b"]]


def comm_connections(comm: Comm) -> list[Connection]:
    if comm.pattern == "ring":
        return ring_edges(comm.members)
    if comm.pattern == "alltoall":
        return [(a, b) for a in comm.members for b in comm.members if a != b]
    a, b = comm.members
    return [(a, b), (b, a)]


@dataclass(slots=True)
class _Sim:
    cfg: SimConfig
    fabric: SimFabric
    routes: JobRoutes
    faults: FaultMap
    rng: random.Random
    skew_us: dict[int, int]
    end_us: int
    out: list[Delivery] = field(default_factory=list)
    seqs: dict[str, int] = field(default_factory=dict)
    directions: dict[str, int] = field(default_factory=dict)  # pairs: transfers so far
    collectives: int = 0
    pauses: list[Pause] = field(default_factory=list)
    checkpointed: set[tuple[int, int]] = field(default_factory=set)  # (checkpoint, rank)
    announced: set[int] = field(default_factory=set)  # checkpoints announced
    one_off: set[int] = field(default_factory=set)

    def jittered(self, value: float) -> float:
        return value * self.rng.uniform(1 - self.cfg.jitter, 1 + self.cfg.jitter)

    def emit(self, at_us: float, record: CollectiveRecord, rank: int) -> None:
        cfg = self.cfg
        at = int(at_us)
        for gap in cfg.agent_gaps:
            g_on = cfg.start_us + int(gap.onset_s * 1e6)
            g_off = g_on + int(gap.duration_s * 1e6)
            if self.fabric.host(gap.rank) == self.fabric.host(rank) and g_on <= at < g_off:
                if not gap.buffered:
                    return
                at = g_off
        if self.rng.random() < cfg.loss_prob:
            return
        arrival = at + self.rng.randrange(cfg.batch_delay_us + 1)
        self.out.append(Delivery(arrival, record))
        if self.rng.random() < cfg.duplicate_prob:
            self.out.append(Delivery(arrival + self.rng.randrange(3_000_000), record))

    def resend_ticks(self, rank: int, from_us: float, to_us: float) -> list[int]:
        period = self.cfg.resend_period_us
        phase = (rank * 7919) % period
        first = int(from_us) + (phase - int(from_us)) % period
        return list(range(first, int(min(to_us, self.end_us)), period))


def _compute_us(sim: _Sim, rank: int, ready_us: int) -> int:
    cfg = sim.cfg
    compute = sim.jittered(cfg.compute_us)
    for fault in cfg.faults:
        if str(rank) != fault.target or ready_us < fault.window_us(cfg.start_us)[0]:
            continue
        if fault.kind == "noncomm_slow" and fault.active(ready_us, cfg.start_us):
            compute *= fault.factor
        elif fault.kind == "straggler" and rank not in sim.one_off:
            sim.one_off.add(rank)
            compute *= cfg.straggler_factor
    if sim.rng.random() < cfg.straggler_prob:
        compute *= cfg.straggler_factor
    for i, cp in enumerate(cfg.checkpoints):
        onset_us = cfg.start_us + int(cp.onset_s * 1e6)
        if rank in cp.ranks and ready_us >= onset_us and (i, rank) not in sim.checkpointed:
            sim.checkpointed.add((i, rank))
            if cp.announce and i not in sim.announced:  # the first rank to start announces
                sim.announced.add(i)
                announced = cp.duration_s if cp.announced_s is None else cp.announced_s
                sim.pauses.append(Pause(ready_us, cfg.job, ready_us,
                                        ready_us + int(announced * 1e6)))
            compute += int(cp.duration_s * 1e6 * sim.rng.uniform(0.9, 1.0))
    return int(compute)


def _hangs_before(sim: _Sim, rank: int, start_us: int) -> bool:
    return any(f.kind == "noncomm_hang" and f.target == str(rank)
               and start_us >= sim.cfg.start_us + int(f.onset_s * 1_000_000)
               for f in sim.cfg.faults)


@dataclass(slots=True)
class _Batch:
    """The connections of one collective, as arrays for the physics, and each rank's peer
    entries as rows of `entries` (one connection per channel)."""

    conns: list[Connection]  # per entry (rank pair)
    entries: np.ndarray  # [E, C] connection indices
    send_start: list[float] = field(default_factory=list)
    recv_start: list[float] = field(default_factory=list)
    rate: list[list[float]] = field(default_factory=list)
    factor: list[list[float]] = field(default_factory=list)
    on: list[list[float]] = field(default_factory=list)
    off: list[list[float]] = field(default_factory=list)
    dead: list[list[float]] = field(default_factory=list)


def _batch(sim: _Sim, conns: list[Connection], proxy: dict[int, float], share: float) -> _Batch:
    """Connection index = channel * len(conns) + pair index."""
    cfg = sim.cfg
    c = cfg.channels
    entries = np.array([[ch * len(conns) + i for ch in range(c)] for i in range(len(conns))],
                       dtype=np.int64)
    batch = _Batch(conns, entries)
    scale = {conn: (1.0 / cfg.straggler_factor if sim.rng.random() < cfg.straggler_prob / 4
                    else 1.0) for conn in conns}
    for ch in range(c):
        for conn in conns:
            planned = sim.routes.connections[conn][ch]
            ff = sim.faults.of(planned)
            batch.send_start.append(proxy.get(conn[0], INF))
            batch.recv_start.append(proxy.get(conn[1], INF))
            rate = sim.jittered(cfg.conn_rate_bytes_per_us * share / c) * scale[conn]
            batch.rate.append([rate])
            batch.factor.append([ff.factor])
            batch.on.append([float(ff.on_us)])
            batch.off.append([float(ff.off_us)])
            batch.dead.append([ff.dead_us])
    return batch


@dataclass(slots=True)
class _Plan:
    """One communicator's collective of a step, ready for the physics."""

    comm: Comm
    op: str
    seq: int
    nbytes: int
    starts: dict[int, int]
    proxy: dict[int, float]
    batch: _Batch
    sizes: np.ndarray
    steps: int  # ring: steps per loop; 0: uncoupled

    def key(self) -> tuple[object, ...]:
        """Plans with the same key run side by side in one call of the physics."""
        return ("ring", len(self.comm.members), self.sizes.shape[0]) if self.steps else (id(self),)


def _prepare(sim: _Sim, comm: Comm, ready: dict[int, int], blocked: set[int]) -> _Plan:
    cfg = sim.cfg
    seq = sim.seqs.get(comm.name, 0)
    sim.seqs[comm.name] = seq + 1
    members = comm.members
    conns = comm_connections(comm)
    op = {"ring": "AllReduce", "alltoall": "AllToAll", "pairs": "SendRecv"}[comm.pattern]
    if comm.pattern == "pairs":  # one direction per transfer: activations, then gradients
        turn = sim.directions.get(comm.name, 0)
        sim.directions[comm.name] = turn + 1
        conns = [conns[turn % 2]]
    starts: dict[int, int] = {}
    for rank in members:
        if rank in blocked:
            continue
        start_us = ready[rank] + _compute_us(sim, rank, ready[rank])
        if _hangs_before(sim, rank, start_us):
            blocked.add(rank)
            continue
        starts[rank] = start_us
    proxy = {r: t + cfg.physics.proxy_delay_us for r, t in starts.items()}
    nbytes = _size(sim, comm, seq)
    k = len(members)
    if comm.pattern == "ring":
        batch = _batch(sim, conns, proxy, 1.0)
        n = len(conns) * cfg.channels
        sizes = ring_sizes(max(1, nbytes // cfg.channels), k, cfg.physics.chunk_bytes,
                           2 * (k - 1), n)
        return _Plan(comm, op, seq, nbytes, starts, proxy, batch, sizes, 2 * (k - 1))
    share = 1.0 / (k - 1) if comm.pattern == "alltoall" else 1.0
    batch = _batch(sim, conns, proxy, share)
    if comm.pattern == "alltoall":
        pair_bytes = [nbytes / (k - 1) * sim.rng.uniform(1 - cfg.moe_imbalance,
                                                          1 + cfg.moe_imbalance) for _ in conns]
    else:
        pair_bytes = [float(nbytes)] * len(conns)
    per_conn = [max(1.0, b / cfg.channels) for _ in range(cfg.channels) for b in pair_bytes]
    return _Plan(comm, op, seq, nbytes, starts, proxy, batch,
                 chunk_sizes(per_conn, cfg.physics.chunk_bytes), 0)


def _run(sim: _Sim, plans: list[_Plan]) -> list[Transfer]:
    """Run plans that share a key in one call of the physics; one Transfer per plan."""
    def arr(attr: str) -> np.ndarray:
        return np.asarray([x for p in plans for x in getattr(p.batch, attr)], dtype=np.float64)

    sizes = np.concatenate([p.sizes for p in plans], axis=1)
    ring = None
    if plans[0].steps:
        ups, downs, offset = [], [], 0
        for p in plans:
            k = len(p.comm.members)
            n = p.sizes.shape[1]
            pos = np.arange(n) % k
            base = np.arange(n) - pos + offset
            ups.append(base + (pos - 1) % k)
            downs.append(base + (pos + 1) % k)
            offset += n
        ring = (np.concatenate(ups), np.concatenate(downs), plans[0].steps)
    tr = simulate_transfer(sim.cfg.physics, sizes, arr("send_start"), arr("recv_start"),
                           arr("rate"), arr("factor"), arr("on"), arr("off"), arr("dead"), ring)
    out, lo = [], 0
    for p in plans:
        hi = lo + p.sizes.shape[1]
        out.append(tr.columns(lo, hi))
        lo = hi
    return out


def _step(sim: _Sim, comms: list[Comm], ready: dict[int, int], blocked: set[int]) -> None:
    plans = [_prepare(sim, comm, ready, blocked) for comm in comms]
    groups: dict[tuple[object, ...], list[_Plan]] = {}
    for plan in plans:
        groups.setdefault(plan.key(), []).append(plan)
    transfers: dict[int, Transfer] = {}
    for group in groups.values():
        for plan, tr in zip(group, _run(sim, group), strict=True):
            transfers[id(plan)] = tr
    for plan in plans:
        _emit_collective(sim, plan.comm, plan.op, plan.seq, plan.nbytes, plan.starts, plan.proxy,
                         plan.batch, transfers[id(plan)], ready, blocked)


def _size(sim: _Sim, comm: Comm, seq: int) -> int:
    cfg = sim.cfg
    if comm.pattern == "alltoall":
        return cfg.moe_bytes
    if comm.pattern == "pairs":
        return cfg.pp_bytes
    base = cfg.dp_bytes if comm.name.startswith("dp") else cfg.world_bytes
    if cfg.workload == "mixed":
        return max(1 << 19, int(base * MIXED_SIZES[seq % len(MIXED_SIZES)]))
    return base


def _emit_collective(sim: _Sim, comm: Comm, op: str, seq: int, nbytes: int,
                     starts: dict[int, int], proxy: dict[int, float], batch: _Batch,
                     tr: Transfer, ready: dict[int, int], blocked: set[int]) -> None:
    entries = batch.entries
    send_end = tr.send_end()[entries].max(axis=1).tolist()  # per entry, over its channels
    recv_end = tr.recv_end()[entries].max(axis=1).tolist()
    by_rank: dict[int, list[tuple[int, str]]] = {}
    last: dict[int, float] = {}
    for e, (src, dst) in enumerate(batch.conns):
        by_rank.setdefault(src, []).append((e, "send"))
        by_rank.setdefault(dst, []).append((e, "recv"))
        last[src] = max(last.get(src, -INF), send_end[e])
        last[dst] = max(last.get(dst, -INF), recv_end[e])
    ends = {rank: last[rank] + 10 if np.isfinite(last.get(rank, INF)) else INF for rank in starts}
    done_all = all(np.isfinite(t) for t in ends.values()) and len(starts) == len(comm.members)
    fin = finals(tr, entries) if done_all else None
    nmembers = len(comm.members)
    for rank in sorted(starts):
        ops = op if op != "SendRecv" else ("Send" if by_rank[rank][0][1] == "send" else "Recv")
        end = ends[rank] + sim.rng.randrange(20) if np.isfinite(ends[rank]) else INF
        for tick in sim.resend_ticks(rank, starts[rank], end):
            rec = _record(sim, comm, ops, nmembers, rank, seq, nbytes, starts[rank], None,
                          proxy[rank], batch, tr, by_rank[rank], float(tick), None)
            sim.emit(tick, rec, rank)
        if np.isfinite(end):
            rec = _record(sim, comm, ops, nmembers, rank, seq, nbytes, starts[rank], int(end),
                          proxy[rank], batch, tr, by_rank[rank], INF, fin)
            sim.emit(end, rec, rank)
            ready[rank] = int(end)
        else:
            blocked.add(rank)
    if done_all:
        sim.collectives += 1
    else:  # the ranks that finished go on, and find the stuck ones missing later
        blocked.update(r for r in comm.members if r not in starts)


def _record(sim: _Sim, comm: Comm, op: str, nranks: int, rank: int, seq: int, nbytes: int,
            start_us: int, end_us: int | None, proxy_us: float, batch: _Batch, tr: Transfer,
            mine: list[tuple[int, str]], tau: float, fin: Finals | None) -> CollectiveRecord:
    cfg = sim.cfg
    sk = sim.skew_us[rank]
    c = cfg.channels
    peers: list[PeerProgress] = []
    for e, direction in mine:
        src, dst = batch.conns[e]
        sender = direction == "send"
        if fin is not None:
            nb = int(fin.bytes[e])
            last: float | None = float((fin.send_last if sender else fin.recv_last)[e])
            net = int((fin.send_net if sender else fin.recv_net)[e])
            f_last = (fin.flow_send_last if sender else fin.flow_recv_last)[e]
            f_net = (fin.flow_send_net if sender else fin.flow_recv_net)[e]
            flow_rows: list[tuple[int, int, float | None, int]] = [
                (i, int(fin.flow_bytes[e][i]), float(f_last[i]), int(f_net[i]))
                for i in range(len(f_last))]
            done = True
        else:
            side = side_at(tr, [int(x) for x in batch.entries[e]], list(range(c)), sender, tau)
            nb, last, net, done = side.bytes, side.t_last, side.net_us, side.done
            flow_rows = [(i, b, t, n) for i, b, t, n in side.flows]
        t_first = None if last is None else int(proxy_us) + sk
        t_last = None if last is None else int(last) + sk
        flows: tuple[FlowProgress, ...] = ()
        if cfg.report_flows:
            flows = tuple(FlowProgress(SPORT_BASE + i, b, None if t is None else int(t) + sk,
                                       n if cfg.report_net_us else None)
                          for i, b, t, n in flow_rows)
        peer = dst if sender else src
        peers.append(PeerProgress(peer, "send" if sender else "recv", nb, t_first, t_last, done,
                                  flows, net if cfg.report_net_us else None))
    return CollectiveRecord(cfg.job, comm.name, rank, nranks, op, seq, nbytes, start_us + sk,
                            None if end_us is None else end_us + sk,
                            tuple(sorted(peers, key=lambda p: (p.peer, p.dir))),
                            sim.fabric.host(rank))


def _heartbeats(sim: _Sim) -> list[tuple[int, str]]:
    cfg = sim.cfg
    out: list[tuple[int, str]] = []
    period = cfg.heartbeat_period_us
    for rank in range(cfg.nranks):
        host = sim.fabric.host(rank)
        gaps = [(cfg.start_us + int(g.onset_s * 1e6),
                 cfg.start_us + int((g.onset_s + g.duration_s) * 1e6))
                for g in cfg.agent_gaps if sim.fabric.host(g.rank) == host]
        t = cfg.start_us + (rank * 104_729) % period
        while t < sim.end_us:
            if not any(on <= t < off for on, off in gaps):
                out.append((t + sim.rng.randrange(cfg.batch_delay_us // 10 + 1), host))
            t += period
    return out


def simulate(cfg: SimConfig) -> SimRun:
    """Run the job from `start_us` for `duration_s`; deliveries sorted by arrival time."""
    rng = random.Random(cfg.seed)
    fabric = cfg.fabric()
    comms, schedule = layout(cfg)
    conns = [conn for comm in comms.values() for conn in comm_connections(comm)]
    routes = fabric.routes(cfg.job, conns, cfg.channels)
    skew = {r: rng.randint(-cfg.skew_us, cfg.skew_us) for r in range(cfg.nranks)}
    end_us = cfg.start_us + int(cfg.duration_s * 1_000_000)
    sim = _Sim(cfg, fabric, routes, FaultMap(cfg.faults, cfg.start_us), rng, skew, end_us)
    ready = dict.fromkeys(range(cfg.nranks), cfg.start_us)
    blocked: set[int] = set()
    step = 0
    while True:
        active = [r for r in range(cfg.nranks) if r not in blocked]
        if not active or min(ready[r] for r in active) >= end_us:
            break
        _step(sim, [comms[name] for name in schedule[step % len(schedule)]], ready, blocked)
        step += 1
    kept = sim.out if cfg.drain else [d for d in sim.out if d.arrival_us <= end_us]
    kept.sort(key=lambda d: (d.arrival_us, d.record.comm, d.record.rank, d.record.seq,
                             d.record.progress_key))
    beats = sorted(h for h in _heartbeats(sim) if h[0] <= end_us)
    return SimRun(cfg, routes, tuple(kept), sim.collectives, end_us, tuple(beats),
                  tuple(sim.pauses), tuple(skew[r] for r in range(cfg.nranks)))
