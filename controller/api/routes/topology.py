"""Topology endpoints: PUT/GET /v1/topology, POST /v1/topology/generate, PATCH /v1/links/{name}."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import Depends, Query, Request, Response

from controller.api import limits
from controller.api.auth import ANY, require
from controller.api.bodies import checkpoint
from controller.api.errors import error_response
from controller.api.routes import PublicRouter
from controller.api.schemas.common import LinkNameInPath
from controller.api.schemas.public.measured import LinkSeriesPublic
from controller.api.schemas.public.topology import (
    LinkChangePublic,
    LinkDetailPublic,
    LinksPublic,
    TopologyPublic,
    TopologySummary,
)
from controller.api.schemas.topology import GenerateBody, LinkPatch, TopologyCreate
from controller.api.state import json_response, runtime_of
from controller.domain.fabric import LinkState
from controller.services import links, topology

router = PublicRouter(prefix="/v1", tags=["topology"])
ADMIN_WRITE = require()


@router.get("/topology", dependencies=[Depends(ANY)], response_model=TopologyPublic,
            summary="The fabric, with live link states")
def get_topology(request: Request) -> Response:
    return json_response(topology.document(runtime_of(request)))


@router.put("/topology", dependencies=[Depends(ADMIN_WRITE)], response_model=TopologySummary,
            summary="Replace the whole fabric",
            description="Bounded by `C4_MAX_BODY_BYTES` and the fabric's size (`C4_MAX_FABRIC_LINKS`: host ports "
                        "plus switch-to-switch links; `C4_MAX_FABRIC_SWITCHES`). Read off the event loop; one "
                        "fabric change at a time (429 with Retry-After while another runs).",
            openapi_extra=limits.body(limits.LARGEST, gate="fabric"))
def put_topology(request: Request, body: TopologyCreate,
                 force: bool = Query(False, description="Replace even with active jobs; they are re-planned.")
                 ) -> dict[str, Any]:
    check = checkpoint(request)
    rt = runtime_of(request)
    topology.check_size(rt, body.size())
    fabric = body.to_fabric()
    check()
    revision = topology.replace(rt, fabric, force, abort=check)
    return _summary(fabric.name, revision, fabric)


@router.post("/topology/generate", dependencies=[Depends(ADMIN_WRITE)], status_code=201, response_model=TopologySummary,
             summary="Generate and store a standard fabric (leaf-spine or clos3)",
             description="Bounded by the size of the fabric it would make (`C4_MAX_FABRIC_LINKS`: host ports plus "
                         "switch-to-switch links; `C4_MAX_FABRIC_SWITCHES`), checked before any work.",
             openapi_extra=limits.body(gate="fabric"))
def generate_topology(request: Request, body: GenerateBody, force: bool = Query(False)) -> dict[str, Any]:
    check = checkpoint(request)
    rt = runtime_of(request)
    topology.check_size(rt, body.size())
    fabric = body.to_fabric()
    check()
    revision = topology.replace(rt, fabric, force, abort=check)
    return _summary(fabric.name, revision, fabric)


@router.get("/links", dependencies=[Depends(ANY)], response_model=LinksPublic,
            summary="Every link with its state and planned load per direction, sorted by name",
            description="Each link carries `load.ab` (from `a` to `b`) and `load.ba`: `planned_gbps` (the "
                        "summed demands of the planned flows crossing that direction, API.md's demand rule over "
                        "all active jobs), `planned_utilization` (that over `capacity_gbps`) and `flows`; "
                        "`max_planned_utilization` is the larger direction's. `measured.ab` / `measured.ba` are "
                        "the latest smoothed rates from switch counters (bytes/s, utilization, ECN marks/s and "
                        "marked fraction, PFC pauses/s per priority, congested), null while no sample is fresh. "
                        "Serialized without re-validation (fabrics of tens of thousands of links); the schema is "
                        "tested.")
def list_links(request: Request,
               state: Literal["up", "down", "drained"] | None = Query(None, description="Only links in this state"),
               kind: Literal["fabric", "host"] | None = Query(
                   None, description="Only switch-to-switch links (`fabric`) or host-port links (`host`)"),
               ) -> Response:
    return json_response({"links": links.list_links(runtime_of(request), state, kind)})


@router.get("/links/{name:path}/series", dependencies=[Depends(ANY)], response_model=LinkSeriesPublic,
            summary="A link's measured samples per direction over a window, oldest first",
            description="`ab` and `ba` list `M` (the smoothed measurement as of each sample, as in "
                        "`GET /v1/links`) with the interval's own rates in `raw`; `window_s` is capped at "
                        "the retention (`C4_LINK_SERIES_RETENTION_S`).")
def get_link_series(request: Request, name: LinkNameInPath,
                    window_s: float = Query(600.0, gt=0, le=1e9, description="How far back, in seconds")
                    ) -> dict[str, Any]:
    return links.link_series(runtime_of(request), name, window_s)


@router.api_route("/links/{name:path}/series", methods=["PATCH", "PUT", "POST", "DELETE"], dependencies=[Depends(ANY)],
                  include_in_schema=False)
def link_series_other_methods(name: LinkNameInPath) -> Response:
    """`/series` only answers GET: without this route, `PATCH /v1/links/x/series` would reach
    `PATCH /v1/links/{name}` for a link named `x/series` (link names may hold `/`). So a link
    whose name ends in `/series` cannot be changed by PATCH (README, Decisions)."""
    return error_response(405, "method_not_allowed", "Method Not Allowed", headers={"Allow": "GET"})


@router.get("/links/{name:path}", dependencies=[Depends(ANY)], response_model=LinkDetailPublic,
            summary="One link with its planned load per direction and each job's part of it")
def get_link(request: Request, name: LinkNameInPath) -> dict[str, Any]:
    return links.get_link(runtime_of(request), name)


@router.patch("/links/{name:path}", dependencies=[Depends(ADMIN_WRITE)], response_model=LinkChangePublic,
              summary="Set a link up, down or drained; the flows it carried are re-planned before the answer",
              description="Re-plans the flows the change broke inside the request, then answers with the link and "
                          "`replanned_flows`: how many flows, over all jobs, had their assignment changed by this "
                          "change (path, NIC ports, UDP source port or weight), the sum of the `changed_flows` of "
                          "the `job.replanned` events it emits. `moved_flows` (in those events and in each job's "
                          "`plan`) counts the changed flows whose path changed; a flow kept on its path under a "
                          "new source port is changed, not moved.")
def patch_link(request: Request, name: LinkNameInPath, body: LinkPatch) -> dict[str, Any]:
    doc, replanned = topology.set_link_state(runtime_of(request), name, LinkState(body.state))
    return {**doc, "replanned_flows": replanned}


def _summary(name: str, revision: int, fabric: Any) -> dict[str, Any]:
    return {"name": name, "revision": revision, "switches": len(fabric.switches),
            "links": sum(1 for link in fabric.links if not link.is_host_link),
            "hosts": len(fabric.hosts), "host_ports": sum(len(n.ports) for h in fabric.hosts for n in h.nics)}
