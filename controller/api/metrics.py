"""Prometheus metrics: request counts and latencies, and c4's own gauges.

Gauges are read from the database when `/metrics` is scraped, so every worker and replica
reports the same fabric, job, host and alarm figures; request metrics are per process.
Everything registers in prometheus-client's default registry, so services define their own
counters and histograms next to the code that counts (webhook deliveries, planner and
detector durations in `services.timings`) and they appear here.

The fabric's per-link and per-job gauges are built fresh at each scrape (a link or job that
is gone disappears instead of freezing). Their label sets are bounded by the fabric and the
jobs stored: `{link, direction}` (`direction` is `ab` or `ba`) for at most
`C4_LINK_METRICS_MAX_SERIES` link directions, the most utilized first (the rest counted in
`c4_link_planned_directions_omitted`); `{job_name}` per stored job (`{job_name, status}` three times). The training job's label is
`job_name`, not `job`, which Prometheus reserves for the scrape job.
`deploy/README.md` lists every family with its labels and cardinality.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from fastapi import FastAPI, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import InstrumentedAttribute, Session
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from controller.domain.alarms import AlarmKind, AlarmState
from controller.domain.jobs import JobStatus
from controller.services import jobs as jobs_service
from controller.services import link_measurements
from controller.services import links as links_service
from controller.services.errors import NotFound
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
ALARMS_OPEN = Gauge("c4_alarms_open", "Alarms open (not yet acknowledged or resolved), by kind", ["kind"])

# Per-job gauges: (metric name, help, the plan summary's field)
JOB_PLAN_GAUGES = (
    ("c4_job_max_link_utilization", "Max planned utilization over the link directions the job's flows cross",
     "max_link_utilization"),
    ("c4_job_lower_bound", "Proven lower bound on the job's max link utilization", "lower_bound"),
    ("c4_job_ecmp_expected_max_utilization", "Expected max link utilization of the job's flows under ECMP",
     "ecmp_expected_max_utilization"),
    ("c4_job_predicted_busbw_fraction", "Predicted bus bandwidth / ideal under c4's plan", "predicted_busbw_fraction"),
    ("c4_job_ecmp_predicted_busbw_fraction", "Predicted bus bandwidth / ideal under ECMP",
     "ecmp_predicted_busbw_fraction"),
    ("c4_job_flows", "Network flows of the job", "flows"),
)


class RequestMetrics:
    """Counts and times every HTTP request by method, route template and status. A plain ASGI
    middleware (not `@app.middleware("http")`, whose per-request task and streams cost about
    as much as a cached assignment read itself)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            template = getattr(scope.get("route"), "path", "unmatched")
            REQUESTS.labels(scope["method"], template, str(status)).inc()
            LATENCY.labels(scope["method"], template).observe(time.perf_counter() - start)


def install(app: FastAPI) -> None:
    app.add_middleware(RequestMetrics)


def _counts(session: Session, column: InstrumentedAttribute[str]) -> dict[str, int]:
    return {key: n for key, n in session.execute(select(column, func.count()).group_by(column))}


def _refresh_gauges(rt: Runtime) -> bool:
    try:
        with rt.sessions() as s:
            links = _counts(s, LinkRow.state)
            jobs = _counts(s, JobRow.status)
            isolated = s.scalar(select(func.count()).select_from(HostStateRow).where(HostStateRow.state == "isolated"))
            alarms = _counts(s, AlarmRow.state)
            open_by_kind = {k: n for k, n in s.execute(select(AlarmRow.kind, func.count())
                                                       .where(AlarmRow.state == AlarmState.OPEN.value)
                                                       .group_by(AlarmRow.kind))}
            gaps = hosts_repo.telemetry_gaps(s)
    except Exception:
        DB_UP.set(0)
        return False
    DB_UP.set(1)
    for state in ("up", "down", "drained"):
        LINKS.labels(state).set(links.get(state, 0))
    for status in JobStatus:
        JOBS.labels(status.value).set(jobs.get(status.value, 0))
    HOSTS_ISOLATED.set(isolated or 0)
    HOSTS_GAP.set(gaps)
    for alarm_state in AlarmState:
        ALARMS.labels(alarm_state.value).set(alarms.get(alarm_state.value, 0))
    for kind in AlarmKind:
        ALARMS_OPEN.labels(kind.value).set(open_by_kind.get(kind.value, 0))
    return True


