"""The lookup path: a shim's connection key mapped to planned flows, from the cache alone."""

from __future__ import annotations

import doctest

import pytest

import node_agent.cache as cache_mod
from node_agent.cache import AssignmentCache
from node_agent.shim_protocol import PPM, Lookup

RANKS = {0: ("host0", "mlx5_0"), 1: ("host1", "mlx5_0"), 2: ("host0", "mlx5_1"),
         3: ("host2", "mlx5_0")}


def flow(src: int, dst: int, ch: int, qp: int, sport: int, weight: float = 0.5,
         sa: str = "10.0.0.2", da: str = "10.0.1.2") -> dict[str, object]:
    return {"src_rank": src, "dst_rank": dst, "channel": ch, "qp": qp, "udp_sport": sport,
            "weight": weight, "src_address": sa, "dst_address": da}


def doc(version: int, *flows: dict[str, object]) -> dict[str, object]:
    return {"job": "j", "version": version, "assignments": list(flows)}


def look(**kw: object) -> Lookup:
    base: dict[str, object] = dict(req_id=1, pid=7, comm_id=9, local="10.0.0.2",
                                   remote="10.0.1.2", remote_port=4792, conn_index=0)
    base.update(kw)
    return Lookup(**base)  # type: ignore[arg-type]


@pytest.fixture
def cache() -> AssignmentCache:
    c = AssignmentCache("host0")
    assert c.update("j", RANKS, doc(4,
        flow(0, 1, 0, 1, 50001, 0.25), flow(0, 1, 0, 0, 50000, 0.75),  # out of order on purpose
        flow(0, 1, 1, 0, 50010, 0.5, "10.0.0.3", "10.0.1.3"),
        flow(0, 1, 1, 1, 50011, 0.5, "10.0.0.3", "10.0.1.3"),
        flow(2, 3, 0, 0, 50020, 1.0, "10.0.0.9", "10.0.2.2")))
    return c


def test_module_example() -> None:
    assert doctest.testmod(cache_mod).failed == 0


def test_tcp_with_job_ranks_is_channel_then_qp_order(cache: AssignmentCache) -> None:
    a, outcome = cache.answer(look(src_rank=0, dst_rank=1, conn_index=0, job="j"))
    assert outcome == "hit" and a.version == 4 and a.req_id == 1
    assert [(f.sport, f.weight_ppm) for f in a.flows] == [(50000, 750_000), (50001, 250_000)]
    b, _ = cache.answer(look(src_rank=0, dst_rank=1, conn_index=1, job="j"))
    assert [(f.sport, f.src, f.dst) for f in b.flows] == [
        (50010, "10.0.0.3", "10.0.1.3"), (50011, "10.0.0.3", "10.0.1.3")]
    assert sum(f.weight_ppm for f in b.flows) == PPM
    assert (a.src_rank, a.dst_rank) == (0, 1)


def test_a_channel_beyond_the_plan_is_a_miss_not_a_guess(cache: AssignmentCache) -> None:
    a, outcome = cache.answer(look(src_rank=0, dst_rank=1, conn_index=2, job="j"))
    assert outcome == "miss" and a.status == "unknown" and a.version == 4


def test_unknown_job_and_identity_from_earlier_messages(cache: AssignmentCache) -> None:
    _, outcome = cache.answer(look(src_rank=0, dst_rank=1, job="other"))
    assert outcome == "unknown_job"
    # no C4_JOB in the lookup: the only job with ranks here answers, if the rank is one of its
    # ranks on this host
    a, outcome = cache.answer(look(src_rank=0, dst_rank=1))
    assert outcome == "hit" and a.flows[0].sport == 50000
    _, outcome = cache.answer(look(src_rank=1, dst_rank=0))  # rank 1 lives on host1
    assert outcome == "unknown_job"
    cache.update("k", {0: ("host0", "mlx5_0")}, {"version": 1, "assignments": []})
    _, outcome = cache.answer(look(src_rank=0, dst_rank=1))  # two jobs here now: ambiguous
    assert outcome == "unknown_job"
    a, outcome = cache.answer(look(src_rank=0, dst_rank=1), job_name="j")  # said in its STATS
    assert outcome == "hit"


def test_addresses_name_the_ranks_only_when_that_is_unambiguous(cache: AssignmentCache) -> None:
    a, outcome = cache.answer(look(job="j", conn_index=1))  # no job ranks in the lookup
    assert outcome == "hit" and [f.sport for f in a.flows] == [50010, 50011]
    # host0's NIC mlx5_1 (rank 2) to host2 (rank 3)
    a, outcome = cache.answer(look(job="j", local="10.0.0.9", remote="10.0.2.2"))
    assert outcome == "hit" and a.flows[0].sport == 50020
    _, outcome = cache.answer(look(job="j", local="10.9.9.9", remote="10.0.1.2"))
    assert outcome == "miss"


