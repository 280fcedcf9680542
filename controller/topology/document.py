"""A fabric as the JSON document of API.md (`GET /v1/topology`, `c4 topology generate`).

Links carry their `name` and `state`; host ports carry their link's name (`link`) and
`state`, so a document read back from GET can be edited and PUT again unchanged.
"""

from __future__ import annotations

from typing import Any

from controller.domain.fabric import Fabric, HashingMode
from controller.topology.names import port_node


def to_document(fabric: Fabric) -> dict[str, Any]:
    h = fabric.hashing
    hashing: dict[str, Any] = {"mode": h.mode.value}
    if h.mode == HashingMode.MODEL:
        hashing["model"] = h.model
    else:
        hashing.update(protocol=h.protocol, dst_port=h.dst_port)
    host_links = {link.a: link for link in fabric.links if link.is_host_link}
    switches = []
    for s in fabric.switches:
        sw: dict[str, Any] = {"name": s.name, "role": s.role.value, "ecmp_seed": s.ecmp_seed}
        if s.pod is not None:
            sw["pod"] = s.pod
        if s.mgmt_address:
            sw["mgmt_address"] = s.mgmt_address
        switches.append(sw)
    links = []
    for link in fabric.links:
        if link.is_host_link:
            continue
        doc: dict[str, Any] = {"name": link.name, "a": link.a, "a_port": link.a_port}
        if link.a_address:
            doc["a_address"] = link.a_address
        doc.update(b=link.b, b_port=link.b_port)
        if link.b_address:
            doc["b_address"] = link.b_address
        doc.update(capacity_gbps=link.capacity_gbps, state=link.state.value)
        links.append(doc)
    hosts = []
    for host in fabric.hosts:
        nics = []
        for nic in host.nics:
            ports = []
            for p in nic.ports:
                hl = host_links[port_node(host.name, nic.name, p.name)]
                ports.append({"name": p.name, "address": p.address, "switch": p.switch,
                              "switch_port": p.switch_port, "capacity_gbps": p.capacity_gbps,
                              "link": hl.name, "state": hl.state.value})
            nics.append({"name": nic.name, "rail": nic.rail, "ports": ports})
        hosts.append({"name": host.name, "nics": nics})
    return {"name": fabric.name, "hashing": hashing, "switches": switches, "links": links, "hosts": hosts}
