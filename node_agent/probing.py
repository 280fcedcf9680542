"""One probe request, end to end: probe the pair in a worker thread (`node_agent.prober`),
post what was seen to the controller, count it. Shared by the daemon's loop and
`c4-node-agent probe`."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from node_agent import prober
from node_agent.config import AgentSettings
from node_agent.controller_client import ControllerClient
from node_agent.metrics import AgentMetrics

log = logging.getLogger("c4.agent.probe")


async def probe_and_report(client: ControllerClient, s: AgentSettings, metrics: AgentMetrics,
                           req: dict[str, Any], post: bool = True) -> dict[str, Any] | None:
    """The report for one requested (src, dst) pair (posted unless `post` is false), or None
    when the probe could not run."""
    sports = list(range(s.probe_base_port, s.probe_base_port + s.probe_ports))
    try:
        result = await asyncio.to_thread(
            prober.probe, str(req["src_address"]), str(req["dst_address"]),
            str(req.get("protocol", "udp")), int(req.get("dst_port", 4791)), sports,
            s.probe_max_ttl, s.probe_rate_pps, s.probe_timeout_s)
    except (prober.ProbeError, KeyError, TypeError, ValueError) as e:
        log.warning("probe %s: %s", req, e)
        return None
    metrics.probes.inc(result.packets)
    report = result.report(time.time_ns() // 1000)
    status = "not posted"
    if post:
        posted = await client.post_probes(report)
        metrics.probe_reports.labels(str(posted.status)).inc()
        status = f"HTTP {posted.status}"
    log.info("probed %s -> %s (%s %d): %d ports, %d reached, %.2f s, %s", result.src_address,
             result.dst_address, result.protocol, result.dst_port, len(result.hops),
             len(result.reached), result.seconds, status)
    return report
