"""The FastAPI application factory: runtime, error mapping, metrics, routers, docs, workers.

Start-up steps (database wait and migrations) belong to `c4 serve`/`c4 demo`; the app
itself only starts its background workers and stops them on shutdown. Every route declares
its response model (`api/schemas/public`) and, through `docs.document_errors`, the error
statuses it can answer with; `/docs` and `/redoc` work offline (`api/docs.py`).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from controller import __version__, console
from controller.api import docs, errors, limits, metrics
from controller.api.auth import ANY, TokenCache
from controller.api.guard import BodyCap
from controller.api.longpoll import AssignmentReads
from controller.api.routes import diagnosis, health, jobs, probes, telemetry, tokens, topology
from controller.services import collector, failover, planning, rebalance
from controller.services.leader import Leadership
from controller.services.runtime import Runtime
from controller.services.switch_telemetry import SwitchTelemetry
from controller.services.telemetry import Telemetry
from controller.services.webhooks import Deliverer
from controller.services.workers import PeriodicWorker
from controller.settings import Settings

SWITCH_INTERVAL_S = 0.001


def create_app(settings: Settings | None = None, runtime: Runtime | None = None,
               start_workers: bool = True) -> FastAPI:
    rt = runtime or Runtime.from_settings(settings or Settings())
    deliverer = Deliverer(rt)
    detectors = Telemetry(rt)
    switch_telemetry = SwitchTelemetry(rt)
    mine = {deliverer.worker.name, detectors.worker.name, switch_telemetry.worker.name}
    # Sharded telemetry (PostgreSQL) runs its detectors in every replica, not only the leader's.
    leader_only = [w for w in (deliverer.worker, detectors.worker, switch_telemetry.worker)
                   if w is not detectors.worker or not detectors.sharded]
    rt.workers[:] = [w for w in rt.workers if w.name not in mine] + leader_only
    planner = planning.install(rt)  # C4P: the planner worker and the link-change / fabric-replaced hooks
    rebalancer = rebalance.install(rt, planner, switch_telemetry)  # acts on congestion (leader's worker)
    failover.install(rt, planner)  # live TCP connections after a link change: re-probe, re-weight

    leadership = Leadership(rt)
    every = rt.settings.gc_maintenance_s
    gc_worker = (PeriodicWorker("gc", min(60.0, every), lambda: collector.maintain(every))
                 if every > 0 and start_workers else None)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # What exists now (modules, schemas, the app) lives as long as the process: collect the
        # garbage, then leave the rest out of every later collection, so a full collection
        # during a heavy request scans only what requests made (api.bodies, "gc").
        collector.settle()
        # Heavy requests and workers run in threads; the event loop waits for the interpreter
        # lock at every socket call, up to the switch interval each time (5 ms by default, so a
        # /healthz answer cost 20-50 ms while a telemetry batch was parsed). 1 ms: measured
        # p50 13 ms instead of 22-31 ms under a maximal batch (bench/README.md "hardening").
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        if gc_worker is not None:
            gc_worker.start()  # every process, leader or not: its own heap
        if start_workers:
            leadership.start()  # the leader starts the background workers
            if detectors.sharded:
                detectors.start()
        try:
            yield
        finally:
            detectors.stop()
            if gc_worker is not None:
                gc_worker.stop()
            leadership.stop()
            for worker in rt.workers:
                worker.stop()
            planner.parts.close()
            deliverer.close()

    app = FastAPI(
        title="c4 controller",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.runtime = rt
    app.state.token_cache = TokenCache()
    app.state.telemetry = detectors
    app.state.leadership = leadership
    app.state.switch_telemetry = switch_telemetry
    app.state.rebalancer = rebalancer
    errors.install(app)
    app.state.gates = limits.gates()  # heavy routes' admission (api.limits, api.guard)
    app.add_middleware(BodyCap, max_bytes=rt.settings.max_body_bytes)  # no body past the cap, any route
    app.add_middleware(AssignmentReads, requirement=jobs.READ_ASSIGNMENTS,  # agents' cached reads (api.longpoll)
                       route=next(r for r in jobs.router.routes if getattr(r, "endpoint", None) is jobs.get_assignments))
    metrics.install(app)  # outermost: refusals are counted too
    routers = [health.router, topology.router, diagnosis.router, telemetry.router, telemetry.congestion_router,
               jobs.router, probes.router, tokens.router]
    app.state.routers = routers  # for the 405 answer's Allow header (api.errors)
    for router in routers:
        app.include_router(router)
    console_router = console.router(ANY)
    app.include_router(console_router)
    docs.install(app)
    docs.document_errors(app, [*routers, console_router])
    return app


DESCRIPTION = """Traffic engineering (C4P) and fault diagnosis (C4D) for AI training fabrics.

**Auth**: `Authorization: Bearer <token>` on every `/v1` call (use "Authorize" above). Roles:
`admin` (everything), `scheduler` (jobs, hosts, webhooks), `agent` (telemetry and probe ingest),
`viewer` (GET only); every role may GET except `/v1/tokens` (admin), assignments (scheduler, agent) and
probe requests (agent). The token is checked before the body is read.

**Limits**: each operation's largest body is its `x-c4-max-body-bytes` (413 past it); heavy
operations (`x-c4-gate`) answer 429 with `Retry-After` while as many as they allow run.

**Errors**: every refusal has the body `{"error": {"code", "message", "details"}}`; a 422 lists
each offending field in `details.errors[].field`. Nothing is half-applied.

**Times**: integers in microseconds since the Unix epoch (`*_us`); every instant also comes as
ISO 8601 UTC under the same name without `_us` (`opened_at_us` and `opened_at`).

**Webhooks**: signed deliveries with a replay-proof signature; see the `webhooks` section of the
README (headers `X-C4-Signature`, `X-C4-Timestamp`, `X-C4-Signature-V1`, `X-C4-Event-Id`).
"""
