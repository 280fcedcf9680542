"""Telemetry simulator: realistic record streams for a training job, with injectable faults.

Ranks loop compute -> collective over several ring communicators (two world rings and one
data-parallel ring per leaf position, in a fixed schedule). A connection moves its bytes over
its flows once both ends have entered; the collective ends on every rank when its slowest
connection is done, so ranks that entered early wait inside it. Each host's clock is skewed by
up to `skew_us`; records are stamped in host time and delivered in batches. Collectives that
span an agent tick are re-sent in flight with their progress so far, and hung ones every tick
until the end. Each peer entry carries its flows' progress (`flows`, by source port): bytes
sent on the sender's entry, received on the receiver's. Faults (`simfabric.Fault`) start at
an onset. Seeded `random.Random`; no I/O, no clock. Output: `SimRun` with deliveries sorted
by arrival (controller time) and the routes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from controller.diagnosis.routes import JobRoutes
from controller.diagnosis.simfabric import (
    Fault,
    build_routes,
    comm_layout,
    dead_from_us,
    flow_factor,
    host_name,
    ring_edges,
)
from controller.domain.telemetry import CollectiveRecord, FlowProgress, PeerProgress


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
    conn_rate_bytes_per_us: float = 20_000.0
    jitter: float = 0.10
    straggler_prob: float = 0.0
    straggler_factor: float = 3.0
    skew_us: int = 50_000
    batch_delay_us: int = 300_000
    resend_period_us: int = 1_000_000
    duplicate_prob: float = 0.0
    faults: tuple[Fault, ...] = ()


@dataclass(frozen=True, slots=True)
class Delivery:
    arrival_us: int
    record: CollectiveRecord


@dataclass(frozen=True, slots=True)
class SimRun:
    config: SimConfig
    routes: JobRoutes
    deliveries: tuple[Delivery, ...]
    collectives: int
    end_us: int


@dataclass(slots=True)
class _Conn:
    src: int
    dst: int
    bytes: int
    t0_us: int
    t_end_us: int  # when done, or when it stalled
    moved: int  # bytes received
    posted: int  # bytes sent (posted >= moved)
    done: bool
    # per flow (sport, bytes sent, bytes received, when it finished or stalled); () to split
    # the connection's progress evenly over its planned flows
    flows: tuple[tuple[int, int, int, int], ...] = ()


@dataclass(slots=True)
class _Sim:
    cfg: SimConfig
    routes: JobRoutes
    rng: random.Random
    skew_us: dict[int, int]
    end_us: int
    out: list[Delivery] = field(default_factory=list)
    seqs: dict[str, int] = field(default_factory=dict)
    collectives: int = 0

    def jittered(self, value: float) -> float:
        return value * self.rng.uniform(1 - self.cfg.jitter, 1 + self.cfg.jitter)

    def emit(self, at_us: int, record: CollectiveRecord) -> None:
        arrival = at_us + self.rng.randrange(self.cfg.batch_delay_us + 1)
        self.out.append(Delivery(arrival, record))
        if self.rng.random() < self.cfg.duplicate_prob:
            self.out.append(Delivery(arrival + self.rng.randrange(3_000_000), record))

    def record(self, comm: str, order: tuple[int, ...], rank: int, seq: int, nbytes: int,
               start_us: int, end_us: int | None, conns: list[_Conn], upto_us: int) -> CollectiveRecord:
        sk = self.skew_us[rank]
        peers: list[PeerProgress] = []
        for c in conns:
            if rank not in (c.src, c.dst):
                continue
            span = max(c.t_end_us - c.t0_us, 1)
            share = 1.0 if upto_us >= c.t_end_us else max(0.0, (upto_us - c.t0_us) / span)
            moved = int(c.moved * share) if share < 1.0 else c.moved
            posted = c.posted if share >= 1.0 else moved
            started = upto_us > c.t0_us and moved > 0
            t_first = c.t0_us + sk if started else None
            t_last = min(upto_us, c.t_end_us) + sk if started else None
            done = c.done and share >= 1.0
            if rank == c.src:
                flows = self.flow_progress(c, True, posted, t_last, upto_us, sk)
                peers.append(PeerProgress(c.dst, "send", posted, t_first, t_last, done, flows))
            else:
                flows = self.flow_progress(c, False, moved, t_last, upto_us, sk)
                peers.append(PeerProgress(c.src, "recv", moved, t_first, t_last, done, flows))
        return CollectiveRecord(self.cfg.job, comm, rank, len(order), "AllReduce", seq, nbytes,
                                start_us + sk, None if end_us is None else end_us + sk,
                                tuple(sorted(peers, key=lambda p: (p.peer, p.dir))), host_name(rank))

    def flow_progress(self, c: _Conn, sender: bool, reported: int, t_last: int | None,
                      upto_us: int, sk: int) -> tuple[FlowProgress, ...]:
        """Per-flow progress of a connection at `upto_us`: each flow at its own pace when the
        transfer simulated them, else the reported bytes split evenly over the planned flows."""
        if not c.flows:
            sports = [f.sport for f in self.routes.connections[(c.src, c.dst)]
                      if f.sport is not None]
            n = len(sports)
            if n == 0:
                return ()
            return tuple(FlowProgress(sp, reported // n + (reported % n if i == n - 1 else 0),
                                      t_last if reported else None)
                         for i, sp in enumerate(sports))
        out: list[FlowProgress] = []
        for sport, sent, received, f_end_us in c.flows:
            span = max(f_end_us - c.t0_us, 1)
            if upto_us >= f_end_us:
                nbytes = sent if sender else received
            else:
                nbytes = int(received * max(0.0, (upto_us - c.t0_us) / span))
            last = min(upto_us, f_end_us) + sk if nbytes > 0 else None
            out.append(FlowProgress(sport, nbytes, last))
        return tuple(out)

    def resend_ticks(self, rank: int, from_us: int, to_us: int) -> list[int]:
        period = self.cfg.resend_period_us
        phase = (rank * 7919) % period
        first = from_us + (phase - from_us) % period
        return list(range(first, min(to_us, self.end_us), period))


def _compute_us(sim: _Sim, rank: int, ready_us: int, one_off: set[int]) -> int:
    cfg = sim.cfg
    compute = sim.jittered(cfg.compute_us)
    for fault in cfg.faults:
        onset_us = cfg.start_us + int(fault.onset_s * 1_000_000)
        if str(rank) == fault.target and ready_us >= onset_us:
            if fault.kind == "noncomm_slow" and fault.active(ready_us, cfg.start_us):
                compute *= fault.factor
            elif fault.kind == "straggler" and rank not in one_off:
                one_off.add(rank)
                compute *= cfg.straggler_factor
    if sim.rng.random() < cfg.straggler_prob:
        compute *= cfg.straggler_factor
    return int(compute)


def _hangs_before(sim: _Sim, rank: int, start_us: int) -> bool:
    return any(f.kind == "noncomm_hang" and f.target == str(rank)
               and start_us >= sim.cfg.start_us + int(f.onset_s * 1_000_000)
               for f in sim.cfg.faults)


def _transfer(sim: _Sim, src: int, dst: int, nbytes: int, t0_us: int) -> _Conn:
    cfg = sim.cfg
    per_flow = nbytes // cfg.channels
    rate_scale = 1.0 / cfg.straggler_factor if sim.rng.random() < cfg.straggler_prob / 4 else 1.0
    end_us, moved, stalled = t0_us, 0, False
    flows: list[tuple[int, int, int, int]] = []
    planned_flows = sim.routes.connections[(src, dst)]
    for i, planned in enumerate(planned_flows):
        sport = 0 if planned.sport is None else planned.sport
        share = per_flow + (nbytes - per_flow * len(planned_flows) if i == len(planned_flows) - 1 else 0)
        rate = sim.jittered(cfg.conn_rate_bytes_per_us / cfg.channels) * rate_scale
        rate *= flow_factor(planned, cfg.faults, t0_us, cfg.start_us)
        flow_end = t0_us + int(per_flow / rate)
        dead_us = dead_from_us(planned, cfg.faults, cfg.start_us)
        if dead_us is not None and dead_us < flow_end:
            stop_us = max(dead_us, t0_us)
            flow_moved = int(rate * (stop_us - t0_us))
            moved += flow_moved
            end_us, stalled = max(end_us, stop_us), True
            # the sender got up to a socket buffer ahead of what arrived
            flows.append((sport, min(share, flow_moved + (4 << 20)), flow_moved, stop_us))
        else:
            moved += per_flow
            end_us = max(end_us, flow_end)
            flows.append((sport, share, share, flow_end))
    if stalled:
        return _Conn(src, dst, nbytes, t0_us, end_us, moved, min(nbytes, moved + (4 << 20)), False,
                     tuple(flows))
    return _Conn(src, dst, nbytes, t0_us, end_us, nbytes, nbytes, True, tuple(flows))


def _stuck(sim: _Sim, comm: str, order: tuple[int, ...], seq: int, nbytes: int,
           starts: dict[int, int], conns: list[_Conn], blocked: set[int]) -> None:
    for rank in sorted(starts):
        blocked.add(rank)
        for tick in sim.resend_ticks(rank, starts[rank], sim.end_us):
            sim.emit(tick, sim.record(comm, order, rank, seq, nbytes, starts[rank], None,
                                      conns, tick))


def _collective(sim: _Sim, comm: str, order: tuple[int, ...], nbytes: int,
                ready: dict[int, int], blocked: set[int], one_off: set[int]) -> None:
    seq = sim.seqs.get(comm, 0)
    sim.seqs[comm] = seq + 1
    starts: dict[int, int] = {}
    missing = False
    for rank in order:
        if rank in blocked:
            missing = True
            continue
        start_us = ready[rank] + _compute_us(sim, rank, ready[rank], one_off)
        if _hangs_before(sim, rank, start_us):
            blocked.add(rank)
            missing = True
            continue
        starts[rank] = start_us
    conn_bytes = nbytes * 2 * (len(order) - 1) // len(order)
    rate = sim.cfg.conn_rate_bytes_per_us
    if missing:  # the ring cannot turn without every rank: the others barely start
        conns = []
        for src, dst in ring_edges(order):
            if src in starts and dst in starts:
                t0 = max(starts[src], starts[dst]) + 20
                moved = int(conn_bytes * sim.rng.uniform(0.0, 0.3))
                conns.append(_Conn(src, dst, conn_bytes, t0, t0 + int(moved / rate), moved,
                                   moved, False))
        _stuck(sim, comm, order, seq, nbytes, starts, conns, blocked)
        return
    conns = [_transfer(sim, s, d, conn_bytes, max(starts[s], starts[d]) + 20)
             for s, d in ring_edges(order)]
    if not all(c.done for c in conns):  # a stalled connection blocks the ring partway
        for i, c in enumerate(conns):
            if c.done:
                frac = sim.rng.uniform(0.3, 0.9)
                moved = int(c.bytes * frac)
                conns[i] = _Conn(c.src, c.dst, c.bytes, c.t0_us,
                                 c.t0_us + int((c.t_end_us - c.t0_us) * frac), moved, moved, False)
        _stuck(sim, comm, order, seq, nbytes, starts, conns, blocked)
        return
    end_us = max(c.t_end_us for c in conns) + 30
    for rank in order:
        t_end_us = end_us + sim.rng.randrange(20)
        for tick in sim.resend_ticks(rank, starts[rank], t_end_us):
            sim.emit(tick, sim.record(comm, order, rank, seq, nbytes, starts[rank], None,
                                      conns, tick))
        sim.emit(t_end_us, sim.record(comm, order, rank, seq, nbytes, starts[rank], t_end_us,
                                      conns, t_end_us))
        ready[rank] = t_end_us
    sim.collectives += 1


def simulate(cfg: SimConfig) -> SimRun:
    """Run the job from `start_us` for `duration_s`; deliveries sorted by arrival time."""
    rng = random.Random(cfg.seed)
    comms = comm_layout(cfg.nranks, cfg.hosts_per_leaf, cfg.seed)
    routes = build_routes(cfg.job, cfg.nranks, cfg.hosts_per_leaf, cfg.spines, cfg.channels,
                          comms, cfg.seed)
    skew = {r: rng.randint(-cfg.skew_us, cfg.skew_us) for r in range(cfg.nranks)}
    end_us = cfg.start_us + int(cfg.duration_s * 1_000_000)
    sim = _Sim(cfg, routes, rng, skew, end_us)
    dp = sorted(c for c in comms if c.startswith("dp"))
    schedule: list[list[str]] = [["world"], dp, ["world-b"]]
    ready = dict.fromkeys(range(cfg.nranks), cfg.start_us)
    blocked: set[int] = set()
    one_off: set[int] = set()
    step = 0
    while True:
        active = [r for r in range(cfg.nranks) if r not in blocked]
        if not active or min(ready[r] for r in active) >= end_us:
            break
        for comm in schedule[step % len(schedule)]:
            nbytes = cfg.dp_bytes if comm.startswith("dp") else cfg.world_bytes
            _collective(sim, comm, comms[comm], nbytes, ready, blocked, one_off)
        step += 1
    kept = [d for d in sim.out if d.arrival_us <= end_us]
    kept.sort(key=lambda d: (d.arrival_us, d.record.comm, d.record.rank, d.record.seq,
                             d.record.progress_key))
    return SimRun(cfg, routes, tuple(kept), sim.collectives, end_us)
