"""Store and load the one current fabric, and change a link's state.

`replace_fabric` deletes the old fabric rows and bulk-inserts the new ones in the caller's
transaction, so a failed replacement leaves the old fabric whole.
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, insert, select, update
from sqlalchemy.orm import Session

from controller.domain.fabric import (
    Fabric,
    Hashing,
    HashingMode,
    Host,
    HostPort,
    Link,
    LinkState,
    Nic,
    Switch,
    SwitchRole,
)
from controller.store.tables import (
    Base,
    FabricRow,
    HostPortRow,
    HostRow,
    LinkRow,
    NicRow,
    SwitchRow,
)
from controller.topology.build import build_fabric
from controller.topology.names import port_node


def revision(session: Session) -> int | None:
    """The current fabric's revision, or None when no fabric is stored."""
    return session.scalar(select(FabricRow.revision).where(FabricRow.id == 1))


def bump_revision(session: Session, now_us: int) -> int | None:
    """Take the fabric's write lock and return its next revision (None: no fabric stored).

    This is the first statement of every transaction that changes the fabric: the UPDATE
    takes the row lock on PostgreSQL and the database's write lock on SQLite, so changes
    serialize, and the revision each one gets is exactly one past what it changed.
    """
    return session.execute(
        update(FabricRow).where(FabricRow.id == 1)
        .values(revision=FabricRow.revision + 1, updated_at_us=now_us)
        .returning(FabricRow.revision)
    ).scalar_one_or_none()


def claim_revision(session: Session, expected: int) -> bool:
    """Lock the fabric as `bump_revision` does, without changing it, if it is still at
    `expected`; False if it moved on (a plan computed on it must be dropped)."""
    result = session.execute(_CLAIM, {"expected": expected})
    return bool(result.rowcount)  # type: ignore[attr-defined]


_FABRIC = cast(Table, FabricRow.__table__)
# The lock's statements on the table, not the mapped class: an ORM-enabled UPDATE costs ~0.8
# ms of CPU to run, a Core one ~0.15 ms (issue 18: every job POST and DELETE takes the lock).
# Neither changes a value, so no FabricRow in a session goes stale.
_LOCK = update(_FABRIC).where(_FABRIC.c.id == 1).values(revision=_FABRIC.c.revision).returning(_FABRIC.c.revision)
_CLAIM = (update(_FABRIC).where(_FABRIC.c.id == 1, _FABRIC.c.revision == bindparam("expected"))
          .values(revision=_FABRIC.c.revision))


def lock(session: Session) -> int | None:
    """Take the fabric's write lock as `bump_revision` does, without changing anything, and
    return the current revision (None: no fabric stored). Job posts and deletes take it too:
    they change every job's demand, so they serialize with link changes and with the writes
    of plans and summaries (which check, under this lock, that what they were computed from
    is still the state)."""
    return session.execute(_LOCK).scalar_one_or_none()


