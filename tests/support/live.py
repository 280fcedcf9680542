"""A real controller on loopback (uvicorn in a thread, SQLite in a temporary folder) for
clients that speak HTTP: the CLI, Prometheus' promtool."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from controller.api.app import create_app
from controller.services.runtime import Runtime
from controller.settings import Settings
from controller.store.migrate import upgrade

TOKEN = "live-admin-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Live:
    url: str
    token: str
    runtime: Runtime
    http: httpx.Client

    def wait_planned(self, job: str, timeout_s: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            doc: dict[str, Any] = self.http.get(f"/v1/jobs/{job}").json()
            if doc.get("status") != "pending":
                return doc
            time.sleep(0.05)
        raise AssertionError(f"job {job} still pending after {timeout_s} s")


@contextmanager
def live_controller(tmp: Path, **settings: Any) -> Iterator[Live]:
    url = f"sqlite:///{tmp / 'c4.db'}"
    upgrade(url)
    app = create_app(Settings(database_url=url, admin_token=TOKEN, data_dir=tmp, detector_interval_s=0.2,
                              **settings))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the controller did not start"
        time.sleep(0.02)
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as http:
        try:
            yield Live(base, TOKEN, app.state.runtime, http)
        finally:
            server.should_exit = True
            thread.join(10)
            app.state.runtime.engine.dispose()
