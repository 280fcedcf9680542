"""Assignment long-polls (one per host in production) must not starve the rest of the API."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI
from sqlalchemy import create_engine, update

from controller.api.app import create_app
from controller.api.longpoll import POLL_S
from controller.services import jobs, tokens
from controller.settings import Settings
from controller.store.migrate import upgrade
from controller.store.tables import FlowRow, JobRow

WAITERS = 80  # more than the 40 threads of the default threadpool


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _served_job(tmp_path: Path) -> Iterator[tuple[FastAPI, str, dict[str, str], int]]:
    """A real server (SQLite) holding a planned 4-rank ring job "j": the app, the base URL,
    admin headers, and the job's planned version."""
    url = f"sqlite:///{tmp_path / 'c4.db'}"
    upgrade(url)
    app = create_app(Settings(database_url=url, admin_token="t", data_dir=tmp_path))
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base, headers = f"http://127.0.0.1:{port}", {"Authorization": "Bearer t"}
    try:
        while not server.started:
            time.sleep(0.05)
        httpx.post(f"{base}/v1/topology/generate", json={"kind": "leaf-spine", "leaves": 2, "spines": 2,
                                                         "hosts_per_leaf": 2}, headers=headers).raise_for_status()
        ranks = [{"rank": i, "host": f"host{i}", "nic": "mlx5_0"} for i in range(4)]
        httpx.post(f"{base}/v1/jobs", json={"name": "j", "ranks": ranks, "traffic": [{"pattern": "ring", "ranks": [0, 1, 2, 3]}]},
                   headers=headers).raise_for_status()
        version = 0
        for _ in range(100):
            version = httpx.get(f"{base}/v1/jobs/j", headers=headers).json()["version"]
            if version:
                break
            time.sleep(0.1)
        yield app, base, headers, version
    finally:
        server.should_exit = True
        thread.join(10)


def test_many_long_polls_leave_the_api_responsive(tmp_path: Path) -> None:
    with _served_job(tmp_path) as (_app, base, headers, version):
        answers: list[int] = []

        def wait() -> None:
            r = httpx.get(f"{base}/v1/jobs/j/assignments", headers=headers, timeout=30,
                          params={"after_version": version, "wait_s": 10})
            answers.append(r.status_code)

        waiters = [threading.Thread(target=wait) for _ in range(WAITERS)]
        for t in waiters:
            t.start()
        time.sleep(1.0)
        start = time.monotonic()
        assert httpx.get(f"{base}/v1/topology", headers=headers, timeout=10).status_code == 200
        # Blocked behind the long polls, the read would wait ~9 s more; 5 s leaves room for a
        # loaded machine.
        assert time.monotonic() - start < 5.0
        for t in waiters:
            t.join()
        assert answers == [200] * WAITERS


def test_waiting_polls_share_one_version_read_per_tick_and_wake_on_a_change(tmp_path: Path) -> None:
    """40 polls waiting on a job cost one batched version read per tick (`api.longpoll`), not
    one query per poll per tick; a version change (here the job deleted) answers them all."""
    with _served_job(tmp_path) as (app, base, headers, version):
        for worker in app.state.runtime.workers:  # no re-plan may answer the polls before the delete
            worker.stop()
        answers: list[tuple[int, float]] = []

        def wait() -> None:
            r = httpx.get(f"{base}/v1/jobs/j/assignments", headers=headers, timeout=30,
                          params={"after_version": version, "wait_s": 20})
            answers.append((r.status_code, time.monotonic()))

        waiters = [threading.Thread(target=wait) for _ in range(40)]
        for t in waiters:
            t.start()
        deadline = time.monotonic() + 30
        while getattr(app.state, "version_watch", None) is None or app.state.version_watch.waiting("j") < 40:
            assert time.monotonic() < deadline, "the polls did not all wait"
            time.sleep(0.05)
        reads = app.state.version_watch.reads
        time.sleep(1.0)
        reads = app.state.version_watch.reads - reads
        assert 1 <= reads <= 20, reads  # ~10 ticks in 1 s (one query each), not 40 polls x 10
        deleted = time.monotonic()
        assert httpx.delete(f"{base}/v1/jobs/j", headers=headers).status_code == 204
        for t in waiters:
            t.join()
        assert [code for code, _ in answers] == [404] * 40
        assert max(at for _, at in answers) - deleted < 2.0  # woken, not left to their 20 s


