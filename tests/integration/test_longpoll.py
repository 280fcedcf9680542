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

from controller.api.app import create_app
from controller.settings import Settings
from controller.store.migrate import upgrade

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
