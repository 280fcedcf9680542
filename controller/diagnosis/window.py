"""Bounded in-memory telemetry windows, one per (job, communicator).

Keeps the last `window_collectives` sequence numbers of each communicator and at most
`max_comms_per_job` communicators per job, so memory depends on the configuration and the
ranks, never on how long a job runs. A record replaces the stored one of the same identity
(job, comm, rank, seq) unless the stored one is further along (`progress_key`): re-sends that
arrive late or twice change nothing. No I/O, no clock: callers pass `now_us`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from controller.domain.telemetry import CollectiveRecord

T = TypeVar("T")


@dataclass(slots=True)
class CommWindow:
    """The recent collectives of one communicator: seq -> rank -> record."""

    job: str
    comm: str
    nranks: int = 0
    seqs: dict[int, dict[int, CollectiveRecord]] = field(default_factory=dict)
    rank_hosts: dict[int, str] = field(default_factory=dict)
    last_update_us: int = 0
    version: int = 0  # bumped on every change; keys the caches below
    seq_versions: dict[int, int] = field(default_factory=dict)  # bumped when a seq changes
    cache: dict[object, tuple[int, object]] = field(default_factory=dict)  # per-seq results
    _complete: tuple[int, list[int]] = (-1, [])
    _settled: tuple[int, list[int]] = (-1, [])

    def sorted_seqs(self) -> list[int]:
        return sorted(self.seqs)

    def latest_seq_of(self) -> dict[int, int]:
        """rank -> the highest seq it has a record for in the window."""
        latest: dict[int, int] = {}
        for seq, by_rank in self.seqs.items():
            for rank in by_rank:
                if latest.get(rank, -1) < seq:
                    latest[rank] = seq
        return latest

    def complete_seqs(self) -> list[int]:
        """Seqs, ascending, for which every rank has a finished record."""
        if self._complete[0] != self.version:
            done = [
                s
                for s in self.sorted_seqs()
                if self.nranks > 0
                and len(self.seqs[s]) == self.nranks
                and all(r.t_end_us is not None for r in self.seqs[s].values())
            ]
            self._complete = (self.version, done)
        return list(self._complete[1])

    def cached(self, name: str, seq: int, compute: Callable[[], T]) -> T:
        """`compute()` for `seq`, remembered until that seq's records change."""
        key = (name, seq)
        version = self.seq_versions.get(seq, 0)
        got = self.cache.get(key)
        if got is not None and got[0] == version:
            return got[1]  # type: ignore[return-value]
        value = compute()
        self.cache[key] = (version, value)
        return value

    def settled_seqs(self) -> list[int]:
        """Seqs, ascending, that are over as far as the reports tell: every rank that reported
        has finished it, and every rank reported or a later seq has begun. The slow detectors
        work on these, so a rank whose records were lost (or a silent host) does not hide its
        communicator's collectives; they use the ranks that did report."""
        if self._settled[0] != self.version:
            latest = max(self.seqs, default=-1)
            done = [
                s
                for s in self.sorted_seqs()
                if self.seqs[s]
                and all(r.t_end_us is not None for r in self.seqs[s].values())
                and (len(self.seqs[s]) >= self.nranks or s < latest)
            ]
            self._settled = (self.version, done)
        return list(self._settled[1])

    def record_count(self) -> int:
        return sum(len(by_rank) for by_rank in self.seqs.values())


class WindowStore:
    """All windows. `put` returns whether the record changed anything."""

    def __init__(self, window_collectives: int, max_comms_per_job: int) -> None:
        self._max_seqs = window_collectives
        self._max_comms = max_comms_per_job
        self._jobs: dict[str, dict[str, CommWindow]] = {}
        self._job_seqs: dict[str, int] = {}  # jobs whose own settings need a longer window

    def set_job_window(self, job: str, window_collectives: int) -> None:
        self._job_seqs[job] = window_collectives

    def put(self, record: CollectiveRecord, now_us: int) -> bool:
        comms = self._jobs.setdefault(record.job, {})
        window = comms.get(record.comm)
        if window is None:
            window = CommWindow(record.job, record.comm)
            comms[record.comm] = window
            self._evict_comms(comms)
        max_seqs = self._job_seqs.get(record.job, self._max_seqs)
        full = len(window.seqs) >= max_seqs and record.seq not in window.seqs
        if full and record.seq < min(window.seqs):
            return False  # older than anything kept: too late to matter
        by_rank = window.seqs.setdefault(record.seq, {})
        stored = by_rank.get(record.rank)
        if stored is not None and (stored == record or stored.progress_key > record.progress_key):
            return False
        by_rank[record.rank] = record
        window.version += 1
        window.seq_versions[record.seq] = window.seq_versions.get(record.seq, 0) + 1
        window.nranks = max(window.nranks, record.nranks)
        window.rank_hosts[record.rank] = record.host
        window.last_update_us = max(window.last_update_us, now_us)
        while len(window.seqs) > max_seqs:
            oldest = min(window.seqs)
            del window.seqs[oldest]
            window.seq_versions.pop(oldest, None)
            for key in [k for k in window.cache if isinstance(k, tuple) and k[-1] == oldest]:
                del window.cache[key]
            window.version += 1
        return True

    def _evict_comms(self, comms: dict[str, CommWindow]) -> None:
        while len(comms) > self._max_comms:
            oldest = min(comms.values(), key=lambda w: (w.last_update_us, w.comm))
            del comms[oldest.comm]

    def expire(self, now_us: int, idle_us: int) -> None:
        for job in sorted(self._jobs):
            comms = self._jobs[job]
            for comm in sorted(comms):
                if now_us - comms[comm].last_update_us >= idle_us:
                    del comms[comm]
            if not comms:
                del self._jobs[job]

    def forget_job(self, job: str) -> None:
        self._jobs.pop(job, None)
        self._job_seqs.pop(job, None)

    def jobs(self) -> list[str]:
        return sorted(self._jobs)

    def windows(self, job: str) -> list[CommWindow]:
        comms = self._jobs.get(job, {})
        return [comms[c] for c in sorted(comms)]

    def record_count(self) -> int:
        return sum(w.record_count() for comms in self._jobs.values() for w in comms.values())
