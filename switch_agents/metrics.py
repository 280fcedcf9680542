"""The switch agent's Prometheus metrics, in a registry of its own (one per `Agent`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class AgentMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.poll_duration = Gauge("c4_switch_agent_poll_duration_seconds",
                                   "Duration of the latest poll of a target", ["target"], registry=r)
        self.poll_seconds = Histogram("c4_switch_agent_poll_seconds", "Poll durations, all targets",
                                      buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=r)
        self.target_up = Gauge("c4_switch_agent_target_up", "1 if the latest poll of a target succeeded",
                               ["target"], registry=r)
        self.errors = Counter("c4_switch_agent_poll_errors_total", "Failed polls by target and kind",
                              ["target", "kind"], registry=r)
        self.samples = Counter("c4_switch_agent_port_samples_total", "Port samples collected", ["target"], registry=r)
        self.varbinds = Counter("c4_switch_agent_varbinds_total", "Variable bindings received", registry=r)
        self.requests = Counter("c4_switch_agent_snmp_requests_total", "SNMP requests sent", registry=r)
        self.resets = Counter("c4_switch_agent_counter_resets_total",
                              "Switch restarts seen (sysUpTime went back)", ["target"], registry=r)
        self.wraps = Counter("c4_switch_agent_counter32_wraps_total", "Counter32 wraps unwrapped", ["target"],
                             registry=r)
        self.repolls = Counter("c4_switch_agent_repolls_total",
                               "Early polls of targets whose sample looked like lost capacity", registry=r)
        self.repolls_failed = Counter("c4_switch_agent_repolls_failed_total",
                                      "Early polls that failed or timed out (not counted as failed polls: the "
                                      "target's status is its regular polls')", ["target"], registry=r)
        self.cycles = Counter("c4_switch_agent_cycles_total", "Poll cycles run", registry=r)
        self.cycle_seconds = Gauge("c4_switch_agent_cycle_duration_seconds", "Duration of the latest cycle",
                                   registry=r)
        self.overruns = Counter("c4_switch_agent_cycle_overruns_total",
                                "Cycles that took longer than the interval (the next one was skipped)", registry=r)
        self.posts = Counter("c4_switch_agent_posts_total", "POSTs to the controller by outcome", ["outcome"],
                             registry=r)
        self.posted = Counter("c4_switch_agent_samples_posted_total", "Switch samples the controller accepted",
                              registry=r)
        self.dropped = Counter("c4_switch_agent_samples_dropped_total", "Switch samples dropped, by reason",
                               ["reason"], registry=r)
        self.ignored = Counter("c4_switch_agent_ports_ignored_total",
                               "Ports or switches the controller ignored (not in its fabric)", registry=r)
        self.spool = Gauge("c4_switch_agent_spool_samples", "Switch samples waiting for the controller", registry=r)
        self.controller_up = Gauge("c4_switch_agent_controller_up", "1 if the latest POST reached the controller",
                                   registry=r)
