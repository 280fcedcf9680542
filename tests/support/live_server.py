"""The controller served by a real uvicorn on a free loopback port, in a thread of the test.

For tests that need a real HTTP server (a browser, an external client): the app runs its
background workers (planner, detectors, webhooks) exactly as `c4 serve` does.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import uvicorn

from controller.api.app import create_app
from controller.services.runtime import Runtime


class LiveServer:
    """`with LiveServer(runtime) as server:` serves on `server.url` until the block ends."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.app = create_app(runtime=runtime)
        config = uvicorn.Config(self.app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="c4-test-uvicorn", daemon=True)
        self.url = ""

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *_: Any) -> None:
        self.server.should_exit = True
        self.thread.join(15)

    def client(self, token: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
