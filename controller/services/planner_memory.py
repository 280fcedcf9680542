"""What the planning service remembers between transactions, and the rules for sharing it.

The memory makes the common cases fast; the database stays the truth. It holds:

- `candidates`: the candidate routes (with their source ports) of one fabric revision, so a
  plan, a refresh and the next link change reuse the sampling, and a link change inherits
  the routes of the pairs it did not touch (`Candidates.inherit`). One revision is kept.
- `hashes`: the `c4-ref-v1` hash values, which outlive revisions (`te.ports.HashCache`,
  bounded by its own key limit).
- per job (keyed by row id and name): its derived flows and flows per NIC (from the spec,
  which never changes), and the plan as last stored (`Loaded`: version, status,
  assignments, row ids).
- `index`: the planned jobs' `PlanIndex` for the next link change, keyed by every active
  job's (name, id, version, status).
- the summaries waiting for a refresh (job -> when it may start, and since when it has
  waited: those lacking a figure first, then the others, each oldest first), the active-jobs
  signature the summaries were last refreshed for, probed-mode knowledge per job, and when
  the global re-optimisation last ran.

Concurrency. The planner worker (one thread, in the leader process only) and request threads
(link PATCH, fabric PUT, job POST and DELETE hooks, in every process) share one memory.
1. Every field is read and replaced under `self._lock`, and no lock is held across a
   database call or a solve: readers take a reference and use it outside.
2. What is published is never changed afterwards (a `Loaded`, a `PlanIndex`); the one
   exception, a `Candidates` object, only grows its caches, and `inherit` copies them.
3. What is computed inside a transaction is published only when it commits (`on_commit`):
   a rolled-back plan must never pass for a stored one of the same version.
4. Every key carries what makes it current (row id and version, fabric revision), and a
   reader compares it with what it read in its own transaction before using a hit.
5. Eviction: `retain(active)` drops every job entry whose job is no longer active (the
   worker calls it each step); one candidates object and one index are kept; the refresh
   queue holds at most one entry per job.
6. `reopt_due` and `last_reopt` are plain attributes: a link hook sets `reopt_due`, the
   worker reads and clears it (a lost race only moves a re-optimisation to the next step).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session

from controller.domain.fabric import Fabric
from controller.domain.jobs import Assignment, Flow, FlowKey
from controller.services.jobs import spec_from_document
from controller.te import flows as job_flows
from controller.te.candidates import Candidates, Nic
from controller.te.instance import count_by_nic
from controller.te.ports import HashCache
from controller.te.replan import PlanIndex

JobKey = tuple[int, str]  # (row id, name): a name reused after a delete is another job
IndexKey = tuple[tuple[str, int, int, str], ...]


@dataclass(frozen=True)
class Loaded:
    """One active job as stored: row id, version, status, flows and (if planned) assignments.
    `row_ids` may be filled after publication (once, by the worker) for jobs whose ids the
    first plan's insert did not return."""

    name: str
    job_id: int
    version: int
    status: str
    flows: list[Flow]
    assignments: dict[FlowKey, Assignment]
    row_ids: dict[FlowKey, int]


