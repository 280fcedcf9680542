"""Measured link load, read side: what `GET /v1/links` (`measured`), `/v1/links/{name}/series`,
`GET /v1/congestion` and `/metrics` show. Every process answers the same: it all comes from
the database (see `services.switch_telemetry` for why), never from one process's memory.

`M` (API.md, Links) for one link direction::

    {"t_us": 1764430000000000, "bytes_per_s": 3.1e10, "utilization": 0.62,
     "ecn_marks_per_s": 1.2e5, "ecn_marked_fraction": 0.048, "pfc_pauses_per_s": {"3": 0.0},
     "congested": false, "since_us": null, "reason": null,
     "pkts_per_s": 2.5e6, "drops_per_s": 0.0, "source": "leaf0:Ethernet0"}

Values are the congestion detector's smoothed rates (EWMA, `C4_CONGESTION_EWMA_TAU_S`);
`utilization` is `bytes_per_s * 8 / capacity`; `source` is the switch port measured.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from controller.domain.fabric import Fabric
from controller.services.clock import now_us
from controller.services.errors import NotFound
from controller.services.runtime import Runtime
from controller.services.switch_telemetry import congestion_config
from controller.store import link_telemetry_repo as repo
from controller.te.congestion import CongestedDirection, DirectionState, congested
from controller.te.measured import DIRECTIONS


def measurement(doc: Mapping[str, Any], capacity_gbps: float) -> dict[str, Any]:
    """`M` from a smoothed state document (`DirectionState.to_doc()` or a sample's `smoothed`)."""
    bytes_per_s = doc.get("bytes_per_s")
    marks, pkts = doc.get("ecn_marks_per_s"), doc.get("pkts_per_s")
    return {
        "t_us": int(doc["t_us"]),
        "bytes_per_s": bytes_per_s,
        "utilization": None if bytes_per_s is None else bytes_per_s * 8 / (capacity_gbps * 1e9),
        "ecn_marks_per_s": marks,
        "ecn_marked_fraction": None if marks is None or not pkts else min(1.0, marks / pkts),
        "pfc_pauses_per_s": dict(doc.get("pfc_pauses_per_s") or {}),
        "congested": bool(doc.get("congested", False)),
        "since_us": doc.get("since_us"),
        "reason": doc.get("reason") or None,
        "pkts_per_s": pkts,
        "drops_per_s": doc.get("drops_per_s"),
        "source": doc.get("source"),
    }


def _fresh_states(rt: Runtime) -> dict[tuple[str, str], dict[str, Any]]:
    oldest = now_us() - int(rt.settings.link_sample_fresh_s * 1e6)
    with rt.sessions() as session:
        docs = repo.direction_states(session)
    return {k: d for k, d in docs.items() if int(d["t_us"]) >= oldest}


def measured(rt: Runtime, fabric: Fabric) -> dict[tuple[str, str], dict[str, Any]]:
    """(link, direction) → its latest smoothed measurement, for directions sampled within
    `C4_LINK_SAMPLE_FRESH_S`; stale or never sampled directions are absent (null in `M`)."""
    capacity = {link.name: link.capacity_gbps for link in fabric.links}
    return {k: measurement(d, capacity[k[0]]) for k, d in _fresh_states(rt).items() if k[0] in capacity}


def series(rt: Runtime, fabric: Fabric, link: str, window_s: float) -> dict[str, Any]:
    """Both directions' samples of the last `window_s` (at most the retention), oldest first;
    each is `M` (smoothed as of that sample) with the interval's own rates in `raw`."""
    found = next((x for x in fabric.links if x.name == link), None)
    if found is None:
        raise NotFound(f"no link named {link!r}", {"link": link})
    retention_s = rt.settings.link_series_retention_s
    window_s = min(window_s, retention_s)
    with rt.sessions() as session:
        rows = repo.series(session, link, now_us() - int(window_s * 1e6))
    out: dict[str, Any] = {"link": link, "window_s": window_s, "retention_s": retention_s}
    for d in DIRECTIONS:
        out[d] = []
    capacity_bps = found.capacity_gbps * 1e9
    for r in rows:
        m = measurement({**r.smoothed, "t_us": r.t_us}, found.capacity_gbps)
        raw = dict(r.raw)
        raw["utilization"] = None if raw.get("bytes_per_s") is None else raw["bytes_per_s"] * 8 / capacity_bps
        m["raw"] = raw
        m["interval_s"] = r.interval_us / 1e6
        m["side"] = r.side
        out[r.direction].append(m)
    return out


def congested_now(rt: Runtime, fabric: Fabric,
                  planned_gbps: Mapping[tuple[str, str], float]) -> list[CongestedDirection]:
    """The congested link directions with fresh samples, most utilized first: the detector's
    output in the shape the rebalancer consumes."""
    with rt.sessions() as session:
        docs = repo.direction_states(session, congested_only=True)
    states = [DirectionState.from_doc(d) for d in docs.values()]
    return congested(states, {link.name: link.capacity_gbps for link in fabric.links}, planned_gbps,
                     now_us(), congestion_config(rt.settings))


class LinkGauges(Collector):
    """Per link direction gauges, rebuilt from the database at each scrape (so a direction that
    stops reporting disappears instead of freezing). At most `C4_LINK_METRICS_MAX_SERIES`
    directions: congested first, then most utilized, then by name; the rest are counted in
    `c4_link_measured_directions_omitted`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: list[tuple[str, str, dict[str, Any]]] = []
        self._omitted = 0

    def refresh(self, rt: Runtime, fabric: Fabric | None) -> None:
        rows: list[tuple[str, str, dict[str, Any]]] = []
        omitted = 0
        if fabric is not None:
            got = measured(rt, fabric)
            order = sorted(got.items(), key=lambda kv: (not kv[1]["congested"], -(kv[1]["utilization"] or 0.0), kv[0]))
            limit = max(0, rt.settings.link_metrics_max_series)
            rows = [(k[0], k[1], m) for k, m in order[:limit]]
            omitted = max(0, len(order) - limit)
        with self._lock:
            self._rows, self._omitted = rows, omitted

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            rows, omitted = self._rows, self._omitted
        util = GaugeMetricFamily("c4_link_measured_utilization",
                                 "Measured (smoothed) utilization of a link direction: bytes/s * 8 / capacity",
                                 labels=["link", "direction"])
        ecn = GaugeMetricFamily("c4_link_ecn_marks_per_second", "Smoothed ECN-marked packets/s of a link direction",
                                labels=["link", "direction"])
        fraction = GaugeMetricFamily("c4_link_ecn_marked_fraction",
                                     "Smoothed fraction of a link direction's packets marked ECN",
                                     labels=["link", "direction"])
        pfc = GaugeMetricFamily("c4_link_pfc_pauses_per_second",
                                "Smoothed PFC pause frames/s holding back a link direction, per priority",
                                labels=["link", "direction", "priority"])
        hot = GaugeMetricFamily("c4_link_congested", "1 while the congestion detector holds a link direction congested",
                                labels=["link", "direction"])
        for link, d, m in rows:
            if m["utilization"] is not None:
                util.add_metric([link, d], m["utilization"])
            if m["ecn_marks_per_s"] is not None:
                ecn.add_metric([link, d], m["ecn_marks_per_s"])
            if m["ecn_marked_fraction"] is not None:
                fraction.add_metric([link, d], m["ecn_marked_fraction"])
            for prio, rate in sorted(m["pfc_pauses_per_s"].items()):
                pfc.add_metric([link, d, prio], rate)
            hot.add_metric([link, d], 1.0 if m["congested"] else 0.0)
        yield from (util, ecn, fraction, pfc, hot)
        yield GaugeMetricFamily("c4_link_measured_directions_omitted",
                                "Measured link directions left out of the per-link gauges (C4_LINK_METRICS_MAX_SERIES)",
                                value=omitted)


GAUGES = LinkGauges()
REGISTRY.register(GAUGES)


def refresh_gauges(rt: Runtime) -> None:
    """Called by `/metrics` before it renders; a database outage leaves the gauges empty."""
    try:
        with rt.sessions() as session:
            got = rt.fabric_cache.current(session)
        GAUGES.refresh(rt, None if got is None else got[1])
    except Exception:
        GAUGES.refresh(rt, None)
