"""The assignments of every job with ranks on this host, and the answer to a shim's LOOKUP.

Pure: jobs come in as values (the job's ranks and the controller's assignment document), a
`Lookup` comes in and an `Assign` goes out, so a lookup is a few dict reads and never a
network round trip. The daemon keeps the cache fresh (long-polls) and does the socket I/O.

A lookup names a connection by FORMAT.md's key, which this module maps to the API's flow
identity ``(src_rank, dst_rank, channel, qp)``:

- TCP (the C4-Socket transport) with both job ranks known: ``conn_index`` is the connection's
  index among the process's connections to that peer rank, i.e. the channel; its sockets are
  the connection's flows in ``qp`` order.
- TCP without job ranks (an old launcher with no ``RANK``): the addresses name the two NICs,
  the NICs name the job's ranks on them; used only when that leaves one pair of ranks.
- RoCE (the verbs interposer): ``conn_index`` counts the process's QPs from one GID address
  to another; QP k is the k-th planned flow between those two NIC port addresses, in
  ``(src_rank, dst_rank, channel, qp)`` order.

Worked example, a two-rank ring whose rank 0 is on this host, one channel of two QPs::

    >>> cache = AssignmentCache("host0")
    >>> doc = {"job": "j", "version": 3, "assignments": [
    ...   {"src_rank": 0, "dst_rank": 1, "channel": 0, "qp": q, "udp_sport": 50000 + q,
    ...    "weight": 0.5, "src_address": "10.0.0.2", "dst_address": "10.0.1.2"}
    ...   for q in (0, 1)]}
    >>> cache.update("j", {0: ("host0", "mlx5_0"), 1: ("host1", "mlx5_0")}, doc)
    True
    >>> look = Lookup(req_id=1, pid=9, comm_id=5, local="10.0.0.2", remote="10.0.1.2",
    ...               remote_port=4792, conn_index=0, src_rank=0, dst_rank=1, job="j")
    >>> answer, outcome = cache.answer(look)
    >>> outcome, answer.version, [(f.sport, f.weight_ppm) for f in answer.flows]
    ('hit', 3, [(50000, 500000), (50001, 500000)])
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from node_agent.shim_protocol import NO_RANK, Assign, Flow, Lookup

RankTable = Mapping[int, tuple[str, str]]  # job rank -> (host, nic)


@dataclass(frozen=True, slots=True)
class PlannedFlow:
    src_rank: int
    dst_rank: int
    channel: int
    qp: int
    sport: int
    weight: float
    src_address: str
    dst_address: str


class JobView:
    """One job as this host's agent sees it: its ranks and the flows sourced here, indexed."""

    def __init__(self, name: str, ranks: RankTable, version: int, flows: list[PlannedFlow]):
        self.name, self.ranks, self.version = name, ranks, version
        self.flows = sorted(flows, key=lambda f: (f.src_rank, f.dst_rank, f.channel, f.qp))
        by_conn: dict[tuple[int, int, int], list[PlannedFlow]] = defaultdict(list)
        by_ports: dict[tuple[str, str], list[PlannedFlow]] = defaultdict(list)
        self.nic_of: dict[str, tuple[str, str]] = {}  # NIC port address -> (host, nic)
        for f in self.flows:
            by_conn[(f.src_rank, f.dst_rank, f.channel)].append(f)
            by_ports[(f.src_address, f.dst_address)].append(f)
            if f.src_rank in ranks:
                self.nic_of[f.src_address] = ranks[f.src_rank]
            if f.dst_rank in ranks:
                self.nic_of[f.dst_address] = ranks[f.dst_rank]
        self.by_conn = dict(by_conn)
        self.by_ports = dict(by_ports)
        self.ranks_on: dict[tuple[str, str], list[int]] = defaultdict(list)
        for rank, nic in sorted(ranks.items()):
            self.ranks_on[nic].append(rank)

    def connection(self, src: int, dst: int, channel: int) -> list[PlannedFlow]:
        return self.by_conn.get((src, dst, channel), [])

    def pair_by_address(self, local: str, remote: str, src_hint: int) -> tuple[int, int] | None:
        """The one (src, dst) rank pair between the NICs of two addresses that has flows."""
        a, b = self.nic_of.get(local), self.nic_of.get(remote)
        if a is None or b is None:
            return None
        srcs = [src_hint] if src_hint >= 0 else self.ranks_on.get(a, [])
        pairs = [(s, d) for s in srcs for d in self.ranks_on.get(b, [])
                 if any(k[0] == s and k[1] == d for k in self.by_conn)]
        return pairs[0] if len(pairs) == 1 else None


def planned_flows(doc: Mapping[str, Any]) -> list[PlannedFlow]:
    """The controller's assignments document (API.md) as values; bad entries raise ValueError."""
    out = []
    for a in doc.get("assignments", ()):
        try:
            out.append(PlannedFlow(int(a["src_rank"]), int(a["dst_rank"]), int(a["channel"]),
                                   int(a["qp"]), int(a["udp_sport"]), float(a["weight"]),
                                   str(a.get("src_address") or ""),
                                   str(a.get("dst_address") or "")))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"assignment {a!r}: {e}") from None
    return out


