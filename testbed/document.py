"""A testbed `Plan` as an API.md topology document (`PUT /v1/topology` accepts it unchanged).

Pure. Every value is the one `commands` gives the kernel: switch and host names (the
namespace of node N is `<prefix>-N`), switch port names (interface names in the switch's
namespace), host port addresses, link addresses (/31s of 100.64.0.0/16), management addresses,
each switch's `fib_multipath_hash_seed` as `ecmp_seed`, and the shaped HTB rate as
`capacity_gbps`. Hashing is `probed` over TCP to the shim's listen port: the kernel's hash
function is not a model c4 knows, so paths must be learned by probing, with the data flows'
own protocol and destination port.
"""

from __future__ import annotations

from typing import Any

from testbed.plan import Plan


def gbps(rate_mbit: int) -> float:
    return rate_mbit / 1000


def to_document(plan: Plan, hash_seed_supported: bool = True) -> dict[str, Any]:
    switches = []
    for s in plan.switches:
        switches.append({"name": s.name, "role": s.role,
                         "ecmp_seed": s.ecmp_seed if hash_seed_supported else 0,
                         "mgmt_address": s.mgmt_address})
    links = []
    for link in plan.links:
        if link.host_link:
            continue
        links.append({"name": link.name, "a": link.a.node, "a_port": link.a.ifname, "a_address": link.a.ip,
                      "b": link.b.node, "b_port": link.b.ifname, "b_address": link.b.ip,
                      "capacity_gbps": gbps(link.rate_mbit)})
    hosts = []
    for h in plan.hosts:
        ports = []
        for p in h.ports:
            link = plan.link_between(p.node, p.leaf)
            ports.append({"name": p.name, "address": p.address, "switch": p.leaf,
                          "switch_port": p.leaf_port, "capacity_gbps": gbps(link.rate_mbit),
                          "link": link.name})
        hosts.append({"name": h.name, "nics": [{"name": h.ports[0].nic, "rail": 0, "ports": ports}]})
    return {"name": f"{plan.spec.name}-{plan.prefix}",
            "hashing": {"mode": "probed", "protocol": "tcp", "dst_port": plan.spec.shim_port},
            "switches": switches, "links": links, "hosts": hosts}
