"""Shim telemetry in the job's terms: `COLL` records become API.md collective records with job
ranks, and `CONN` counters become their peers' per-flow progress.

Pure: decoded messages and `now_us` come in, API records (plain dicts) and counts go out.

Ranks (FORMAT.md "Job identity"). A communicator's rank 3 is not the job's rank 3, so every
rank is mapped before a record leaves the host:

- the reporting rank is the process's job rank (the shim's ``job_rank``, from the launcher's
  ``RANK``/``OMPI_COMM_WORLD_RANK``/``SLURM_PROCID``/``C4_RANK``; or what the process said in
  its STATS and LOOKUPs), and the job is its ``C4_JOB`` (or the only job with ranks here);
- a peer's job rank is what the shim learned from the connection's handle or hello; failing
  that, what any local process of the same job reported for the same communicator rank
  (a per ``(job, communicator)`` table fed by every record and connection seen here).

Nothing is guessed: a record whose own rank or job cannot be named waits up to
``grace_us`` for the missing identity (the shim reports it every second), longer while the
controller is away (the job list may be what is missing), and is then dropped and counted; a peer entry that cannot be named is left out of its record and counted, and the
record then says it is incomplete (``truncated``, where the controller accepts that field).

Per-flow progress: each peer entry gets the flows of the connections to that peer in that
direction (joined on the communicator, the peer's communicator rank and the direction). Their
values are the connection's counters since it opened, as of the shim's latest ``CONN`` report:
bytes and time on the network per socket, matched to the plan by source port.
"""

from __future__ import annotations

import json
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from node_agent import coll_fast
from node_agent.cache import JobView
from node_agent.packed import CONTENT_TYPE as PACKED_TYPE
from node_agent.shim_protocol import NO_RANK, Coll, Conn, Lookup, Stats

MAX_FLOWS_PER_PEER = 64  # API.md
CONN_TTL_US = 600_000_000  # a connection silent this long is forgotten
CLOSED_TTL_US = 60_000_000  # a closed connection's last counters serve this long
MAX_HELD = 200_000  # records waiting for their identity at most (then dropped, counted)


@dataclass(frozen=True, slots=True)
class Capabilities:
    """The optional API fields the controller accepts (read from its OpenAPI schema)."""

    net_us: bool = False
    flow_net_us: bool = False
    truncated: bool = False
    heartbeat: bool = False
    packed: bool = False  # batches in application/x-c4-collectives (node_agent.packed)


@dataclass(slots=True)
class Identity:
    job: str = ""
    job_rank: int = NO_RANK
    seen_us: int = 0


@dataclass
class Counts:
    records_in: int = 0
    records_out: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    peers_dropped: int = 0
    conflicts: int = 0