def test_reads_come_from_the_cache_and_follow_every_change(tmp_path: Path) -> None:
    """Repeated reads are answered from the process's cache (`api.longpoll`: no query, no
    FastAPI routing) with exactly the route's body; a change written by another process (no
    poke here) is seen within the cache's freshness bound; a DELETE in this process is never
    answered from the cache; auth and parameter checks still apply to cached documents."""
    with _served_job(tmp_path) as (app, base, headers, version):
        for worker in app.state.runtime.workers:  # no re-plan moves the version meanwhile
            worker.stop()
        url = f"{base}/v1/jobs/j/assignments"
        with httpx.Client(headers=headers, timeout=10) as c:
            first = c.get(url, params={"host": "host0"})  # a miss: the route reads and caches it
            assert first.status_code == 200 and first.json()["version"] == version
            assert first.json()["assignments"], "host0 sources flows of the ring"
            watch = app.state.version_watch
            time.sleep(3 * POLL_S)  # the watch has read the job's head since
            hits = watch.hits
            for _ in range(50):
                r = c.get(url, params={"host": "host0", "after_version": version - 1, "wait_s": 30})
                assert r.status_code == 200 and r.content == first.content
                assert r.headers["content-type"] == "application/json"
            assert watch.hits - hits >= 45, watch.hits - hits  # (a tick late on a loaded machine: a miss)

            # One miss fills every host's document of the job: each is what the per-host query reads
            rt = app.state.runtime
            for host in ("host1", "host2", "host3", "host7", None):  # host7: no flow of the job
                params = {"host": host} if host else {}
                assert c.get(url, params=params).json() == jobs.assignments(rt, "j", host)

            # Checked before the cache answers: roles, tokens, parameters
            viewer = tokens.create(app.state.runtime.settings, "v", "viewer")
            for _ in range(2):  # the second time the token is cached: the fast path's own check
                assert c.get(url, params={"host": "host0"},
                             headers={"Authorization": f"Bearer {viewer}"}).status_code == 403
                assert c.get(url, params={"host": "host0"},
                             headers={"Authorization": "Bearer nope"}).status_code == 401
            # two Authorization headers, the first refused: the route answers (it takes the first)
            two = c.get(url, params={"host": "host0"}, headers=[
                ("Authorization", f"Bearer {viewer}"), ("Authorization", headers["Authorization"])])
            assert two.status_code == 403
            # a wait_s pydantic refuses is refused, not served from the cache
            assert c.get(url, params={"host": "host0", "wait_s": "\u0661"}).status_code == 422
            assert c.get(url, params={"host": "host0", "after_version": -1}).status_code == 422
            assert c.get(url, params={"host": "host0", "wait_s": 61}).status_code == 422
            assert c.get(url, params={"host": "host0", "wait_s": "nan"}).status_code == 422

            # Another process's write: the version and a port change behind this process's back
            engine = create_engine(f"sqlite:///{tmp_path / 'c4.db'}")
            with engine.begin() as db:
                db.execute(update(JobRow).where(JobRow.name == "j").values(version=JobRow.version + 1))
                db.execute(update(FlowRow).where(FlowRow.src_host == "host0").values(udp_sport=40000))
            engine.dispose()
            written = time.monotonic()
            while True:
                doc = c.get(url, params={"host": "host0"}).json()
                if doc["version"] == version + 1:
                    break
                assert doc == first.json()  # until then: the cached document, whole
                assert time.monotonic() - written < 2.0, "another process's write not seen"
                time.sleep(0.01)
            assert {a["udp_sport"] for a in doc["assignments"]} == {40000}

            # A DELETE in this process: never answered from the cache afterwards
            assert c.delete(f"{base}/v1/jobs/j").status_code == 204
            assert c.get(url, params={"host": "host0"}).status_code == 404


