"""Prometheus metrics: request counts and latencies, and c4's own gauges.

Gauges are read from the database when `/metrics` is scraped, so every worker and replica
reports the same fabric, job, host and alarm figures; request metrics are per process.
Everything registers in prometheus-client's default registry, so services define their own
counters next to the code that counts (e.g. webhook deliveries) and they appear here.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from sqlalchemy import func, select
from sqlalchemy.orm import InstrumentedAttribute, Session

from controller.services.runtime import Runtime
from controller.store import hosts_repo
from controller.store.tables import AlarmRow, HostStateRow, JobRow, LinkRow

REQUESTS = Counter("c4_http_requests_total", "HTTP requests served", ["method", "route", "status"])
LATENCY = Histogram("c4_http_request_duration_seconds", "HTTP request latency", ["method", "route"],
                    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
DB_UP = Gauge("c4_database_up", "1 if the database answered the last scrape")
LINKS = Gauge("c4_links", "Fabric links by state", ["state"])
JOBS = Gauge("c4_jobs", "Jobs by status", ["status"])
HOSTS_ISOLATED = Gauge("c4_hosts_isolated", "Hosts isolated")
HOSTS_GAP = Gauge("c4_hosts_telemetry_gap", "Hosts whose node agent is silent (a telemetry gap)")
ALARMS = Gauge("c4_alarms", "Alarms by state", ["state"])


def install(app: FastAPI) -> None:
    @app.middleware("http")
    async def _measure(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        start = time.perf_counter()
        status = 500
        try:
            response = await call_next(request)
            status = response.status_code
            return response
        finally:
            route = request.scope.get("route")
            template = getattr(route, "path", "unmatched")
            REQUESTS.labels(request.method, template, str(status)).inc()
            LATENCY.labels(request.method, template).observe(time.perf_counter() - start)


def _counts(session: Session, column: InstrumentedAttribute[str]) -> dict[str, int]:
    return {key: n for key, n in session.execute(select(column, func.count()).group_by(column))}


def _refresh_gauges(rt: Runtime) -> None:
    try:
        with rt.sessions() as s:
            links = _counts(s, LinkRow.state)
            jobs = _counts(s, JobRow.status)
            isolated = s.scalar(select(func.count()).select_from(HostStateRow).where(HostStateRow.state == "isolated"))
            alarms = _counts(s, AlarmRow.state)
            gaps = hosts_repo.telemetry_gaps(s)
    except Exception:
        DB_UP.set(0)
        return
    DB_UP.set(1)
    for state in ("up", "down", "drained"):
        LINKS.labels(state).set(links.get(state, 0))
    for status in ("pending", "planned", "failed"):
        JOBS.labels(status).set(jobs.get(status, 0))
    HOSTS_ISOLATED.set(isolated or 0)
    HOSTS_GAP.set(gaps)
    for state in ("open", "acknowledged", "resolved"):
        ALARMS.labels(state).set(alarms.get(state, 0))


def metrics_response(rt: Runtime) -> Response:
    _refresh_gauges(rt)
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