class FabricGauges(Collector):
    """Per link direction and per job gauges of one scrape (see the module docstring)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def collect(self) -> Iterator[Metric]:
        yield from self._links()
        yield from self._jobs()

    def _links(self) -> Iterator[Metric]:
        try:
            view = links_service.loads(self.rt)
        except NotFound:
            return
        limit = max(0, self.rt.settings.link_metrics_max_series)
        capacity = {link.name: link.capacity_gbps for link in view.fabric.links}
        rows = sorted(((link.name, d, view.total.get((link.name, d))) for link in view.fabric.links
                       for d in links_service.DIRECTIONS),
                      key=lambda r: (-(r[2].gbps if r[2] is not None else 0.0) / capacity[r[0]], r[0], r[1]))
        gbps = GaugeMetricFamily("c4_link_planned_gbps", "Planned demand (Gbit/s) on a link direction, all active jobs",
                                 labels=["link", "direction"])
        util = GaugeMetricFamily("c4_link_planned_utilization", "Planned demand / capacity of a link direction",
                                 labels=["link", "direction"])
        flows = GaugeMetricFamily("c4_link_planned_flows", "Planned flows crossing a link direction",
                                  labels=["link", "direction"])
        for name, d, load in rows[:limit]:
            g = load.gbps if load is not None else 0.0
            gbps.add_metric([name, d], g)
            util.add_metric([name, d], g / capacity[name])
            flows.add_metric([name, d], load.flows if load is not None else 0)
        yield from (gbps, util, flows)
        yield GaugeMetricFamily("c4_link_planned_directions_omitted",
                                "Link directions left out of the planned-load gauges (C4_LINK_METRICS_MAX_SERIES)",
                                value=max(0, len(rows) - limit))
        down = GaugeMetricFamily("c4_link_down", "1 while a link is down or drained (only such links are listed)",
                                 labels=["link", "state"])
        for link in view.fabric.links:
            if link.state.value != "up":
                down.add_metric([link.name, link.state.value], 1)
        yield down

    def _jobs(self) -> Iterator[Metric]:
        docs = jobs_service.list_jobs(self.rt)
        families = {name: GaugeMetricFamily(name, help_text, labels=["job_name"]) for name, help_text, _ in JOB_PLAN_GAUGES}
        version = GaugeMetricFamily("c4_job_version", "The job's assignment version", labels=["job_name"])
        status = GaugeMetricFamily("c4_job_status", "1 for the job's current status, 0 for the others",
                                   labels=["job_name", "status"])
        for doc in docs:
            name = str(doc["name"])
            version.add_metric([name], doc.get("version") or 0)
            for s in JobStatus:
                status.add_metric([name, s.value], 1.0 if doc.get("status") == s.value else 0.0)
            plan = doc.get("plan") or {}
            for metric, _, field in JOB_PLAN_GAUGES:
                if isinstance(plan.get(field), int | float):
                    families[metric].add_metric([name], float(plan[field]))
        yield version
        yield status
        yield from families.values()


def metrics_response(rt: Runtime) -> Response:
    text = b""
    link_measurements.refresh_gauges(rt)
    if _refresh_gauges(rt):
        per_scrape = CollectorRegistry(auto_describe=False)
        per_scrape.register(FabricGauges(rt))
        try:
            text = generate_latest(per_scrape)
        except Exception:
            DB_UP.set(0)
    return Response(generate_latest(REGISTRY) + text, media_type=CONTENT_TYPE_LATEST)
