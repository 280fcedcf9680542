"""The rules a fabric must satisfy before c4 stores it.

`problems(fabric)` returns every broken rule with the field path of the document that
broke it; an empty list means the fabric is accepted. Field paths index the document's own
lists (`switches[i]`, `links[i]` over switch-to-switch links in document order,
`hosts[i].nics[j].ports[k]`). Shape errors (types, unknown keys, negative capacities) are
the API schema's job; these are the rules that need the whole fabric.
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict

import networkx as nx

from controller.domain.fabric import Fabric, HashingMode, Link, SwitchRole
from controller.domain.problems import Loc, Problem

SUPPORTED_MODELS = ("c4-ref-v1",)


def problems(fabric: Fabric) -> list[Problem]:
    found: list[Problem] = []
    found += _hashing(fabric)
    found += _names(fabric)
    found += _addresses(fabric)
    found += _links(fabric)
    found += _host_ports(fabric)
    if not found:
        found += _structure(fabric)
    return found


def _hashing(fabric: Fabric) -> list[Problem]:
    h = fabric.hashing
    if h.mode == HashingMode.MODEL and h.model not in SUPPORTED_MODELS:
        return [Problem(("hashing", "model"), f"unknown hash model {h.model!r}; supported: {', '.join(SUPPORTED_MODELS)}")]
    if h.protocol not in ("udp", "tcp"):
        return [Problem(("hashing", "protocol"), f"protocol must be udp or tcp, not {h.protocol!r}")]
    return []


def _duplicates(items: list[tuple[str, Loc]], what: str) -> list[Problem]:
    seen: dict[str, Loc] = {}
    out = []
    for value, loc in items:
        if value in seen:
            out.append(Problem(loc, f"duplicate {what} {value!r} (also at {Problem(seen[value], '').field})"))
        else:
            seen[value] = loc
    return out


def _names(fabric: Fabric) -> list[Problem]:
    out = _duplicates([(s.name, ("switches", i, "name")) for i, s in enumerate(fabric.switches)], "switch name")
    out += _duplicates([(h.name, ("hosts", i, "name")) for i, h in enumerate(fabric.hosts)], "host name")
    switch_names = {s.name for s in fabric.switches}
    for i, h in enumerate(fabric.hosts):
        if h.name in switch_names:
            out.append(Problem(("hosts", i, "name"), f"host name {h.name!r} is also a switch name"))
        if ":" in h.name:
            out.append(Problem(("hosts", i, "name"), "host names may not contain ':'"))
        if not h.nics:
            out.append(Problem(("hosts", i, "nics"), "a host needs at least one NIC"))
        out += _duplicates([(n.name, ("hosts", i, "nics", j, "name")) for j, n in enumerate(h.nics)], "NIC name")
        for j, n in enumerate(h.nics):
            if not n.ports:
                out.append(Problem(("hosts", i, "nics", j, "ports"), "a NIC needs at least one port"))
            out += _duplicates(
                [(p.name, ("hosts", i, "nics", j, "ports", k, "name")) for k, p in enumerate(n.ports)], "port name"
            )
    doc_links = [(i, link) for i, link in enumerate(_switch_links(fabric))]
    out += _duplicates([(link.name, ("links", i, "name")) for i, link in doc_links], "link name")
    return out


def _addresses(fabric: Fabric) -> list[Problem]:
    items: list[tuple[str, Loc]] = []
    for i, h in enumerate(fabric.hosts):
        for j, n in enumerate(h.nics):
            for k, p in enumerate(n.ports):
                items.append((p.address, ("hosts", i, "nics", j, "ports", k, "address")))
    for i, link in enumerate(_switch_links(fabric)):
        if link.a_address:
            items.append((link.a_address, ("links", i, "a_address")))
        if link.b_address:
            items.append((link.b_address, ("links", i, "b_address")))
    out = []
    for value, loc in items:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            out.append(Problem(loc, f"{value!r} is not an IP address"))
    return out + _duplicates(items, "address")


def _switch_links(fabric: Fabric) -> list[Link]:
    return [link for link in fabric.links if not link.is_host_link]


def _links(fabric: Fabric) -> list[Problem]:
    switch_names = {s.name for s in fabric.switches}
    out = []
    ports_used: list[tuple[str, Loc]] = []
    pairs: list[tuple[str, Loc]] = []
    probed = fabric.hashing.mode == HashingMode.PROBED
    for i, link in enumerate(_switch_links(fabric)):
        for end, name in (("a", link.a), ("b", link.b)):
            if name not in switch_names:
                out.append(Problem(("links", i, end), f"unknown switch {name!r}"))
        if link.a == link.b:
            out.append(Problem(("links", i, "b"), "a link must join two different switches"))
        if probed and not (link.a_address and link.b_address):
            end = "a_address" if not link.a_address else "b_address"
            out.append(Problem(("links", i, end), "probed hashing needs both link addresses"))
        ports_used += [(f"{link.a}:{link.a_port}", ("links", i, "a_port")), (f"{link.b}:{link.b_port}", ("links", i, "b_port"))]
        pairs.append(("--".join(sorted((link.a, link.b))), ("links", i)))
    for i, h in enumerate(fabric.hosts):
        for j, n in enumerate(h.nics):
            for k, p in enumerate(n.ports):
                ports_used.append((f"{p.switch}:{p.switch_port}", ("hosts", i, "nics", j, "ports", k, "switch_port")))
    out += _duplicates(ports_used, "switch port")
    out += [
        Problem(p.loc, p.message.replace("duplicate switch pair", "a second link between the same switches") + "; c4 models one link per switch pair")
        for p in _duplicates(pairs, "switch pair")
    ]
    return out


def _host_ports(fabric: Fabric) -> list[Problem]:
    roles = {s.name: s.role for s in fabric.switches}
    out = []
    for i, h in enumerate(fabric.hosts):
        for j, n in enumerate(h.nics):
            for k, p in enumerate(n.ports):
                loc: Loc = ("hosts", i, "nics", j, "ports", k, "switch")
                if p.switch not in roles:
                    out.append(Problem(loc, f"unknown switch {p.switch!r}"))
                elif roles[p.switch] != SwitchRole.LEAF:
                    out.append(Problem(loc, f"host ports attach to leaves; {p.switch!r} is a {roles[p.switch].value}"))
    return out


def _structure(fabric: Fabric) -> list[Problem]:
    """Leaves have uplinks and every switch reaches every other (over all links, any state)."""
    out = []
    graph: nx.Graph[str] = nx.Graph()
    graph.add_nodes_from(s.name for s in fabric.switches)
    degree: dict[str, int] = defaultdict(int)
    for link in _switch_links(fabric):
        graph.add_edge(link.a, link.b)
        degree[link.a] += 1
        degree[link.b] += 1
    if len(fabric.switches) > 1:
        for i, s in enumerate(fabric.switches):
            if s.role == SwitchRole.LEAF and degree[s.name] == 0:
                out.append(Problem(("switches", i), f"leaf {s.name!r} has no uplink"))
    if out or len(fabric.switches) < 2:
        return out
    components = sorted((sorted(c) for c in nx.connected_components(graph)), key=lambda c: (-len(c), c))
    if len(components) > 1:
        index = {s.name: i for i, s in enumerate(fabric.switches)}
        for stray in components[1:]:
            out.append(
                Problem(("switches", index[stray[0]]),
                        f"the fabric is disconnected: {', '.join(stray[:5])}{' ...' if len(stray) > 5 else ''} cannot reach {components[0][0]!r}")
            )
    return out
