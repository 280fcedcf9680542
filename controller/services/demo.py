"""What `c4 demo` sets up: a generated fabric, two jobs, an admin token and live traffic."""

from __future__ import annotations

from controller.diagnosis.simfabric import Fault
from controller.services import jobs, topology
from controller.services.clock import now_us
from controller.services.demo_traffic import DemoJob, DemoTraffic
from controller.services.runtime import Runtime
from controller.services.telemetry import Telemetry
from controller.settings import Settings
from controller.store import fabric_repo, tokens_repo
from controller.store.db import transaction
from controller.topology.generate import LeafSpineSpec, leaf_spine

DEMO_FABRIC = LeafSpineSpec(leaves=8, spines=4, hosts_per_leaf=4, name="demo-leaf-spine")
# 90 s in, the NIC port of demo-a's rank 5 runs at a fifth of its rate: a comm_slow alarm.
DEMO_FAULT = Fault("slow_nic_port", 90.0, "host5:mlx5_0:p0", factor=0.2)


def seed(settings: Settings) -> tuple[Runtime, str]:
    """Store the demo fabric if none is stored and create an admin token; returns both."""
    rt = Runtime.from_settings(settings)
    with rt.sessions() as session:
        has_fabric = fabric_repo.revision(session) is not None
    if not has_fabric:
        topology.replace(rt, leaf_spine(DEMO_FABRIC), force=True)
    jobs.seed_demo_jobs(rt)  # C4P: two ring jobs, planned by the background planner once serving
    if settings.admin_token is not None:
        token = settings.admin_token.get_secret_value()
    else:
        with transaction(rt.sessions) as session:
            _, token = tokens_repo.create(session, "demo", "admin", now_us())
    return rt, token


def traffic(telemetry: Telemetry) -> DemoTraffic:
    """Simulated telemetry of the demo jobs, fed to this process's detectors in real time."""
    demo_jobs = [DemoJob(name, first, n, DEMO_FAULT if i == 0 else None)
                 for i, (name, first, n) in enumerate(jobs.DEMO_JOBS)]
    return DemoTraffic(telemetry, demo_jobs, DEMO_FABRIC.hosts_per_leaf)