class PlannerMemory:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.hashes = HashCache()
        self._cands: tuple[int, Candidates] | None = None
        self._flows: dict[JobKey, list[Flow]] = {}
        self._counts: dict[JobKey, Counter[Nic]] = {}
        self._loaded: dict[str, Loaded] = {}
        self._index: tuple[IndexKey, PlanIndex] | None = None
        self._refresh: dict[str, float] = {}  # job -> when its refresh may start
        # job -> since when it has waited (monotonic s; kept when it is scheduled again): the
        # order of `refreshes_due`, so jobs that keep being rescheduled under churn cannot
        # push a job back for ever (they used to go by name: late names waited)
        self._since: dict[str, float] = {}
        self._first: set[str] = set()  # refreshes of summaries that lack a figure: before the others
        self._refreshed_for: frozenset[tuple[str, int, int, str]] | None = None
        self._knowledge: dict[JobKey, int] = {}
        self._usable: set[tuple[int, str, int | None]] = set()
        self.reopt_due = False
        self.last_reopt = time.monotonic()

    # --- candidates ---------------------------------------------------------------------

    def candidates(self, revision: int, fabric: Fabric) -> Candidates | None:
        """The kept candidates if they are exactly this revision's fabric."""
        with self._lock:
            kept = self._cands
        if kept is not None and kept[0] == revision and (kept[1].view.fabric is fabric
                                                         or kept[1].view.fabric == fabric):
            return kept[1]
        return None

    def candidates_at(self, revision: int) -> Candidates | None:
        """The kept candidates if they are of `revision` (no fabric check: the caller knows)."""
        with self._lock:
            kept = self._cands
        return kept[1] if kept is not None and kept[0] == revision else None

    def any_candidates(self) -> Candidates | None:
        with self._lock:
            return self._cands[1] if self._cands is not None else None

    def keep_candidates(self, revision: int, cands: Candidates) -> None:
        """Keep these unless a newer revision's are kept (a worker may read an older one)."""
        with self._lock:
            if self._cands is None or self._cands[0] <= revision:
                self._cands = (revision, cands)

    # --- jobs ---------------------------------------------------------------------------

    def flows(self, key: JobKey, spec: Mapping[str, Any]) -> list[Flow]:
        """A job's flows, derived from its spec document once."""
        with self._lock:
            hit = self._flows.get(key)
        if hit is None:
            hit = job_flows.derive_flows(spec_from_document(dict(spec)))
            with self._lock:
                self._flows[key] = hit
        return hit

    def has_flows(self, key: JobKey) -> bool:
        with self._lock:
            return key in self._flows

    def counts(self, key: JobKey, spec: Mapping[str, Any]) -> Counter[Nic]:
        """A job's flows per source NIC."""
        with self._lock:
            hit = self._counts.get(key)
        if hit is None:
            hit = count_by_nic(self.flows(key, spec))
            with self._lock:
                self._counts[key] = hit
        return hit

    def counts_of(self, job: Loaded) -> Counter[Nic]:
        """A loaded job's flows per source NIC."""
        key = (job.job_id, job.name)
        with self._lock:
            hit = self._counts.get(key)
        if hit is None:
            hit = count_by_nic(job.flows)
            with self._lock:
                self._counts[key] = hit
        return hit

    def loaded(self, name: str) -> Loaded | None:
        with self._lock:
            return self._loaded.get(name)

    def keep_loaded(self, name: str, job: Loaded) -> None:
        with self._lock:
            self._loaded[name] = job

    def forget(self, name: str) -> None:
        with self._lock:
            self._loaded.pop(name, None)

    def all_loaded(self) -> list[Loaded]:
        with self._lock:
            return list(self._loaded.values())

    def retain(self, active: Collection[JobKey]) -> None:
        """Evict every entry of a job that is no longer active."""
        keep = set(active)
        names = {n for _, n in keep}
        with self._lock:
            for d in (self._flows, self._counts, self._knowledge):
                for k in [k for k in d if k not in keep]:
                    del d[k]
            for n in [n for n, j in self._loaded.items() if n not in names or (j.job_id, n) not in keep]:
                del self._loaded[n]
            for n in [n for n in self._refresh if n not in names]:
                del self._refresh[n]
            self._since = {n: t for n, t in self._since.items() if n in self._refresh}
            self._first &= set(self._refresh)
            self._usable = {k for k in self._usable if (k[0], k[1]) in keep}

    def usable(self, key: tuple[int, str, int | None]) -> bool:
        """Whether the job (row id, name) was found carried by fabric revision (3rd) before."""
        with self._lock:
            return key in self._usable

    def keep_usable(self, key: tuple[int, str, int | None]) -> None:
        with self._lock:
            self._usable.add(key)

    def knowledge(self, key: JobKey) -> int | None:
        """Probed mode: how many (port pair, path) routes the job's last plan knew."""
        with self._lock:
            return self._knowledge.get(key)

    def keep_knowledge(self, key: JobKey, known: int) -> None:
        with self._lock:
            self._knowledge[key] = known

    # --- the plan index -----------------------------------------------------------------

    def index(self, key: IndexKey) -> PlanIndex | None:
        with self._lock:
            kept = self._index
        return kept[1] if kept is not None and kept[0] == key else None

    def index_key(self) -> IndexKey | None:
        with self._lock:
            return self._index[0] if self._index is not None else None

    def keep_index(self, key: IndexKey, index: PlanIndex) -> None:
        with self._lock:
            self._index = (key, index)

    # --- summary refreshes ----------------------------------------------------------------

    def schedule_refresh(self, names: Iterable[str], due: float, first: bool = False,
                         since: float | None = None) -> None:
        """Refresh the named summaries from `due` on. `first`: the summaries lack a figure
        (`Config.ecmp_simulation_later`): they come before the others in `refreshes_due`
        until refreshed. `since`: since when they have waited (default `due`; for `first`,
        when the figure went missing); a job scheduled again keeps its earlier time."""
        start = due if since is None else since
        with self._lock:
            for n in names:
                self._refresh[n] = due
                self._since[n] = min(self._since.get(n, start), start)
                if first:
                    self._first.add(n)

    def refreshes_due(self, now: float) -> list[tuple[str, float]]:
        """The summaries due for a refresh: those lacking a figure first, then the others;
        each the longest waiting first (then by name)."""
        with self._lock:
            return sorted(((n, due) for n, due in self._refresh.items() if due <= now),
                          key=lambda e: (e[0] not in self._first, self._since.get(e[0], e[1]), e[0]))

    def take_refresh(self, name: str, due: float) -> None:
        """Drop the entry unless it was rescheduled since it was read."""
        with self._lock:
            if self._refresh.get(name) == due:
                del self._refresh[name]
                self._since.pop(name, None)
                self._first.discard(name)

    def pending_refreshes(self) -> set[str]:
        with self._lock:
            return set(self._refresh)

    def refreshed_for(self) -> frozenset[tuple[str, int, int, str]] | None:
        with self._lock:
            return self._refreshed_for

    def set_refreshed_for(self, signature: frozenset[tuple[str, int, int, str]]) -> None:
        with self._lock:
            self._refreshed_for = signature

    # --- publication ------------------------------------------------------------------

    @staticmethod
    def on_commit(session: Session, action: Callable[[], object]) -> None:
        """Run `action` when the session's transaction commits (never, if it rolls back)."""
        event.listen(session, "after_commit", lambda _session: action(), once=True)
