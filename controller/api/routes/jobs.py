"""Jobs endpoints: POST/GET/DELETE /v1/jobs, GET /v1/jobs/{name}/assignments (long-poll)."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, Query, Request, Response

from controller.api import limits
from controller.api.auth import ANY, require
from controller.api.longpoll import watch_of
from controller.api.routes import PublicRouter
from controller.api.schemas.common import INT32_MAX, HostFilter, NameInPath
from controller.api.schemas.jobs import JobCreate
from controller.api.schemas.public.jobs import (
    AssignmentsPublic,
    JobLinksPublic,
    JobPublic,
    JobsPublic,
)
from controller.api.state import runtime_of
from controller.domain.jobs import JobStatus
from controller.services import jobs, links

router = PublicRouter(prefix="/v1", tags=["jobs"])
SCHEDULER = require("scheduler")
READ_ASSIGNMENTS = require("scheduler", "agent", any_role_may_read=False)  # API.md: not viewers


@router.post("/jobs", status_code=202, dependencies=[Depends(SCHEDULER)], response_model=JobPublic,
             summary="Register a job; its plan is computed in the background (status pending -> planned)",
             openapi_extra=limits.body(4 << 20))
def post_job(request: Request, body: JobCreate) -> dict[str, Any]:
    return jobs.create(runtime_of(request), body.to_spec())


@router.get("/jobs", dependencies=[Depends(ANY)], response_model=JobsPublic, summary="List jobs, sorted by name")
def list_jobs(request: Request, status: JobStatus | None = None) -> dict[str, Any]:
    return {"jobs": jobs.list_jobs(runtime_of(request), status)}


@router.get("/jobs/{name}", dependencies=[Depends(ANY)], response_model=JobPublic,
            summary="One job with its plan summary",
            description="`plan` (API.md) adds: `moved_flows`, how many of the job's flows changed path when the "
                        "plan was last written (a flow kept on its path under a new source port is not moved); "
                        "`paths_known`, the share of the job's equal-cost paths with a known source port (1.0 in "
                        "model mode; in probed mode, what probes have covered: `lower_bound` is proven over every "
                        "equal-cost path all the same); `predicted_busbw_fraction` and "
                        "`ecmp_predicted_busbw_fraction`. While a `pending` job is being planned for longer than "
                        "half a second, `progress` names the phase (`routes`, `placing`, `improving`, "
                        "`rebalancing`, `ports`, `summary`) with `since_us`, `started_us` and `flows`.")
def get_job(request: Request, name: NameInPath) -> dict[str, Any]:
    return jobs.get(runtime_of(request), name)


@router.get("/jobs/{name}/links", dependencies=[Depends(ANY)], response_model=JobLinksPublic,
            summary="The link directions the job's planned flows cross, most utilized first",
            description="Per link direction: the job's own planned load (`job_gbps`, `job_flows`), the total "
                        "planned load of every job (`planned_gbps`, `flows`) and `planned_utilization`.")
def get_job_links(request: Request, name: NameInPath) -> dict[str, Any]:
    return links.job_links(runtime_of(request), name)


@router.delete("/jobs/{name}", status_code=204, dependencies=[Depends(SCHEDULER)],
               summary="Release a job's flows")
def delete_job(request: Request, name: NameInPath) -> Response:
    jobs.delete_job(runtime_of(request), name)
    return Response(status_code=204)


@router.get("/jobs/{name}/assignments", dependencies=[Depends(READ_ASSIGNMENTS)], response_model=AssignmentsPublic,
            summary="The job's flow assignments; long-poll with after_version and wait_s",
            description="Serialized without re-validation (tens of thousands of flows); the schema is tested.")
async def get_assignments(request: Request, name: NameInPath,
                          host: HostFilter = None,
                          after_version: int | None = Query(None, ge=0, le=INT32_MAX,
                                                            description="Wait for a version above this"),
                          wait_s: float = Query(0.0, ge=0.0, le=60.0, description="Longest wait, seconds")
                          ) -> Response:
    # A read is answered from the process's cache of serialized documents while it is current,
    # and a waiting poll holds no thread and runs no query: the process's one version watch
    # (`api.longpoll`) reads every watched job's version in one query per tick and wakes it.
    watch = watch_of(request.app.state, runtime_of(request))
    version, body = await watch.document(name, host)
    if after_version is not None and wait_s > 0 and version <= after_version:
        await watch.wait(name, after_version, wait_s)
        version, body = await watch.document(name, host)
    return Response(body, media_type="application/json")
