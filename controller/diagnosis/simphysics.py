"""How NCCL moves a collective's bytes, chunk by chunk: the physics of the telemetry simulator.

Written from how NCCL's proxy drives a net transport (docs/research/nccl-shim.md), not from
what the detectors need:

- A connection (one channel's rank -> peer link) has `slots` staging buffers. The sender may
  hand chunk j to the network only when the receiver has freed the slot chunk j - slots used
  (NCCL: the receiver posts its receive for a slot, which tells the sender it may write) and
  the chunk's data is ready.
- Ring collectives forward: chunk j of step t > 0 on connection p is the chunk j - 1 that
  arrived from the upstream connection p - 1, reduced or copied by the GPU; the receiver
  frees a slot only when it has forwarded the chunk into its own next slot. So one slow
  connection paces every connection of its ring, and `bytes / (t_last - t_first)` is about
  the same on all of them. Uncoupled patterns (alltoall, pairs) consume on arrival.
- A chunk is split over the connection's flows (QPs or sockets) by equal weights; each flow is
  a FIFO at its own rate (faults multiply it, a dead flow carries nothing from its death on).
  The chunk arrives when its last part does.
- Completion: RDMA (`rdma`) completes a send when the receiver has acknowledged it (one
  latency after arrival), so a sender's completed bytes never exceed the receiver's; socket
  semantics (`socket`) complete a send when it is written into the socket buffer, which
  holds `socket_buffer_bytes` per flow, so a sender runs ahead of its receiver.
- Time on the network (`net_us`, API.md) is the union over chunks of [post, completion] on
  the sender (and [receive posted, arrival] on the receiver, which includes waiting for the
  peer: the transport cannot tell the two apart). With socket semantics a transport may end
  a chunk's time on the network at its write (`socket_net_us="write"`: then it measures only
  waits for buffer room) or when the peer acknowledged it (`"acked"`, as RDMA does; what the
  shim's TCP transport reports, nccl_shim/FORMAT.md: time with bytes unacknowledged, less the
  time the receiver's window held them, which here is the wait for the receiver's slot before
  the post).

Arrays are indexed [chunk row, connection] (and [.., flow]); times are absolute true
microseconds, `inf` for never. Pure numpy; no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
INF = float("inf")


@dataclass(frozen=True, slots=True)
class Physics:
    """Knobs of the transfer physics. Defaults follow NCCL's Simple protocol as we read it
    (4 MiB of buffer per connection in NCCL_STEPS = 8 steps, slices of 2 steps: 4 slices of
    1 MiB in flight) and RoCE completions."""

    slots: int = 4
    chunk_bytes: int = 1 << 20
    completion: Literal["rdma", "socket"] = "rdma"
    socket_buffer_bytes: int = 1 << 20  # per flow (socket semantics only)
    copy_rate_bytes_per_us: float = 8_000.0  # a socket write's memcpy (socket semantics only)
    socket_net_us: Literal["write", "acked"] = "write"  # when a socket chunk leaves the network
    latency_us: float = 4.0  # one way, wire and switches
    gpu_us: float = 2.0  # a GPU reduce/copy step of one chunk
    proxy_delay_us: float = 15.0  # from entering the collective to the proxy op's start

    def __post_init__(self) -> None:
        if self.slots < 2 or self.chunk_bytes <= 0:
            raise ValueError("slots >= 2 and chunk_bytes > 0")


@dataclass(frozen=True, slots=True)
class Transfer:
    """The timeline of every chunk of a batch of connections (see module docstring)."""

    sizes: FloatArray  # [M, N] bytes of each chunk (0: padding)
    post: FloatArray  # [M, N] sender handed the chunk to the network
    recv_post: FloatArray  # [M, N] receiver posted the receive (freed the slot)
    arrive: FloatArray  # [M, N] last part arrived at the receiver
    complete: FloatArray  # [M, N] sender's completion
    flow_arrive: FloatArray  # [M, N, Q]
    flow_complete: FloatArray  # [M, N, Q]
    weights: FloatArray  # [Q]
    net_end: FloatArray  # [M, N] when a sent chunk stops counting as on the network
    flow_net_end: FloatArray  # [M, N, Q]

    def columns(self, lo: int, hi: int) -> Transfer:
        """The connections lo..hi-1 (views, no copy)."""
        return Transfer(self.sizes[:, lo:hi], self.post[:, lo:hi], self.recv_post[:, lo:hi],
                        self.arrive[:, lo:hi], self.complete[:, lo:hi],
                        self.flow_arrive[:, lo:hi], self.flow_complete[:, lo:hi], self.weights,
                        self.net_end[:, lo:hi], self.flow_net_end[:, lo:hi])

    def send_end(self) -> FloatArray:
        """[N] when each connection's last send completed (inf: never)."""
        return _last(self.complete, self.sizes)

    def recv_end(self) -> FloatArray:
        """[N] when each connection's last chunk arrived (inf: never)."""
        return _last(self.arrive, self.sizes)


