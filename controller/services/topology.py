"""Topology use cases: replace, read, generate the fabric and change a link's state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from controller.domain.fabric import Fabric, Link, LinkState
from controller.domain.problems import Problem
from controller.services.clock import now_us
from controller.services.errors import Conflict, Invalid, NotFound
from controller.services.events import emit
from controller.services.runtime import Runtime
from controller.services.timings import PLANNER_SECONDS
from controller.store import fabric_repo, jobs_repo
from controller.store.db import transaction
from controller.topology.build import with_link_state
from controller.topology.document import to_document
from controller.topology.graph import FabricView
from controller.topology.validate import problems

ACTIVE_JOB_STATES = ("pending", "planned")


def current(rt: Runtime) -> tuple[Fabric, FabricView]:
    with rt.sessions() as session:
        return current_in(rt, session)


def current_in(rt: Runtime, session: Session) -> tuple[Fabric, FabricView]:
    """`current`, read in the caller's session (one statement when the cache is current)."""
    got = rt.fabric_cache.get(session)
    if got is None:
        raise NotFound("no topology has been stored yet; PUT /v1/topology or POST /v1/topology/generate")
    return got


def document(rt: Runtime) -> dict[str, Any]:
    fabric, _ = current(rt)
    return to_document(fabric)


def check_size(rt: Runtime, size: tuple[int, int, str]) -> None:
    """Refuse a fabric larger than the settings allow before any work is spent on it: `size` is
    (switches, links counting host ports, the field to name for too many links)."""
    switches, links, field = size
    s = rt.settings
    if switches > s.max_fabric_switches:
        raise Invalid([Problem(("switches",), f"the fabric would have {switches} switches; at most "
                                              f"{s.max_fabric_switches} (C4_MAX_FABRIC_SWITCHES)")])
    if links > s.max_fabric_links:
        raise Invalid([Problem((field,), f"the fabric would have {links} links (host ports plus switch-to-switch "
                                         f"links); at most {s.max_fabric_links} (C4_MAX_FABRIC_LINKS)")])


def replace(rt: Runtime, fabric: Fabric, force: bool = False, abort: Callable[[], None] | None = None) -> int:
    """Validate and store a new fabric; returns its revision. Nothing changes on refusal.

    `abort`, if given, is called before the transaction commits and may raise to give up (the
    request was cancelled): the change is rolled back."""
    found = problems(fabric)
    if found:
        raise Invalid(found)
    if abort is not None:
        abort()
    with transaction(rt.sessions) as session:
        active = jobs_repo.active_count(session)
        if active and not force:
            raise Conflict(f"{active} active job(s) use the fabric; retry with ?force=true to re-plan them",
                           {"active_jobs": active})
        revision = fabric_repo.replace_fabric(session, fabric, now_us())
        for hook in rt.on_fabric_replaced:
            hook(session, fabric)
        if abort is not None:
            abort()
    rt.fabric_cache.put(revision, fabric)
    rt.wake_workers()
    return revision


def set_link_state(rt: Runtime, name: str, state: LinkState) -> tuple[dict[str, Any], int]:
    """Change a link's state and re-plan what it carried, in one transaction.

    Returns the link's document and how many flows were re-planned.
    """
    base, _ = current(rt)
    link = next((link for link in base.links if link.name == name), None)
    if link is None:
        raise NotFound(f"no link named {name!r}", {"link": name})
    if link.state == state:
        return link_document(base, name), 0
    with transaction(rt.sessions) as session:
        now = now_us()
        revision = fabric_repo.bump_revision(session, now)  # first: takes the fabric's lock
        if revision is None:
            raise NotFound(f"no link named {name!r}; no topology is stored", {"link": name})
        fabric = rt.fabric_cache.at(revision - 1)
        if fabric is None:  # another process changed it: read it under the lock
            loaded = fabric_repo.load_fabric(session)
            assert loaded is not None
            fabric = loaded[0]
        if not any(link.name == name for link in fabric.links):
            raise NotFound(f"no link named {name!r}", {"link": name})
        previous = next(x.state for x in fabric.links if x.name == name)
        fabric_repo.set_link_state(session, name, state, now)
        changed = with_link_state(fabric, name, state)
        with PLANNER_SECONDS.labels("link_replan").time():
            replanned = sum(hook(session, changed, name, state) for hook in rt.on_link_change)
        emit(session, "link.state_changed", {"link": name, "state": state.value, "previous": previous.value,
                                             "replanned_flows": replanned}, now)
    rt.fabric_cache.put(revision, changed)
    rt.wake_workers()
    return link_document(changed, name), replanned


def link_document(fabric: Fabric, name: str) -> dict[str, Any]:
    return link_doc(next(link for link in fabric.links if link.name == name))


def link_doc(link: Link) -> dict[str, Any]:
    """A link as the API shows it: names, ports, capacity, state, and addresses if known."""
    doc: dict[str, Any] = {"name": link.name, "a": link.a, "a_port": link.a_port, "b": link.b,
                           "b_port": link.b_port, "capacity_gbps": link.capacity_gbps,
                           "state": link.state.value, "host_link": link.is_host_link}
    if link.a_address:
        doc["a_address"] = link.a_address
    if link.b_address:
        doc["b_address"] = link.b_address
    return doc
