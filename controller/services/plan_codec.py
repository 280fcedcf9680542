"""A compact form of planning parts and their results for the trip to and from a planning
process (`services.plan_pool`).

Pickled as they are, a part of one pod-sized job (16,384 flows) and its plan cost ~250 ms of
the planner thread's time per part (~50 ms to pickle the task, ~75 ms to unpickle the result,
and as much again in the worker), about as long as planning it: every `Flow`, `FlowKey` and
`Assignment` is an object pickle reduces one by one. Here flows and assignments travel as
integer and float columns (numpy arrays, which pickle as their bytes) over one table of the
message's strings and one of its paths (with their links), and are rebuilt as the same values
at the other end (tested: round trips equal). Everything else (config, summaries, errors)
pickles as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from controller.domain.jobs import Assignment, Flow, FlowKey
from controller.te.instance import ActiveJob
from controller.te.planner import JobPlan, PartTask

Packed = tuple[list[str], list[tuple[tuple[str, ...], tuple[str, ...]]], Any]


class _Tables:
    def __init__(self, strings: list[str] | None = None,
                 paths: list[tuple[tuple[str, ...], tuple[str, ...]]] | None = None) -> None:
        self.strings = strings if strings is not None else []
        self.paths = paths if paths is not None else []
        self._s: dict[str, int] = {}
        self._p: dict[tuple[str, ...], int] = {}

    def s(self, x: str) -> int:
        i = self._s.get(x)
        if i is None:
            i = self._s[x] = len(self.strings)
            self.strings.append(x)
        return i

    def p(self, a: Assignment) -> int:
        i = self._p.get(a.path)
        if i is None:
            i = self._p[a.path] = len(self.paths)
            self.paths.append((a.path, a.links))
        return i

    # --- flows ------------------------------------------------------------------------------

    def flows(self, flows: Sequence[Flow]) -> np.ndarray:
        s = self.s
        return np.array([(f.key.src_rank, f.key.dst_rank, f.key.channel, f.key.qp, s(f.src_host), s(f.src_nic),
                          s(f.dst_host), s(f.dst_nic), f.flows_in_connection) for f in flows],
                        dtype=np.int64).reshape(len(flows), 9)

    def unflows(self, packed: np.ndarray) -> list[Flow]:
        S = self.strings
        return [Flow(FlowKey(a, b, c, d), S[h1], S[n1], S[h2], S[n2], k)
                for a, b, c, d, h1, n1, h2, n2, k in packed.tolist()]

    # --- assignments ------------------------------------------------------------------------

    def assignments(self, m: Mapping[FlowKey, Assignment]) -> tuple[np.ndarray, np.ndarray]:
        """(keys, nodes, source port and path per row as int64; weights as float64)."""
        s, p = self.s, self.p
        ints = np.array([(a.key.src_rank, a.key.dst_rank, a.key.channel, a.key.qp, s(a.src_node), s(a.dst_node),
                          a.udp_sport, p(a)) for a in m.values()], dtype=np.int64).reshape(len(m), 8)
        weights = np.array([a.weight for a in m.values()], dtype=np.float64)
        return ints, weights

    def unassignments(self, packed: tuple[np.ndarray, np.ndarray]) -> dict[FlowKey, Assignment]:
        ints, weights = packed
        S, P = self.strings, self.paths
        out = {}
        for (a, b, c, d, src, dst, sport, path), w in zip(ints.tolist(), weights.tolist(), strict=True):
            key = FlowKey(a, b, c, d)
            hops, links = P[path]
            out[key] = Assignment(key, S[src], S[dst], sport, w, hops, links)
        return out


def pack_task(task: PartTask) -> Packed:
    t = _Tables()
    targets = [(name, t.flows(flows)) for name, flows in task.targets.items()]
    active = [(name, t.flows(job.flows), t.assignments(job.assignments)) for name, job in task.active.items()]
    return t.strings, t.paths, (targets, active, task.config, task.deadline)


def unpack_task(packed: Packed) -> PartTask:
    strings, paths, (targets, active, config, deadline) = packed
    t = _Tables(strings, paths)
    return PartTask({name: t.unflows(f) for name, f in targets},
                    {name: ActiveJob(t.unflows(f), t.unassignments(a)) for name, f, a in active}, config, deadline)


def pack_plans(plans: Mapping[str, JobPlan]) -> Packed:
    t = _Tables()
    rows = [(p.job, p.status, t.assignments(p.assignments), p.summary, p.error, p.moved, p.joint_bound, p.violation)
            for p in plans.values()]
    return t.strings, t.paths, rows


def unpack_plans(packed: Packed) -> dict[str, JobPlan]:
    strings, paths, rows = packed
    t = _Tables(strings, paths)
    return {job: JobPlan(job, status, t.unassignments(a), summary, error, moved, joint_bound, violation)
            for job, status, a, summary, error, moved, joint_bound, violation in rows}
