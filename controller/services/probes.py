"""Probe use cases: store what node agents' path probes saw, say which pairs still need probing,
and give the planner a `ProbeBook` of the fresh entries (probed hashing mode). Pairs a link
change made stale (`Runtime.probe_stale`, set by `services.failover`) are asked for again
until a report newer than the change arrives.

Only probes of the fabric's data-flow protocol and destination port are used for planning
(switches hash the whole 5-tuple); hops are mapped to switches by `te.probes.hops_to_path`
and an entry whose hops do not form a known path is kept with `path` null, never planned on.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from controller.domain.fabric import HashingMode
from controller.services import topology
from controller.services.clock import now_us
from controller.services.jobs import spec_from_document
from controller.services.runtime import Runtime
from controller.store import jobs_repo, probes_repo
from controller.store.db import transaction
from controller.te import flows as job_flows
from controller.te.candidates import Candidates
from controller.te.probes import ProbeBook, ProbeEntry, hops_to_path, switch_addresses
from controller.topology.graph import FabricView


def record(rt: Runtime, src_address: str, dst_address: str, protocol: str, dst_port: int,
           results: list[tuple[int, list[str]]], t_us: int | None) -> dict[str, Any]:
    """Store one probe report; returns how many results were accepted and how many map to a path."""
    _, view = topology.current(rt)
    table = switch_addresses(view)
    t = t_us if t_us is not None else now_us()
    rows = [(sport, hops, hops_to_path(view, src_address, dst_address, hops, table)) for sport, hops in results]
    learned = sum(path is not None for _, _, path in rows)
    with transaction(rt.sessions) as session:
        probes_repo.replace(session, src_address, dst_address, protocol, dst_port,
                            [(sport, hops, list(path) if path else None) for sport, hops, path in rows], t)
        data_flows = probes_repo.hashing(session)
    # Fresh again (services.failover waits on it): judged on this process's clock, not the
    # agent's (`t_us`, which may be skewed), and only for probes of the data flows' own protocol
    # and port. (A report already in flight when the pair went stale counts too: a window of
    # one pair's probing, ~0.15 s, bench/README.md "agent".)
    since = rt.probe_stale.get((src_address, dst_address))
    if since is not None and learned and now_us() >= since and data_flows == (protocol, dst_port):
        rt.probe_stale.pop((src_address, dst_address), None)
    if learned:
        rt.wake_workers()
    return {"accepted": len(results), "learned": learned}


def probe_book(session: Session, view: FabricView, ttl_s: float) -> ProbeBook:
    """The fresh, usable probe entries of the fabric's data-flow protocol and port."""
    now = now_us()
    proto = probes_repo.hashing(session) or ("udp", 4791)
    oldest = now - int(ttl_s * 1_000_000)
    entries = [ProbeEntry(s, d, sport, tuple(path), t)
               for s, d, sport, path, t in probes_repo.fresh(session, proto[0], proto[1], oldest) if path]
    return ProbeBook(view, entries, now, ttl_s)


def requests(rt: Runtime, host: str | None) -> list[dict[str, Any]]:
    """The (src, dst) address pairs the planner lacks fresh probes for, sourced on `host`."""
    fabric, view = topology.current(rt)
    if fabric.hashing.mode != HashingMode.PROBED:
        return []
    with rt.sessions() as session:
        book = probe_book(session, view, rt.settings.probe_ttl_s)
        specs = [spec for _, spec in jobs_repo.active_specs(session).values()]
    cands = Candidates(view, book)
    pairs: set[tuple[str, str]] = set()
    for doc in specs:
        for f in job_flows.derive_flows(spec_from_document(doc)):
            if host is not None and f.src_host != host:
                continue
            for s in cands.up_ports(f.src):
                for d in cands.up_ports(f.dst):
                    pairs.add((s, d))
    h = fabric.hashing
    stale = dict(rt.probe_stale)
    wanted = set(book.missing_pairs(sorted(pairs)))
    if stale:  # a link change re-hashed these pairs: their entries are fresh but wrong
        for s, d in pairs:
            addrs = (view.ports[s].address, view.ports[d].address)
            if addrs in stale:
                wanted.add(addrs)
    return [{"src_address": s, "dst_address": d, "protocol": h.protocol, "dst_port": h.dst_port}
            for s, d in sorted(wanted)]
