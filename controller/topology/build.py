"""Turn the parts of a fabric document into a `Fabric` with canonical names.

Host ports become links of their own (`host:nic:port--leaf:EthernetN`). Names given in the
document are kept; missing ones get the canonical form from `names`. No validation here:
`validate.problems` says whether the result is a fabric c4 accepts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from controller.domain.fabric import Fabric, Hashing, Host, Link, LinkState, Switch
from controller.topology.names import link_name, port_node


def build_fabric(
    name: str,
    hashing: Hashing,
    switches: Iterable[Switch],
    links: Iterable[Link],
    hosts: Iterable[Host],
    host_link_states: Mapping[str, LinkState] | None = None,
    host_link_names: Mapping[str, str] | None = None,
) -> Fabric:
    """Name every link and add one link per host port.

    `links` may carry an empty `name`, which is replaced by the canonical one.
    `host_link_states` / `host_link_names` are keyed by the port's `host:nic:port` node.
    """
    states = host_link_states or {}
    given_names = host_link_names or {}
    hosts_t = tuple(hosts)
    named = [
        link if link.name else replace(link, name=link_name(link.a, link.a_port, link.b, link.b_port))
        for link in links
    ]
    for host in hosts_t:
        for nic in host.nics:
            for port in nic.ports:
                node = port_node(host.name, nic.name, port.name)
                named.append(
                    Link(
                        name=given_names.get(node) or link_name(node, "", port.switch, port.switch_port),
                        a=node,
                        a_port="",
                        b=port.switch,
                        b_port=port.switch_port,
                        capacity_gbps=port.capacity_gbps,
                        a_address=port.address,
                        state=states.get(node, LinkState.UP),
                        is_host_link=True,
                    )
                )
    return Fabric(name=name, hashing=hashing, switches=tuple(switches), links=tuple(named), hosts=hosts_t)


def with_link_state(fabric: Fabric, name: str, state: LinkState) -> Fabric:
    """The same fabric with one link's state changed (KeyError if there is no such link)."""
    if not any(link.name == name for link in fabric.links):
        raise KeyError(name)
    links = tuple(replace(link, state=state) if link.name == name else link for link in fabric.links)
    return replace(fabric, links=links)
