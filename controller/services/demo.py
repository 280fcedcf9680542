"""What `c4 demo` sets up: a generated fabric and an admin token on the embedded database."""

from __future__ import annotations

from controller.services import jobs, topology
from controller.services.clock import now_us
from controller.services.runtime import Runtime
from controller.settings import Settings
from controller.store import fabric_repo, tokens_repo
from controller.store.db import transaction
from controller.topology.generate import LeafSpineSpec, leaf_spine

DEMO_FABRIC = LeafSpineSpec(leaves=8, spines=4, hosts_per_leaf=4, name="demo-leaf-spine")


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
