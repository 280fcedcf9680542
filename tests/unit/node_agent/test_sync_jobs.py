"""The job list read a job at a time (node_agent.sync.iter_jobs): the same jobs as a whole
parse, whatever the spacing and the other keys, and an error for anything else."""

from __future__ import annotations

import json

import pytest

from node_agent.sync import iter_jobs

JOBS = [{"name": f"j{i}", "status": "planned", "version": i,
         "ranks": [{"rank": 0, "host": "h0", "nic": "mlx5_0"}], "note": "[,]{}\"ü"}
        for i in range(20)]


@pytest.mark.parametrize("doc", [
    {"jobs": JOBS},
    {"total": 20, "jobs": JOBS, "next": None},
    {"jobs": []},
    {"other": {"jobs": [1]}},
    {},
])
@pytest.mark.parametrize("indent", [None, 1])
def test_same_jobs_as_a_whole_parse(doc: dict, indent: int | None) -> None:  # type: ignore[type-arg]
    data = json.dumps(doc, indent=indent, ensure_ascii=False).encode()
    assert list(iter_jobs(data)) == doc.get("jobs", [])


@pytest.mark.parametrize("data", [
    b"", b"[]", b'{"jobs": [1, 2}', b'{"jobs": [1] ', b'{"jobs": [1]} x', b'{"jobs" [1]}',
    b'{1: 2}', b"\xff", b'{"jobs": [1,]}',
])
def test_anything_else_is_an_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        list(iter_jobs(data))


def test_refresh_follows_this_hosts_jobs_and_drops_deleted_ones() -> None:
    import asyncio

    from node_agent.cache import AssignmentCache
    from node_agent.controller_client import Reply
    from node_agent.forwarder import Health
    from node_agent.metrics import AgentMetrics
    from node_agent.sync import AssignmentSync

    def job(name: str, host: str, status: str = "planned") -> dict:  # type: ignore[type-arg]
        return {"name": name, "status": status, "version": 3,
                "ranks": [{"rank": 0, "host": host, "nic": "m"}, {"rank": 1, "host": "x", "nic": "m"}]}

    class Client:
        def __init__(self) -> None:
            self.listing = [job("a", "h0"), job("b", "h1"), job("c", "h0", "failed"),
                            {"name": 7}, "junk"] + [job(f"z{i}", "h0") for i in range(40)]

        async def jobs(self) -> Reply:
            return Reply(200, json.dumps({"jobs": self.listing}).encode())

        async def assignments(self, name: str, host: str, after: int | None, wait_s: float) -> Reply:
            if after is not None:
                await asyncio.sleep(3600)  # a long-poll that never returns here
            return Reply(200, {"version": 3, "assignments": [
                {"src_rank": 0, "dst_rank": 1, "channel": 0, "qp": 0, "udp_sport": 50000,
                 "weight": 1.0, "src_address": "10.0.0.2", "dst_address": "10.0.1.2"}]})

    async def body() -> None:
        cache, client = AssignmentCache("h0"), Client()
        sync = AssignmentSync(client, cache, "h0", AgentMetrics(), Health(), 1.0, 25.0,  # type: ignore[arg-type]
                              lambda name: None)
        await sync.refresh()
        for _ in range(100):
            await asyncio.sleep(0.01)
            if len(cache.jobs) == 41:
                break
        assert set(cache.jobs) == {"a"} | {f"z{i}" for i in range(40)}  # 32 followed, 9 read once
        client.listing = [job("z3", "h0")]
        await sync.refresh()
        assert set(cache.jobs) == {"z3"}
        for t in list(sync._tasks.values()):
            t.cancel()

    asyncio.run(body())


def test_an_unchanged_job_list_is_not_parsed_again_but_still_applied(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    from node_agent import sync as sync_mod
    from node_agent.cache import AssignmentCache
    from node_agent.controller_client import Reply
    from node_agent.forwarder import Health
    from node_agent.metrics import AgentMetrics

    parses = []
    real = sync_mod.iter_jobs
    monkeypatch.setattr(sync_mod, "iter_jobs", lambda data: parses.append(1) or real(data))
    listing = {"jobs": [{"name": "a", "status": "planned", "version": 1,
                         "ranks": [{"rank": 0, "host": "h0", "nic": "m"}]}]}

    class Client:
        body = json.dumps(listing).encode()

        async def jobs(self) -> Reply:
            return Reply(200, bytes(self.body))  # equal bytes, another object

        async def assignments(self, name: str, host: str, after: int | None, wait_s: float) -> Reply:
            if after is not None:
                await asyncio.sleep(3600)
            return Reply(200, {"version": 1, "assignments": []})

    async def body() -> None:
        cache, client = AssignmentCache("h0"), Client()
        s = sync_mod.AssignmentSync(client, cache, "h0", AgentMetrics(), Health(), 1.0, 25.0,  # type: ignore[arg-type]
                                    lambda name: None)
        await s.refresh()
        await s.refresh()
        assert len(parses) == 1 and set(s.ranks) == {"a"}
        s._tasks.pop("a").cancel()  # what it did is applied again: "a" is followed again
        await s.refresh()
        assert len(parses) == 1 and "a" in s._tasks
        client.body = json.dumps({"jobs": []}).encode()
        await s.refresh()
        assert len(parses) == 2 and not s.ranks and not s._tasks

    asyncio.run(body())


def test_an_empty_answer_keeps_the_cached_plans() -> None:
    import asyncio

    from node_agent.cache import AssignmentCache
    from node_agent.controller_client import Reply
    from node_agent.forwarder import Health
    from node_agent.metrics import AgentMetrics
    from node_agent.sync import AssignmentSync

    class Client:
        async def jobs(self) -> Reply:
            return Reply(200, b"")  # a proxy's empty 200, before any good list

    async def body() -> None:
        cache = AssignmentCache("h0")
        cache.update("a", {0: ("h0", "m")}, {"version": 1, "assignments": []})
        s = AssignmentSync(Client(), cache, "h0", AgentMetrics(), Health(), 1.0, 25.0,  # type: ignore[arg-type]
                           lambda name: None)
        await s.refresh()
        assert set(cache.jobs) == {"a"} and not s.synced.is_set()

    asyncio.run(body())
