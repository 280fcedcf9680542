"""The agent's `/healthz` (JSON, always 200 while the loop runs: failing switches and an
absent controller are reported, not fatal) and `/metrics` (Prometheus text), served by uvicorn
inside the agent's own event loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Generator
from typing import TYPE_CHECKING

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

if TYPE_CHECKING:
    from switch_agents.agent import Agent


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the agent handles SIGTERM/SIGINT itself."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class HealthServer:
    def __init__(self, server: _Server, task: asyncio.Task[None]) -> None:
        self.server = server
        self.task = task

    @property
    def port(self) -> int:
        return int(self.server.servers[0].sockets[0].getsockname()[1])

    async def stop(self) -> None:
        self.server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.task, 5)


def app_for(agent: Agent) -> Starlette:
    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse(agent.health())

    async def metrics(_: Request) -> Response:
        return Response(generate_latest(agent.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return Starlette(routes=[Route("/healthz", healthz), Route("/metrics", metrics)])


async def serve(agent: Agent, listen: str) -> HealthServer:
    host, _, port = listen.rpartition(":")
    config = uvicorn.Config(app_for(agent), host=host.strip("[]"), port=int(port), log_level="warning",
                            lifespan="off", access_log=False)
    server = _Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()  # raises why it could not start (e.g. the port is taken)
            raise RuntimeError(f"health server on {listen} stopped at start")
        await asyncio.sleep(0.02)
    health = HealthServer(server, task)
    agent.health_port = health.port
    return health