def test_reads_that_miss_together_share_one_database_read(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """After a change every agent of the job misses the cache at once: one read of the job's
    documents serves them all (not one full-job read each). And on a cold cache, reads of many
    jobs missing together share batched reads (one thread and three queries per batch,
    `jobs.assignments_by_host_many`), not one read per job; each answer is the route's."""
    import threading

    from controller.api import longpoll

    calls: list[list[str]] = []
    real = longpoll.jobs.assignments_by_host_many

    def counted(rt, names):  # type: ignore[no-untyped-def]
        calls.append(list(names))
        time.sleep(0.3)  # long enough for every reader to arrive while it runs
        return real(rt, names)

    def single(rt, name):  # type: ignore[no-untyped-def]
        raise AssertionError(f"a single read of {name}: every job here is in its batch")

    with _served_job(tmp_path) as (app, base, headers, _version):
        names = ["j"] + [f"k{i}" for i in range(5)]
        for name in names[1:]:
            ranks = [{"rank": r, "host": f"host{(r + 1) % 4}", "nic": "mlx5_0"} for r in range(4)]
            httpx.post(f"{base}/v1/jobs", json={"name": name, "ranks": ranks, "traffic": [
                {"pattern": "ring", "ranks": [0, 1, 2, 3]}]}, headers=headers).raise_for_status()
        for _ in range(200):
            if all(httpx.get(f"{base}/v1/jobs/{n}", headers=headers).json()["status"] == "planned" for n in names):
                break
            time.sleep(0.1)
        for worker in app.state.runtime.workers:
            worker.stop()
        url = f"{base}/v1/jobs/j/assignments"
        assert httpx.get(url, headers=headers, timeout=10).status_code == 200  # the watch exists
        monkeypatch.setattr(longpoll.jobs, "assignments_by_host_many", counted)
        monkeypatch.setattr(longpoll.jobs, "assignments_by_host", single)
        app.state.version_watch._cache.clear()
        codes: list[int] = []

        def read(host: str, name: str = "j") -> None:
            r = httpx.get(f"{base}/v1/jobs/{name}/assignments", params={"host": host}, headers=headers, timeout=10)
            same = r.status_code != 200 or r.json() == jobs.assignments(app.state.runtime, name, host)
            codes.append(r.status_code if same else -1)  # (-1: not the route's document)

        threads = [threading.Thread(target=read, args=(f"host{i % 4}",)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert codes == [200] * 16
        assert calls == [["j"]], calls

        calls.clear()
        codes.clear()
        app.state.version_watch._cache.clear()
        threads = [threading.Thread(target=read, args=(f"host{i % 4}", names[i % len(names)])) for i in range(30)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert codes == [200] * 30
        assert {n for c in calls for n in c} == set(names), calls
        assert len(calls) <= 3, calls  # in batches (the first, then what gathered meanwhile), not one per job


def test_a_failed_batch_read_leaves_each_job_to_its_own_read(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A batched read that fails (one job's bad row, a query error) must not fail the other
    jobs' reads with it: each job is then read alone and gets its own answer."""
    from controller.api import longpoll

    def broken(rt, names):  # type: ignore[no-untyped-def]
        raise ValueError("a bad row of some other job")

    with _served_job(tmp_path) as (app, base, headers, _version):
        for worker in app.state.runtime.workers:
            worker.stop()
        url = f"{base}/v1/jobs/j/assignments"
        assert httpx.get(url, headers=headers, timeout=10).status_code == 200  # the watch exists
        monkeypatch.setattr(longpoll.jobs, "assignments_by_host_many", broken)
        app.state.version_watch._cache.clear()
        r = httpx.get(f"{base}/v1/jobs/j/assignments", params={"host": "host0"}, headers=headers, timeout=10)
        assert r.status_code == 200 and r.json() == jobs.assignments(app.state.runtime, "j", "host0")
        assert httpx.get(f"{base}/v1/jobs/nope/assignments", headers=headers, timeout=10).status_code == 404


def test_a_just_filled_job_is_served_from_the_cache_before_a_batched_read_covers_it(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A cold job's fill is as recent as a batched read: the reads that follow it are answered
    from the cache (no second database read) even while the batched read that will cover the
    job is slow; a version changed in this process after the fill began ends that at once."""
    from controller.api import longpoll

    calls: list[list[str]] = []
    real_many, real_heads = longpoll.jobs.assignments_by_host_many, longpoll.jobs.heads_of

    def counted(rt, names):  # type: ignore[no-untyped-def]
        calls.append(list(names))
        return real_many(rt, names)

    def slow_heads(rt, names):  # type: ignore[no-untyped-def]
        time.sleep(1.0)  # a busy database: the job's first batched read comes late
        return real_heads(rt, names)

    with _served_job(tmp_path) as (app, base, headers, version):
        for worker in app.state.runtime.workers:
            worker.stop()
        url = f"{base}/v1/jobs/j/assignments"
        with httpx.Client(headers=headers, timeout=10) as c:
            assert c.get(url, params={"host": "host0"}).status_code == 200  # the watch exists
            watch = app.state.version_watch
            monkeypatch.setattr(longpoll.jobs, "assignments_by_host_many", counted)
            monkeypatch.setattr(longpoll.jobs, "heads_of", slow_heads)
            time.sleep(1.2)  # a batched read in flight (if any) has ended; the next ones are slow
            watch._cache.clear()
            watch._heads = {}  # as on a cold start: no batched read has seen the job yet
            getattr(watch, "_filled", {}).clear()
            first = c.get(url, params={"host": "host0"})
            assert first.status_code == 200 and first.json()["version"] == version
            assert calls == [["j"]], calls
            hits = watch.hits
            for i in range(20):  # within FRESH_S of the fill, before any batched read saw the job
                r = c.get(url, params={"host": f"host{i % 4}"})
                assert r.status_code == 200 and r.json() == jobs.assignments(app.state.runtime, "j", f"host{i % 4}")
            assert calls == [["j"]], f"reads after the fill read the database again: {calls}"
            assert watch.hits - hits == 20
            assert "j" not in watch._heads, "the slow batched read covered the job already: nothing tested"

            watch.poke()  # a version changed in this process: the fill no longer vouches for it
            assert c.get(url, params={"host": "host0"}).status_code == 200
            assert calls == [["j"], ["j"]], calls