class AssignmentCache:
    """Every cached job's `JobView`, and lookups answered from them."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.jobs: dict[str, JobView] = {}
        self._nflows = 0  # Σ len(job.flows), kept as jobs come and go (read on every update)

    def update(self, name: str, ranks: RankTable | None, doc: Mapping[str, Any]) -> bool:
        """Store the job's assignments (`ranks` None keeps the known ones). True when the
        version or the flows changed."""
        old = self.jobs.get(name)
        table = ranks if ranks is not None else (old.ranks if old else {})
        flows = planned_flows(doc)
        version = int(doc.get("version", 0))
        if old is not None and old.version == version and old.flows == sorted(
                flows, key=lambda f: (f.src_rank, f.dst_rank, f.channel, f.qp)):
            if ranks is not None and dict(ranks) != dict(old.ranks):
                self._put(JobView(name, table, version, flows))
            return False
        self._put(JobView(name, table, version, flows))
        return True

    def _put(self, job: JobView) -> None:
        old = self.jobs.get(job.name)
        self._nflows += len(job.flows) - (len(old.flows) if old is not None else 0)
        self.jobs[job.name] = job

    def remove(self, name: str) -> None:
        old = self.jobs.pop(name, None)
        if old is not None:
            self._nflows -= len(old.flows)

    def snapshot(self) -> dict[str, Any]:
        """Every job as plain data (what `restore` takes back): the agent keeps it on disk so
        that, restarted while the controller is away, it still answers and maps."""
        return {name: {"ranks": {str(r): list(nic) for r, nic in sorted(j.ranks.items())},
                       "version": j.version,
                       "assignments": [{"src_rank": f.src_rank, "dst_rank": f.dst_rank,
                                        "channel": f.channel, "qp": f.qp, "udp_sport": f.sport,
                                        "weight": f.weight, "src_address": f.src_address,
                                        "dst_address": f.dst_address} for f in j.flows]}
                for name, j in sorted(self.jobs.items())}

    def restore(self, snap: Mapping[str, Any]) -> int:
        """Load a `snapshot` (jobs already cached win); returns how many jobs it added. A bad
        entry is skipped, never half-loaded."""
        added = 0
        for name, doc in snap.items():
            if name in self.jobs or not isinstance(doc, Mapping):
                continue
            try:
                ranks = {int(r): (str(n[0]), str(n[1])) for r, n in doc["ranks"].items()}
                self._put(JobView(name, ranks, int(doc["version"]), planned_flows(doc)))
                added += 1
            except (KeyError, TypeError, ValueError, IndexError):
                continue
        return added

    def flow_count(self) -> int:
        return self._nflows

    def local_jobs(self) -> list[str]:
        """Cached jobs with a rank on this host, sorted."""
        return sorted(n for n, j in self.jobs.items()
                      if any(h == self.host for h, _ in j.ranks.values()))

    def job_for(self, named: str, job_rank: int = NO_RANK) -> JobView | None:
        """The job a process belongs to: the one it names (C4_JOB), else the only cached job
        with ranks on this host, if the process's own rank (when known) is one of them."""
        if named:
            return self.jobs.get(named)
        local = self.local_jobs()
        if len(local) != 1:
            return None
        job = self.jobs[local[0]]
        if job_rank >= 0 and job.ranks.get(job_rank, ("", ""))[0] != self.host:
            return None
        return job

    def answer(self, look: Lookup, job_name: str = "", job_rank: int = NO_RANK
               ) -> tuple[Assign, str]:
        """The reply to `look` and what happened: "hit", "unknown_job" or "miss".

        `job_name` and `job_rank` are what the asking process said about itself before, for
        lookups that carry no identity of their own.
        """
        src = look.src_rank if look.src_rank >= 0 else job_rank
        job = self.job_for(look.job or job_name, src)
        if job is None:
            return Assign.answer(look, 0, ()), "unknown_job"
        flows = self._flows(job, look, src)
        if not flows:
            return Assign.answer(look, job.version, ()), "miss"
        ppm = Assign.weights_to_ppm([f.weight for f in flows])
        return Assign.answer(look, job.version, tuple(
            Flow(f.sport, w, f.src_address, f.dst_address) for f, w in zip(flows, ppm, strict=True)
        )), "hit"

    @staticmethod
    def _flows(job: JobView, look: Lookup, src: int) -> list[PlannedFlow]:
        if look.kind == "roce":
            pairs = job.by_ports.get((look.local, look.remote), [])
            mine = [f for f in pairs if src < 0 or f.src_rank == src]
            return mine[look.conn_index:look.conn_index + 1]
        if src >= 0 and look.dst_rank >= 0:
            return job.connection(src, look.dst_rank, look.conn_index)
        pair = job.pair_by_address(look.local, look.remote, src)
        return job.connection(pair[0], pair[1], look.conn_index) if pair else []
