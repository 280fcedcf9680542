"""What the console's own read endpoints answer: the map's compact fabric state and a job's
connections with their flows' paths.

Built from the same services the `/v1` API uses (`links.list_links`, `jobs.assignments`), so the
console never shows a figure the API would not. The fabric state is columnar (one array per
field) so a 1,024-switch fabric with its host links (16k links) is ~1.5 MB of JSON before gzip
instead of the ~7 MB `GET /v1/links` takes. It is cached per (fabric revision, job versions),
for `MEASURED_TTL_S` once links carry measurements (they move on their own) and for
`IDLE_TTL_S` before (so measurements that start arriving show within seconds). Must not:
write anything, or decide anything the services did not.

A two-switch fabric with one host port reads (columns shortened)::

    {"fabric": "tiny", "revision": 3, "measured": false,
     "layout": {"flat": true, "rows": [...], "groups": [], "group_roles": []},
     "switches": {"name": ["leaf0", "spine0"], "role": ["leaf", "spine"], "pod": [null, null]},
     "links": {"name": ["host0:mlx5_0:p0--leaf0:Ethernet4", "leaf0:Ethernet0--spine0:Ethernet0"],
               "a": ["host0:mlx5_0:p0", "leaf0"], "b": ["leaf0", "spine0"],
               "state": ["up", "drained"], "capacity_gbps": [200.0, 400.0], "host_link": [1, 0],
               "planned": [[0.5, 0.5], [0.0, 0.0]], "flows": [[1, 1], [0, 0]],
               "measured": [null, [[0.42, 120.0, 0.0, 0, 1764430000000000], null]]}}

`measured[i]` is null when link i has no measurement, else `[ab, ba]`, each null or
`[utilization, ecn_marks_per_s, pfc_pauses_per_s (all priorities), congested (0/1), t_us]`.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controller.console.layout import SwitchInfo, layout
from controller.services import jobs, links
from controller.services.runtime import Runtime

MEASURED_TTL_S = 1.0
IDLE_TTL_S = 5.0
GZIP_MIN_BYTES = 16_384


@dataclass(frozen=True, slots=True)
class Body:
    """One serialized answer: JSON bytes, their gzip, and an ETag."""

    raw: bytes
    gzipped: bytes | None
    etag: str
    measured: bool
    built_at: float


def _measure(m: Any) -> list[Any] | None:
    """A measurement M of the links API as the map's compact row, or None when absent."""
    if not isinstance(m, Mapping):
        return None
    pfc = m.get("pfc_pauses_per_s")
    pfc_total = sum(float(v) for v in pfc.values() if v is not None) if isinstance(pfc, Mapping) else None
    util = m.get("utilization")
    ecn = m.get("ecn_marks_per_s")
    return [None if util is None else round(float(util), 5), None if ecn is None else round(float(ecn), 3),
            None if pfc_total is None else round(pfc_total, 3), 1 if m.get("congested") else 0, m.get("t_us")]


def _measured_pair(doc: Mapping[str, Any]) -> list[Any] | None:
    measured = doc.get("measured")
    if not isinstance(measured, Mapping):
        return None
    ab, ba = _measure(measured.get("ab")), _measure(measured.get("ba"))
    return None if ab is None and ba is None else [ab, ba]


class FabricState:
    """The map's state of one process, cached as described in the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._layouts: dict[int, dict[str, Any]] = {}
        self._body: tuple[tuple[object, ...], Body] | None = None

    def get(self, rt: Runtime) -> Body:
        view = links.loads(rt)
        key: tuple[object, ...] = (view.revision, tuple(sorted(view.versions.items())))
        with self._lock:
            kept = self._body
        if kept is not None and kept[0] == key and (
                time.monotonic() - kept[1].built_at < (MEASURED_TTL_S if kept[1].measured else IDLE_TTL_S)):
            return kept[1]
        body = self._build(rt, view)
        with self._lock:
            self._body = (key, body)
        return body

    def _layout(self, revision: int, switches: list[SwitchInfo]) -> dict[str, Any]:
        with self._lock:
            got = self._layouts.get(revision)
        if got is None:
            got = layout(switches)
            with self._lock:
                self._layouts = {revision: got}  # only the current revision is worth keeping
        return got

    def _build(self, rt: Runtime, view: links.LoadView) -> Body:
        docs = links.list_links(rt)
        fabric = view.fabric
        switches = [SwitchInfo(s.name, s.role.value, s.pod) for s in fabric.switches]
        cols: dict[str, list[Any]] = {k: [] for k in (
            "name", "a", "b", "state", "capacity_gbps", "host_link", "planned", "flows", "measured")}
        any_measured = False
        for d in docs:
            load = d["load"]
            cols["name"].append(d["name"])
            cols["a"].append(d["a"])
            cols["b"].append(d["b"])
            cols["state"].append(d["state"])
            cols["capacity_gbps"].append(d["capacity_gbps"])
            cols["host_link"].append(1 if d["host_link"] else 0)
            cols["planned"].append([round(load["ab"]["planned_utilization"], 5),
                                    round(load["ba"]["planned_utilization"], 5)])
            cols["flows"].append([load["ab"]["flows"], load["ba"]["flows"]])
            m = _measured_pair(d)
            any_measured = any_measured or m is not None
            cols["measured"].append(m)
        doc = {
            "fabric": fabric.name, "revision": view.revision, "measured": any_measured,
            "layout": self._layout(view.revision, switches),
            "switches": {"name": [s.name for s in switches], "role": [s.role for s in switches],
                         "pod": [s.pod for s in switches]},
            "links": cols,
            "jobs": view.versions,
        }
        raw = json.dumps(doc, separators=(",", ":")).encode()
        gz = gzip.compress(raw, compresslevel=5) if len(raw) >= GZIP_MIN_BYTES else None
        etag = '"' + hashlib.sha1(raw, usedforsecurity=False).hexdigest()[:20] + '"'
        return Body(raw, gz, etag, any_measured, time.monotonic())


def connections(rt: Runtime, job: str) -> dict[str, Any]:
    """A job's connections (src rank -> dst rank) with each flow's path, for any role.

    The same flows as `GET /v1/jobs/{name}/assignments`, grouped by connection so the console
    lists connections and lights one's paths without regrouping thousands of flows itself.
    API.md names schedulers and agents for the assignments; this controller lets every role
    GET (`api.auth`), so this view shows a viewer nothing the API would not.
    """
    doc = jobs.assignments(rt, job)
    conns: dict[tuple[int, int], dict[str, Any]] = {}
    for a in doc["assignments"]:
        key = (a["src_rank"], a["dst_rank"])
        conn = conns.get(key)
        if conn is None:
            conn = conns[key] = {"src_rank": a["src_rank"], "dst_rank": a["dst_rank"],
                                 "src_host": a["src_host"], "dst_host": a["dst_host"], "flows": []}
        conn["flows"].append({
            "channel": a["channel"], "qp": a["qp"],
            "src_port": f'{a["src_host"]}:{a["src_nic"]}:{a["src_port"]}' if a.get("src_port") else None,
            "dst_port": f'{a["dst_host"]}:{a["dst_nic"]}:{a["dst_port"]}' if a.get("dst_port") else None,
            "udp_sport": a.get("udp_sport"), "weight": a.get("weight"),
            "path": a.get("path") or [], "links": a.get("links") or []})
    return {"job": doc["job"], "version": doc["version"], "status": doc.get("status"),
            "connections": [conns[k] for k in sorted(conns)]}