def _last(times: FloatArray, sizes: FloatArray) -> FloatArray:
    masked = np.where(sizes > 0, times, -INF)
    out: FloatArray = masked.max(axis=0)
    return out


def chunk_sizes(conn_bytes: npt.ArrayLike, chunk_bytes: int) -> FloatArray:
    """[M, N] chunk sizes of connections moving `conn_bytes` each, padded with zeros."""
    total = np.asarray(conn_bytes, dtype=np.float64)
    rows = max(1, int(np.ceil(total.max() / chunk_bytes)))
    offsets = np.arange(rows, dtype=np.float64)[:, None] * chunk_bytes
    out: FloatArray = np.clip(total[None, :] - offsets, 0.0, float(chunk_bytes))
    return out


def ring_sizes(nbytes_per_channel: int, nranks: int, chunk_bytes: int, steps: int,
               nconns: int) -> FloatArray:
    """[M, N] chunk sizes of a ring collective: loops of `nranks` slices, each loop moving one
    chunk per step; the last loop's chunks shrink to what is left (as NCCL's do)."""
    loop_bytes = nranks * chunk_bytes
    loops = max(1, -(-nbytes_per_channel // loop_bytes))
    sizes: list[float] = []
    for loop in range(loops):
        left = nbytes_per_channel - loop * loop_bytes
        chunk = min(chunk_bytes, -(-left // nranks))
        sizes.extend([float(max(chunk, 1))] * steps)
    column = np.asarray(sizes, dtype=np.float64)
    out: FloatArray = np.repeat(column[:, None], nconns, axis=1)
    return out


def simulate_transfer(
    physics: Physics,
    sizes: FloatArray,
    send_start: FloatArray,
    recv_start: FloatArray,
    rate: FloatArray,
    factor: FloatArray,
    slow_on: FloatArray,
    slow_off: FloatArray,
    dead: FloatArray,
    ring: tuple[IntArray, IntArray, int] | None = None,
) -> Transfer:
    """Move every chunk of N connections, Q flows each.

    `send_start`/`recv_start` [N]: the proxy ops' start on the sender and the receiver (inf:
    that rank never entered). `rate`, `factor`, `slow_on`, `slow_off`, `dead` [N, Q]: each
    flow's healthy rate (bytes/us), the factor applied to parts that start in
    [slow_on, slow_off), and when it dies. `ring`: (upstream index, downstream index, steps
    per loop) of each connection in its ring, or None for uncoupled connections."""
    m, n = sizes.shape
    q = rate.shape[1]
    weights = np.full(q, 1.0 / q)
    lat, gpu, slots = physics.latency_us, physics.gpu_us, physics.slots
    post = np.full((m, n), INF)
    recv_post = np.full((m, n), INF)
    arrive = np.full((m, n), INF)
    complete = np.full((m, n), INF)
    consumed = np.full((m, n), INF)
    f_done = np.full((m, n, q), INF)
    f_arrive = np.full((m, n, q), INF)
    f_complete = np.full((m, n, q), INF)
    inv_rate = 1.0 / rate
    inv_slow = 1.0 / (rate * factor)
    any_slow = bool((factor != 1.0).any())
    any_dead = bool(np.isfinite(dead).any())
    padded = bool((sizes <= 0).any())
    buffered = max(1, int(physics.socket_buffer_bytes // max(1.0, physics.chunk_bytes / q)))
    socket = physics.completion == "socket"
    prev_post = np.full(n, -INF)
    prev_done = np.full((n, q), -INF)
    prev_comp = np.full((n, q), -INF)
    prev_arr = np.full((n, q), -INF)
    with np.errstate(invalid="ignore", divide="ignore"):
        for j in range(m):
            if ring is not None:
                up, down, steps = ring
                ready = send_start if j % steps == 0 else arrive[j - 1][up] + gpu
            else:
                ready = send_start
            rp = recv_start if j < slots else np.maximum(recv_start, consumed[j - slots])
            p = np.maximum(np.maximum(ready, rp + lat), prev_post)
            part = sizes[j][:, None] * weights[None, :]
            start = np.maximum(p[:, None], prev_done)
            if any_slow:
                slow = (start >= slow_on) & (start < slow_off)
                done = start + part * np.where(slow, inv_slow, inv_rate)
            else:
                done = start + part * inv_rate
            if any_dead:
                done = np.where(done > dead, INF, done)
            arr = done + lat
            if socket:
                # Writes are sequential; one waits for room when the buffer holds `buffered`
                # parts not yet on the wire.
                room = np.maximum(p[:, None], prev_comp)
                if j >= buffered:
                    room = np.maximum(room, f_done[j - buffered])
                comp = room + part / physics.copy_rate_bytes_per_us
            else:
                comp = arr + lat
            if padded:  # padding rows (uncoupled connections of unequal size) change nothing
                valid = sizes[j] > 0
                p = np.where(valid, p, prev_post)
                rp = np.where(valid, rp, INF)
                done = np.where(valid[:, None], done, prev_done)
                arr = np.where(valid[:, None], arr, prev_arr)
                comp = np.where(valid[:, None], comp, prev_comp)
            post[j], recv_post[j] = p, rp
            f_done[j], f_arrive[j], f_complete[j] = done, arr, comp
            arrive[j] = arr.max(axis=1)
            complete[j] = comp.max(axis=1)
            prev_post, prev_done, prev_comp, prev_arr = p, done, comp, arr
            if ring is not None:
                # The receiver frees chunk j - 1's slot when it forwards it as chunk j.
                if j > 0 and (j - 1) % steps != steps - 1:
                    consumed[j - 1] = post[j][down]
                if j % steps == steps - 1:
                    consumed[j] = arrive[j] + gpu
            elif padded:
                consumed[j] = np.where(sizes[j] > 0, arrive[j] + gpu,
                                       consumed[j - 1] if j else -INF)
            else:
                consumed[j] = arrive[j] + gpu
    if socket and physics.socket_net_us == "acked":
        f_net_end = f_arrive + lat
        net_end = f_net_end.max(axis=2)
    else:
        f_net_end, net_end = f_complete, complete
    return Transfer(sizes, post, recv_post, arrive, complete, f_arrive, f_complete, weights,
                    net_end, f_net_end)


def union_columns(starts: FloatArray, ends: FloatArray, tau: float = INF) -> FloatArray:
    """Per column, the length of the union of [start, min(end, tau)] over rows (intervals
    that begin at or after `tau`, or never, count nothing)."""
    s = np.minimum(starts, tau)
    e = np.minimum(ends, tau)
    valid = (s < e) & np.isfinite(s)
    s = np.where(valid, s, INF)
    e = np.where(valid, e, -INF)
    if s.shape[0] > 1 and not (s[1:] >= s[:-1]).all():  # FIFO posts come sorted already
        order = np.argsort(s, axis=0, kind="stable")
        s = np.take_along_axis(s, order, axis=0)
        e = np.take_along_axis(e, order, axis=0)
    reach = np.maximum.accumulate(e, axis=0)
    prev = np.vstack([np.full((1, s.shape[1]), -INF), reach[:-1]])
    with np.errstate(invalid="ignore"):
        contrib = np.where(np.isfinite(s), np.maximum(0.0, e - np.maximum(s, prev)), 0.0)
    out: FloatArray = contrib.sum(axis=0)
    return out


def union_us(starts: FloatArray, ends: FloatArray, tau: float) -> float:
    """Length of the union of [start, min(end, tau)] over intervals that began before tau."""
    s = np.minimum(starts.ravel(), tau)
    e = np.minimum(ends.ravel(), tau)
    keep = (s < e) & np.isfinite(s)
    if not keep.any():
        return 0.0
    s, e = s[keep], e[keep]
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    prev = np.concatenate(([-INF], reach[:-1]))
    return float(np.maximum(0.0, e - np.maximum(s, prev)).sum())


@dataclass(frozen=True, slots=True)
class Side:
    """One rank's view of one peer entry at a time: API.md's peer fields, in true time."""

    bytes: int
    t_last: float | None
    done: bool
    net_us: int
    flows: tuple[tuple[int, int, float | None, int], ...]  # (flow index, bytes, t_last, net_us)


def side_at(tr: Transfer, conns: list[int], flow_base: list[int], sender: bool,
            tau: float) -> Side:
    """A peer entry aggregated over the given connections (one per channel) at time `tau`."""
    sizes = tr.sizes[:, conns]
    ends = (tr.complete if sender else tr.arrive)[:, conns]
    net_ends = (tr.net_end if sender else tr.arrive)[:, conns]
    starts = (tr.post if sender else tr.recv_post)[:, conns]
    finished = (ends <= tau) & (sizes > 0)
    nbytes = int(sizes[finished].sum())
    t_last = float(ends[finished].max()) if finished.any() else None
    done = bool(finished.sum() == (sizes > 0).sum())
    net = union_us(np.where(sizes > 0, starts, INF), net_ends, tau)
    f_ends_all = (tr.flow_complete if sender else tr.flow_arrive)[:, conns, :]
    f_net_all = (tr.flow_net_end if sender else tr.flow_arrive)[:, conns, :]
    q = f_ends_all.shape[2]
    flows: list[tuple[int, int, float | None, int]] = []
    for i, base in enumerate(flow_base):
        for k in range(q):
            f_end = f_ends_all[:, i, k]
            parts = sizes[:, i] * tr.weights[k]
            fin = (f_end <= tau) & (parts > 0)
            f_last = float(f_end[fin].max()) if fin.any() else None
            f_net = union_us(np.where(parts > 0, starts[:, i], INF), f_net_all[:, i, k], tau)
            flows.append((base + k, int(np.rint(parts[fin].sum())), f_last, int(f_net)))
    return Side(nbytes, t_last, done, int(net), tuple(flows))


@dataclass(frozen=True, slots=True)
class Finals:
    """Peer entries of finished connections, vectorised: index e of `entries` in `finals`.
    Flow arrays are [E, C * Q] in (channel, flow) order."""

    bytes: FloatArray
    send_last: FloatArray
    recv_last: FloatArray
    send_net: FloatArray
    recv_net: FloatArray
    flow_bytes: FloatArray
    flow_send_last: FloatArray
    flow_recv_last: FloatArray
    flow_send_net: FloatArray
    flow_recv_net: FloatArray


def finals(tr: Transfer, entries: IntArray) -> Finals:
    """Final peer entries of groups of connections (`entries` [E, C]: a rank pair's
    connections, one per channel) whose every chunk completed."""
    m = tr.sizes.shape[0]
    e_count, c = entries.shape
    q = tr.weights.shape[0]

    def grouped(a: FloatArray) -> FloatArray:
        g = a[:, entries]  # [M, E, C]
        out: FloatArray = g.transpose(0, 2, 1).reshape(m * c, e_count)
        return out

    sizes = tr.sizes[:, entries]  # [M, E, C]
    live = sizes > 0
    send_net = union_columns(grouped(np.where(tr.sizes > 0, tr.post, INF)), grouped(tr.net_end))
    recv_net = union_columns(grouped(np.where(tr.sizes > 0, tr.recv_post, INF)),
                             grouped(tr.arrive))
    parts = sizes[..., None] * tr.weights  # [M, E, C, Q]
    f_comp = tr.flow_complete[:, entries, :]
    f_arr = tr.flow_arrive[:, entries, :]
    f_post = np.broadcast_to(np.where(live, tr.post[:, entries], INF)[..., None], f_comp.shape)
    f_rpost = np.broadcast_to(np.where(live, tr.recv_post[:, entries], INF)[..., None],
                              f_comp.shape)
    flat = (m, e_count * c * q)
    f_net_end = tr.flow_net_end[:, entries, :]
    f_send_net = union_columns(f_post.reshape(flat), f_net_end.reshape(flat)).reshape(e_count, c * q)
    f_recv_net = union_columns(f_rpost.reshape(flat), f_arr.reshape(flat)).reshape(e_count, c * q)
    masked_comp = np.where(parts > 0, f_comp, -INF)
    masked_arr = np.where(parts > 0, f_arr, -INF)
    return Finals(
        bytes=sizes.sum(axis=(0, 2)),
        send_last=np.where(live, tr.complete[:, entries], -INF).max(axis=(0, 2)),
        recv_last=np.where(live, tr.arrive[:, entries], -INF).max(axis=(0, 2)),
        send_net=send_net, recv_net=recv_net,
        flow_bytes=np.rint(parts.sum(axis=0)).reshape(e_count, c * q),
        flow_send_last=masked_comp.max(axis=0).reshape(e_count, c * q),
        flow_recv_last=masked_arr.max(axis=0).reshape(e_count, c * q),
        flow_send_net=f_send_net, flow_recv_net=f_recv_net,
    )