def replace_fabric(session: Session, fabric: Fabric, now_us: int) -> int:
    """Replace the stored fabric; returns the new revision."""
    new_revision = bump_revision(session, now_us)
    for table in (HostPortRow, NicRow, HostRow, LinkRow, SwitchRow):
        session.execute(delete(table))
    h = fabric.hashing
    header = {"name": fabric.name, "hashing_mode": h.mode.value, "hashing_model": h.model,
              "hashing_protocol": h.protocol, "hashing_dst_port": h.dst_port, "updated_at_us": now_us}
    if new_revision is None:
        new_revision = 1
        session.execute(insert(FabricRow).values(id=1, revision=new_revision, **header))
    else:
        session.execute(update(FabricRow).where(FabricRow.id == 1).values(**header))
    switch_rows = [
        {"position": i, "name": s.name, "role": s.role.value, "pod": s.pod, "ecmp_seed": s.ecmp_seed,
         "mgmt_address": s.mgmt_address}
        for i, s in enumerate(fabric.switches)
    ]
    link_rows = [
        {"position": i, "name": link.name, "a": link.a, "a_port": link.a_port, "a_address": link.a_address,
         "b": link.b, "b_port": link.b_port, "b_address": link.b_address, "capacity_gbps": link.capacity_gbps,
         "is_host_link": link.is_host_link, "state": link.state.value, "state_changed_at_us": now_us}
        for i, link in enumerate(fabric.links)
    ]
    # An executemany of no rows is one INSERT of defaults (an IntegrityError): skip empty lists.
    _insert(session, SwitchRow, switch_rows)
    _insert(session, LinkRow, link_rows)
    host_links = {link.a: link.name for link in fabric.links if link.is_host_link}
    host_rows = [{"id": i + 1, "position": i, "name": host.name} for i, host in enumerate(fabric.hosts)]
    nic_rows: list[dict[str, object]] = []
    port_rows: list[dict[str, object]] = []
    for hi, host in enumerate(fabric.hosts):
        for ni, nic in enumerate(host.nics):
            nic_id = len(nic_rows) + 1
            nic_rows.append({"id": nic_id, "host_id": hi + 1, "position": ni, "name": nic.name, "rail": nic.rail})
            for pi, port in enumerate(nic.ports):
                port_rows.append({
                    "nic_id": nic_id, "position": pi, "name": port.name, "address": port.address,
                    "switch": port.switch, "switch_port": port.switch_port, "capacity_gbps": port.capacity_gbps,
                    "link_name": host_links[port_node(host.name, nic.name, port.name)],
                })
    for table, rows in ((HostRow, host_rows), (NicRow, nic_rows), (HostPortRow, port_rows)):
        _insert(session, table, rows)
    session.flush()
    return new_revision


INSERT_BATCH = 5_000


def _insert(session: Session, table: type[Base], rows: list[dict[str, Any]]) -> None:
    """Insert `rows` in batches: the driver binds each batch in one call that holds the
    interpreter lock, so a 100k-host fabric stored by one request does not stall the others
    for seconds. An empty list inserts nothing (an executemany of no rows is one INSERT of
    defaults, an IntegrityError)."""
    for start in range(0, len(rows), INSERT_BATCH):
        session.execute(insert(table), rows[start:start + INSERT_BATCH])


def load_fabric(session: Session) -> tuple[Fabric, int] | None:
    """The stored fabric and its revision, or None."""
    head = session.get(FabricRow, 1)
    if head is None:
        return None
    switches = [
        Switch(r.name, SwitchRole(r.role), r.pod, r.ecmp_seed, r.mgmt_address)
        for r in session.scalars(select(SwitchRow).order_by(SwitchRow.position))
    ]
    links, host_states, host_link_names = [], {}, {}
    for r in session.scalars(select(LinkRow).order_by(LinkRow.position)):
        if r.is_host_link:
            host_states[r.a] = LinkState(r.state)
            host_link_names[r.a] = r.name
        else:
            links.append(Link(r.name, r.a, r.a_port, r.b, r.b_port, r.capacity_gbps, r.a_address, r.b_address,
                              LinkState(r.state)))
    ports_by_nic: dict[int, list[HostPort]] = {}
    for p in session.scalars(select(HostPortRow).order_by(HostPortRow.nic_id, HostPortRow.position)):
        ports_by_nic.setdefault(p.nic_id, []).append(
            HostPort(p.name, p.address, p.switch, p.switch_port, p.capacity_gbps))
    nics_by_host: dict[int, list[Nic]] = {}
    for n in session.scalars(select(NicRow).order_by(NicRow.host_id, NicRow.position)):
        nics_by_host.setdefault(n.host_id, []).append(Nic(n.name, n.rail, tuple(ports_by_nic.get(n.id, []))))
    hosts = [
        Host(r.name, tuple(nics_by_host.get(r.id, [])))
        for r in session.scalars(select(HostRow).order_by(HostRow.position))
    ]
    hashing = Hashing(HashingMode(head.hashing_mode), head.hashing_model, head.hashing_protocol, head.hashing_dst_port)
    fabric = build_fabric(head.name, hashing, switches, links, hosts, host_states, host_link_names)
    return fabric, head.revision


def set_link_state(session: Session, name: str, state: LinkState, now_us: int) -> bool:
    """Change one link's state (the caller has bumped the revision); False if no such link."""
    result = session.execute(
        update(LinkRow).where(LinkRow.name == name).values(state=state.value, state_changed_at_us=now_us)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]
