"""The FastAPI application factory: runtime, error mapping, metrics, routers, workers.

Start-up steps (database wait and migrations) belong to `c4 serve`/`c4 demo`; the app
itself only starts its background workers and stops them on shutdown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from controller import __version__
from controller.api import errors, metrics
from controller.api.auth import TokenCache
from controller.api.routes import diagnosis, health, jobs, probes, telemetry, topology
from controller.services import planning
from controller.services.leader import Leadership
from controller.services.runtime import Runtime
from controller.services.switch_telemetry import SwitchTelemetry
from controller.services.telemetry import Telemetry
from controller.services.webhooks import Deliverer
from controller.settings import Settings


def create_app(settings: Settings | None = None, runtime: Runtime | None = None,
               start_workers: bool = True) -> FastAPI:
    rt = runtime or Runtime.from_settings(settings or Settings())
    deliverer = Deliverer(rt)
    detectors = Telemetry(rt)
    mine = {deliverer.worker.name, detectors.worker.name}
    rt.workers[:] = [w for w in rt.workers if w.name not in mine] + [deliverer.worker, detectors.worker]
    planning.install(rt)  # C4P: the planner worker and the link-change / fabric-replaced hooks

    leadership = Leadership(rt)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if start_workers:
            leadership.start()  # the leader starts the background workers
        try:
            yield
        finally:
            leadership.stop()
            for worker in rt.workers:
                worker.stop()
            deliverer.close()

    app = FastAPI(
        title="c4 controller",
        version=__version__,
        description="Traffic engineering (C4P) and fault diagnosis (C4D) for AI training fabrics. "
        "Auth: `Authorization: Bearer <token>` on every /v1 call.",
        lifespan=lifespan,
    )
    app.state.runtime = rt
    app.state.token_cache = TokenCache()
    app.state.telemetry = detectors
    app.state.leadership = leadership
    app.state.switch_telemetry = SwitchTelemetry(rt)
    errors.install(app)
    metrics.install(app)
    app.include_router(health.router)
    app.include_router(topology.router)
    app.include_router(diagnosis.router)
    app.include_router(telemetry.router)
    app.include_router(jobs.router)
    app.include_router(probes.router)
    return app