def test_two_ranks_on_one_nic_need_the_rank() -> None:
    c = AssignmentCache("host0")
    ranks = {0: ("host0", "mlx5_0"), 1: ("host0", "mlx5_0"), 2: ("host1", "mlx5_0")}
    c.update("j", ranks, doc(1, flow(0, 2, 0, 0, 50000, 1.0), flow(1, 2, 0, 0, 50001, 1.0)))
    _, outcome = c.answer(look(job="j"))
    assert outcome == "miss"  # rank 0 or rank 1? not guessed
    a, outcome = c.answer(look(job="j", src_rank=1))
    assert outcome == "hit" and a.flows[0].sport == 50001


def test_roce_qp_k_is_the_kth_flow_between_the_two_ports(cache: AssignmentCache) -> None:
    got = []
    for k in range(3):
        a, outcome = cache.answer(look(job="j", kind="roce", conn_index=k, max_flows=1,
                                       remote_port=4791, src_rank=0))
        got.append((outcome, [(f.sport, f.weight_ppm) for f in a.flows]))
    assert got == [("hit", [(50000, PPM)]), ("hit", [(50001, PPM)]), ("miss", [])]


def test_update_reports_changes_only() -> None:
    c = AssignmentCache("host0")
    d = doc(1, flow(0, 1, 0, 0, 50000, 1.0))
    assert c.update("j", RANKS, d) is True
    assert c.update("j", RANKS, d) is False
    assert c.update("j", None, doc(2, flow(0, 1, 0, 0, 50000, 1.0))) is True
    assert c.jobs["j"].ranks == RANKS  # None keeps the ranks
    with pytest.raises(ValueError, match="assignment"):
        c.update("j", RANKS, {"version": 3, "assignments": [{"src_rank": 0}]})
    assert c.jobs["j"].version == 2  # a bad document changes nothing
    c.remove("j")
    assert not c.jobs and c.flow_count() == 0


def test_a_thousand_jobs_answer_from_dicts() -> None:
    c = AssignmentCache("host0")
    for j in range(1000):
        c.update(f"job{j}", {0: ("host0", "m"), 1: ("host1", "m")},
                 doc(1, *(flow(0, 1, ch, q, 49152 + ch * 4 + q) for ch in range(8) for q in range(4))))
    assert c.flow_count() == 32_000
    a, outcome = c.answer(look(job="job777", src_rank=0, dst_rank=1, conn_index=5))
    assert outcome == "hit" and [f.sport for f in a.flows] == [49172, 49173, 49174, 49175]


def test_a_snapshot_brings_the_plans_back_after_a_restart(cache: AssignmentCache) -> None:
    snap = cache.snapshot()
    fresh = AssignmentCache("host0")
    assert fresh.restore(snap) == 1
    a, outcome = fresh.answer(look(src_rank=0, dst_rank=1, conn_index=1, job="j"))
    assert outcome == "hit" and [f.sport for f in a.flows] == [50010, 50011]
    assert fresh.jobs["j"].ranks == RANKS
    assert fresh.restore({"bad": {"ranks": {"x": 1}}, "j": snap["j"]}) == 0  # skipped, kept


def test_the_flow_count_follows_updates_removals_and_restores() -> None:
    import random

    rng = random.Random(3)
    c = AssignmentCache("host0")
    ranks = {0: ("host0", "m"), 1: ("host1", "m")}

    def doc(n: int, version: int) -> dict:  # type: ignore[type-arg]
        return {"version": version, "assignments": [
            {"src_rank": 0, "dst_rank": 1, "channel": k, "qp": 0, "udp_sport": 50000 + k,
             "weight": 1.0, "src_address": "10.0.0.2", "dst_address": "10.0.1.2"}
            for k in range(n)]}

    for step in range(300):
        name = f"j{rng.randrange(8)}"
        what = rng.random()
        if what < 0.6:
            c.update(name, ranks if rng.random() < 0.5 else None, doc(rng.randrange(5), step))
        elif what < 0.8:
            c.remove(name)
        else:
            snap = AssignmentCache("host0")
            snap.update(name, ranks, doc(rng.randrange(5), step))
            c.restore(snap.snapshot())  # adds only jobs not cached yet
        assert c.flow_count() == sum(len(j.flows) for j in c.jobs.values())