class Mapper:
    """Turns the shim's records into API records; holds the identity and rank tables."""

    def __init__(self, job_for: Callable[[str, int], JobView | None], grace_us: int,
                 caps: Capabilities | None = None) -> None:
        self.job_for = job_for
        self.grace_us = grace_us
        self._caps = caps or Capabilities()
        self._flows_json: dict[tuple[int, int, int, str], bytes] = {}
        # coll_fast's per (pid, comm, comm rank, job rank, nranks): what its records share
        self.fast_ctx: dict[tuple[int, int, int, int, int], Any] = {}
        self.identity: dict[int, Identity] = {}
        # (job, comm hash) -> communicator rank -> job rank
        self.comm_ranks: dict[tuple[str, int], dict[int, int]] = defaultdict(dict)
        # (pid, comm hash, peer communicator rank, dir) -> {connection key: latest Conn}
        self.conns: dict[tuple[int, int, int, str], dict[tuple[Any, ...], Conn]] = defaultdict(dict)
        self.conn_seen: dict[tuple[Any, ...], tuple[int, bool, tuple[int, int, int, str]]] = {}
        self.held: deque[tuple[int, int, Coll]] = deque()  # (deadline, pid, record)
        self.counts = Counts()
        self.learned = 0  # rank table entries set or changed, ever (coll_fast's templates)
        self.flows_gen = 0  # `_flows_json` entries dropped, ever (coll_fast's templates)

    @property
    def caps(self) -> Capabilities:
        return self._caps

    @caps.setter
    def caps(self, caps: Capabilities) -> None:
        if caps != self._caps:
            self._flows_json.clear()  # their net_us may come or go
            self.flows_gen += 1
            self.fast_ctx.clear()  # so may the records' net_us and truncated
        self._caps = caps

    def flows_json(self, pid: int, comm: int, peer: int, dir: str) -> bytes:
        """`_flows` as JSON text, kept until the connection reports again (the fast path)."""
        key = (pid, comm, peer, dir)
        out = self._flows_json.get(key)
        if out is None:
            flows = self._flows(pid, comm, peer, dir)
            out = self._flows_json[key] = (
                json.dumps(flows, separators=(",", ":")).encode() if flows else b"")
        return out

    def coll_json(self, data: bytes) -> bytes | None:
        """The record of a COLL datagram as JSON text when it is the easy case (see
        node_agent.coll_fast), else None: decode it and call `on_coll`."""
        return coll_fast.coll_json(self, data)

    def coll_entry(self, data: bytes) -> tuple[bytes, bytes] | None:
        """The same, as a packed entry (node_agent.packed)."""
        return coll_fast.coll_entry(self, data)

    # ---- identity ----
    def on_stats(self, s: Stats, now_us: int) -> None:
        self._identify(s.pid, s.job, s.job_rank, now_us)

    def on_lookup(self, look: Lookup, now_us: int) -> None:
        self._identify(look.pid, look.job, look.src_rank, now_us)

    def _identify(self, pid: int, job: str, rank: int, now_us: int) -> None:
        ident = self.identity.get(pid)
        if ident is None:
            ident = self.identity[pid] = Identity()
        if job:
            ident.job = job
        if rank >= 0:
            ident.job_rank = rank
        ident.seen_us = now_us

    def process_of(self, pid: int) -> Identity:
        return self.identity.get(pid) or Identity()

    # ---- rank tables ----
    def _learn(self, job: str, comm: int, comm_rank: int, job_rank: int) -> None:
        if not comm or comm_rank < 0 or job_rank < 0:
            return
        table = self.comm_ranks[(job, comm)]
        old = table.get(comm_rank)
        if old != job_rank:
            if old is not None:
                self.counts.conflicts += 1
            table[comm_rank] = job_rank
            self.learned += 1

    def on_conn(self, c: Conn, now_us: int) -> None:
        ident = self.process_of(c.pid)
        job = self._job_name(ident.job, c.job_rank if c.job_rank >= 0 else ident.job_rank)
        if job:
            self._learn(job, c.comm_id, c.peer_comm_rank, c.peer_job_rank)
        if not c.comm_id or c.peer_comm_rank < 0:
            return
        where = (c.pid, c.comm_id, c.peer_comm_rank, c.dir)
        key = (c.pid, c.comm_id, c.local, c.remote, c.conn_index, c.dir, c.peer_job_rank,
               c.socks[0].sport if c.socks else 0)
        self.conns[where][key] = c
        self.conn_seen[key] = (now_us, c.closed, where)
        self._flows_json.pop(where, None)
        self.flows_gen += 1

    def expire(self, now_us: int) -> None:
        """Forget connections long closed or long silent, and processes gone quiet."""
        self.fast_ctx.clear()  # rebuilt on the next record; bounded by what is live
        for key, (seen, closed, where) in list(self.conn_seen.items()):
            if now_us - seen > (CLOSED_TTL_US if closed else CONN_TTL_US):
                del self.conn_seen[key]
                group = self.conns.get(where)
                self._flows_json.pop(where, None)
                self.flows_gen += 1
                if group is not None:
                    group.pop(key, None)
                    if not group:
                        del self.conns[where]
        for pid, ident in list(self.identity.items()):
            if now_us - ident.seen_us > CONN_TTL_US:
                del self.identity[pid]

    def _job_name(self, named: str, rank: int) -> str:
        job = self.job_for(named, rank)
        return job.name if job is not None else ""

    # ---- records ----
    def on_coll(self, c: Coll, now_us: int) -> list[dict[str, Any]]:
        """API records ready now (this one, or none while it waits for its identity)."""
        self.counts.records_in += 1
        out = self._map(c, final=len(self.held) >= MAX_HELD)
        if out is None:
            self.held.append((now_us + self.grace_us, c.pid, c))
            return []
        return [out] if out else []

    def release(self, now_us: int, patient: bool = False) -> list[dict[str, Any]]:
        """Held records that can now be mapped, or whose grace is over (mapped as far as they
        can be, or dropped). `patient`: the controller is away, so a job the agent cannot name
        yet may still arrive; records wait (up to `MAX_HELD`) instead of being dropped."""
        out: list[dict[str, Any]] = []
        for _ in range(len(self.held)):
            deadline, pid, c = self.held.popleft()
            final = now_us >= deadline and (not patient or len(self.held) >= MAX_HELD)
            rec = self._map(c, final=final)
            if rec is None:
                self.held.append((deadline, pid, c))
            elif rec:
                out.append(rec)
        return out

    def _drop(self, reason: str) -> dict[str, Any]:
        self.counts.dropped[reason] += 1
        return {}

    def _map(self, c: Coll, final: bool) -> dict[str, Any] | None:
        """The API record; {} when dropped (counted); None to wait for missing identity."""
        ident = self.process_of(c.pid)
        rank = c.job_rank if c.job_rank >= 0 else ident.job_rank
        job = self.job_for(ident.job, rank)
        if job is None:
            return self._drop("unknown_job") if final else None
        if rank < 0:
            return self._drop("unknown_rank") if final else None
        if rank not in job.ranks:
            return self._drop("rank_not_in_job")
        comm = c.comm_hash
        self._learn(job.name, comm, c.rank, rank)
        for p in c.peers:
            self._learn(job.name, comm, p.peer, p.peer_job_rank)
        table = self.comm_ranks.get((job.name, comm), {})
        peers, missing = [], 0
        for p in c.peers:
            peer = p.peer_job_rank if p.peer_job_rank >= 0 else table.get(p.peer, NO_RANK)
            if peer < 0 or peer == rank or peer not in job.ranks:
                missing += 1
                continue
            peers.append(self._peer(c.pid, comm, p, peer))
        if missing and not final:
            return None
        self.counts.peers_dropped += missing
        self.counts.records_out += 1
        rec: dict[str, Any] = {
            "job": job.name, "comm": f"{comm:#x}", "rank": rank, "nranks": max(c.nranks, 1),
            "op": c.op, "seq": c.seq, "bytes": c.bytes, "t_start_us": c.t_start_us,
            "t_end_us": c.t_end_us if c.t_end_us >= c.t_start_us and c.t_end_us else None,
            "peers": peers,
        }  # fmt: skip
        if (c.truncated or missing) and (self.caps.truncated or self.caps.packed):
            rec["truncated"] = True  # (the packed form always carries it: node_agent.packed)
        return rec

    def _peer(self, pid: int, comm: int, p: Any, peer: int) -> dict[str, Any]:
        moved = p.bytes > 0 and p.t_first_us > 0 and p.t_last_us >= p.t_first_us
        entry: dict[str, Any] = {
            "peer": peer, "dir": p.dir, "bytes": p.bytes,
            "t_first_us": p.t_first_us if moved else None,
            "t_last_us": p.t_last_us if moved else None, "done": p.done,
        }  # fmt: skip
        if p.net_us is not None and self.caps.net_us:
            entry["net_us"] = p.net_us
        flows = self._flows(pid, comm, p.peer, p.dir)
        if flows:
            entry["flows"] = flows
        return entry

    def _flows(self, pid: int, comm: int, peer: int, dir: str) -> list[dict[str, Any]]:
        group = self.conns.get((pid, comm, peer, dir))
        if not group:
            return []
        out: dict[int, dict[str, Any]] = {}
        for conn in group.values():
            for s in conn.socks:
                if s.sport in out or not s.sport:
                    continue
                f: dict[str, Any] = {"sport": s.sport, "bytes": s.bytes,
                                     "t_last_us": s.t_last_us or None}
                if s.net_us is not None and self.caps.flow_net_us:
                    f["net_us"] = s.net_us
                out[s.sport] = f
        return [out[k] for k in sorted(out)][:MAX_FLOWS_PER_PEER]


def capabilities(openapi: dict[str, Any]) -> Capabilities:
    """What the controller's request schemas accept, from its /openapi.json."""
    schemas = openapi.get("components", {}).get("schemas", {})

    def props(name: str) -> Iterable[str]:
        for key, sch in schemas.items():
            if key == name or key.startswith(name + "-"):
                return list(sch.get("properties", {}))
        return ()

    batch: dict[str, Any] = next(
        (s for k, s in schemas.items() if k.startswith("CollectiveBatch")), {})
    records = batch.get("properties", {}).get("records", {})
    post = openapi.get("paths", {}).get("/v1/telemetry/collectives", {}).get("post", {})
    return Capabilities(
        net_us="net_us" in props("PeerCreate"),
        flow_net_us="net_us" in props("FlowCreate"),
        truncated="truncated" in props("CollectiveCreate"),
        heartbeat=bool(records) and records.get("minItems", 0) == 0,  # no minimum: empty ok
        packed=PACKED_TYPE in post.get("requestBody", {}).get("content", {}),
    )
