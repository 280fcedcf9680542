"""The agent's Prometheus metrics (prometheus_client), in a registry of its own.

Names start ``c4_agent_``. Counters count since the agent started; the shim's own counters
(drops inside NCCL processes, bind fallbacks) are summed over the live shim processes and
exported as gauges, since a process that exits takes its counts with it.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class AgentMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.lookups = Counter("c4_agent_lookups", "LOOKUPs answered, by outcome "
                               "(hit, miss: no planned flow, unknown_job)", ["outcome"], registry=r)
        self.lookup_seconds = Histogram(
            "c4_agent_lookup_seconds", "Time from receiving a LOOKUP to sending its answer",
            buckets=(25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 10e-3), registry=r)
        self.pushes = Counter("c4_agent_assign_pushes", "ASSIGN updates pushed to live "
                              "connections after a version change", registry=r)
        self.datagrams = Counter("c4_agent_shim_datagrams", "Messages from shims, by type (a BATCH "
                                 "datagram counts as batch, each message in it by its type)",
                                 ["type"], registry=r)
        self.malformed = Counter("c4_agent_shim_malformed", "Datagrams that were not a valid "
                                 "message (counted, ignored)", registry=r)
        self.records_forwarded = Counter("c4_agent_records_forwarded", "Collective records "
                                         "the controller accepted", registry=r)
        self.records_spooled = Counter("c4_agent_records_spooled", "Collective records written "
                                       "to the spool while the controller was unreachable",
                                       registry=r)
        self.records_dropped = Counter(
            "c4_agent_records_dropped", "Collective records dropped, by reason (unknown_job, "
            "unknown_rank, rank_not_in_job, spool_full, rejected, unreadable)", ["reason"], registry=r)
        self.peers_dropped = Counter("c4_agent_peers_dropped", "Peer entries left out of "
                                     "records because their job rank is unknown", registry=r)
        self.posts = Counter("c4_agent_posts", "POSTs of telemetry, by HTTP status (0: no "
                             "answer)", ["status"], registry=r)
        self.controller_up = Gauge("c4_agent_controller_reachable", "1 while the controller "
                                   "answers (and is not a 503 non-leader)", registry=r)
        self.spool_bytes = Gauge("c4_agent_spool_bytes", "Bytes in the spool", registry=r)
        self.spool_records = Gauge("c4_agent_spool_records", "Records waiting in the spool",
                                   registry=r)
        self.jobs = Gauge("c4_agent_jobs_cached", "Jobs whose assignments are cached", registry=r)
        self.flows = Gauge("c4_agent_flows_cached", "Planned flows cached", registry=r)
        self.processes = Gauge("c4_agent_shim_processes", "Shim processes heard from in the "
                               "last minute", registry=r)
        self.shim = Gauge("c4_agent_shim_counter", "The shims' own counters summed over live "
                          "processes (ring_drops, send_drops, lookup_timeouts, ...)", ["name"],
                          registry=r)
        self.handoffs = Counter("c4_agent_handoffs", "Sockets accepted on the host's fixed port, "
                                "by outcome (handed, refused)", ["outcome"], registry=r)
        self.probes = Counter("c4_agent_probes_sent", "Probe packets sent", registry=r)
        self.probe_reports = Counter("c4_agent_probe_reports", "Probe reports posted, by HTTP "
                                     "status", ["status"], registry=r)
        self.rank_conflicts = Counter("c4_agent_rank_conflicts", "Communicator ranks reported "
                                      "with two different job ranks", registry=r)
