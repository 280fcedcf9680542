"""Planning independent fabric parts in parallel processes (issue 18).

`te.planner.plan` splits a batch of new jobs into parts that share no switch (`te.parts`)
and hands them to a runner; this is the runner: a pool of `spawn`ed worker processes (never
forked from the controller, whose threads hold locks and database connections) that plan a
part each (`te.planner.plan_part`). The fabric goes to the workers pickled once per fabric
revision, and each worker keeps the last one it saw with its candidates (routes and model
source ports, computed once per revision per worker), so a task carries the part's jobs and
the fabric's bytes, which a worker that has the revision does not unpickle. Parts and plans
travel in columns (`services.plan_codec`): pickled as objects, a pod-sized part cost the
planner thread about as much as planning it.

A worker that dies (killed, out of memory) breaks the pool: the parts of that batch are
planned in this process instead, and the next batch starts a fresh pool. The pool starts on
the first batch that has parts (its workers import the planner: a second or two, once).
With `C4_PLAN_PROCESSES` 0 or 1 there is no pool: the parts are planned one after the other
in the planner's thread, which is still cheaper than one plan of the whole batch.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from prometheus_client import Counter

from controller.domain.fabric import Fabric
from controller.services import plan_codec
from controller.te import planner as te_planner
from controller.te.candidates import Candidates, for_fabric

log = logging.getLogger(__name__)

PARTS = Counter("c4_planner_parts_total", "Independent fabric parts of new-job batches planned, by where",
                ["where"])

# In a worker process: the fabric revision it last planned on, that fabric and its candidates.
_worker: tuple[int, Fabric, Candidates] | None = None


def _plan_in_worker(key: int, blob: bytes, task: plan_codec.Packed, share: float) -> plan_codec.Packed:
    global _worker
    if _worker is None or _worker[0] != key:
        fabric: Fabric = pickle.loads(blob)
        _worker = (key, fabric, for_fabric(fabric))
    plans = te_planner.plan_part(_worker[1], plan_codec.unpack_task(task), _worker[2], share)
    return plan_codec.pack_plans(plans)


def default_processes() -> int:
    """The CPU count less one (the planner thread's process keeps one), at most 8."""
    return max(0, min(8, (os.cpu_count() or 1) - 1))


class PartPool:
    """A `te.planner.PartRunner` bound to one fabric revision per call (`runner`)."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._pool: ProcessPoolExecutor | None = None
        self._blob: tuple[int, bytes] | None = None
        self._lock = threading.Lock()
        self._closed = False  # (the app shut down: no new pool; a plan under way finishes here)

    @property
    def enabled(self) -> bool:
        return self.processes > 1

    def runner(self, revision: int, fabric: Fabric, cands: Candidates) -> te_planner.PartRunner:
        """The runner for plans on `fabric` (fabric revision `revision`; `cands` are this
        process's): the pool's, or with parallel planning off the parts one after the other
        in this thread (a part planned alone is cheaper than the batch's whole plan: its
        summaries pass over its own active jobs only)."""
        def run(tasks: Sequence[te_planner.PartTask]) -> Sequence[Mapping[str, te_planner.JobPlan]]:
            if not self.enabled:
                return self._here(fabric, cands, tasks)
            return self.run(revision, fabric, cands, tasks)
        return run

    def run(self, revision: int, fabric: Fabric, cands: Candidates,
            tasks: Sequence[te_planner.PartTask]) -> Sequence[Mapping[str, te_planner.JobPlan]]:
        """The parts in the pool, results in the tasks' order. A part that raises: the others
        are cancelled and the error is the caller's (the planner then plans the batch's jobs
        one by one). The pool broken (a worker died) or closed meanwhile (shutdown): the parts
        are planned in this thread."""
        with self._lock:
            pool = None
            if not self._closed:
                if self._blob is None or self._blob[0] != revision:
                    self._blob = (revision, pickle.dumps(fabric, protocol=pickle.HIGHEST_PROTOCOL))
                blob = self._blob[1]
                if self._pool is None:
                    self._pool = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"))
                pool = self._pool
        if pool is None:
            return self._here(fabric, cands, tasks)
        futures: list[Future[plan_codec.Packed]] = []
        try:
            share = min(1.0, self.processes / len(tasks))
            futures = [pool.submit(_plan_in_worker, revision, blob, plan_codec.pack_task(t), share) for t in tasks]
            out = [plan_codec.unpack_plans(f.result()) for f in futures]
            PARTS.labels("processes").inc(len(tasks))
            return out
        except BrokenProcessPool:
            log.exception("a planning process died: planning the batch's %d parts in this process", len(tasks))
            with self._lock:
                if self._pool is pool:
                    self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            return self._here(fabric, cands, tasks)
        except (CancelledError, RuntimeError):
            for f in futures:
                f.cancel()
            if not self._closed:  # (a part's own RuntimeError)
                raise
            return self._here(fabric, cands, tasks)  # shut down under way: submit refused, futures cancelled
        except BaseException:
            for f in futures:
                f.cancel()
            raise

    @staticmethod
    def _here(fabric: Fabric, cands: Candidates,
              tasks: Sequence[te_planner.PartTask]) -> Sequence[Mapping[str, te_planner.JobPlan]]:
        PARTS.labels("this_process").inc(len(tasks))
        return te_planner.plan_parts_here(fabric, tasks, cands)

    def close(self) -> None:
        """No pool from now on (the app shuts down); the current one's workers are stopped."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
