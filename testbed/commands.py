"""The kernel configuration of a `Plan`, as text: sysctls, `ip -batch`, `tc -batch` and
`nft -f` input for every namespace. Pure: it builds strings and never runs them (`kernel` does).

Why each setting (the physics the testbed promises):
- switches forward with ECMP on the L4 5-tuple and their own `fib_multipath_hash_seed`; routes
  to a leaf's host prefix are multipath over the spines. The 5-tuple is selected with
  `fib_multipath_hash_policy=3` and `fib_multipath_hash_fields=0x0037` (source and destination
  address, protocol, source and destination port), not with policy 1: policy 1 takes the hash
  a packet already carries when it has an L4 one, and a TCP packet from a host namespace
  carries its socket's random `sk_txhash` across the veth (re-rolled on every connection and
  on timeouts), which a real switch never sees; measured on the testbed, policy 1 put data
  flows where TTL probes of the same 5-tuple went 8 times in 16 (chance), policy 3 16 in 16;
- `icmp_ratemask=0` and `icmp_ratelimit=0`: time-exceeded replies are never rate limited, so
  TTL-limited path probes get an answer for every probe;
- `rp_filter=0`: ECMP makes paths asymmetric; `ignore_routes_with_linkdown=1`: a next hop whose
  link lost carrier (the peer end set down) is skipped, like a real switch's port-down event;
- hosts: `tcp_ecn=1` (flows are ECN-capable, as RoCE traffic is), ephemeral ports kept below
  49152 so the RoCE-range source ports c4 assigns are free to bind, `gso_max_segs 1` on their
  ports so every packet on the wire is at most one MTU (the ECN marker counts packets);
- every data-plane interface: HTB at the link rate over a drop-tail `bfifo` (the switch
  buffer). The kernel this was built on has no RED, fq_codel or netem, so ECN marking is an
  nftables rule per switch egress port: a token bucket at the port's rate, in packets of one
  MTU, with a burst of `ecn_threshold_pkts` is a virtual queue that drains exactly as the HTB
  queue does; packets beyond it (queue above the threshold) that are ECN-capable get CE,
  counted in the named counter `ecn_<port>` (DCTCP-style step marking).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from testbed.plan import GATEWAY, LinkPlan, Plan, SwitchPlan

NFT_TABLE = "c4testbed"
MGMT_IF = "mgmt0"
MGMT_BRIDGE = "br0"
MGMT_UPLINK = "up0"
HOST_TABLE_BASE = 100
EPHEMERAL_PORTS = "32768 49151"
HASH_POLICY = 3  # custom fields, computed from the packet's headers (see the module docstring)
HASH_FIELDS = "0x0037"  # src ip | dst ip | ip proto | src port | dst port


@dataclass(frozen=True, slots=True)
class PortState:
    """What a fault changed on one egress interface (absent = as built)."""

    rate_mbit: int | None = None
    loss_ppm: int = 0


Overrides = Mapping[tuple[str, str], PortState]  # (node, ifname) -> state


def sysctls(plan: Plan, node: str, hash_seed_supported: bool = True) -> list[str]:
    common = ["net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0",
              "net.ipv4.conf.all.ignore_routes_with_linkdown=1",
              "net.ipv4.conf.default.ignore_routes_with_linkdown=1",
              "net.ipv4.icmp_ratelimit=0", "net.ipv4.icmp_ratemask=0",
              "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"]
    if node == "mgmt":
        return common
    try:
        sw = plan.switch(node)
    except KeyError:
        # max_dgram_qlen: the shim sends telemetry as Unix datagrams; the default queue of 10
        # drops records whenever the agent is a moment late.
        return [*common, "net.ipv4.tcp_ecn=1", f"net.ipv4.ip_local_port_range={EPHEMERAL_PORTS}",
                "net.unix.max_dgram_qlen=512"]
    out = [*common, "net.ipv4.ip_forward=1", f"net.ipv4.fib_multipath_hash_policy={HASH_POLICY}",
           f"net.ipv4.fib_multipath_hash_fields={HASH_FIELDS}"]
    if hash_seed_supported:
        out.append(f"net.ipv4.fib_multipath_hash_seed={sw.ecmp_seed}")
    return out


def netns_batch(plan: Plan) -> list[str]:
    """`ip -batch` lines that create every namespace (run first)."""
    return [f"netns add {plan.netns(n)}" for n in ("mgmt", *plan.nodes)]


def veth_batch(plan: Plan) -> list[str]:
    """`ip -batch` lines, run in the root namespace, that create every veth pair directly in
    its two namespaces (nothing is ever named in the root namespace but the management
    uplink)."""
    lines = []
    for link in plan.links:
        lines.append(f"link add name {link.a.ifname} netns {plan.netns(link.a.node)} type veth "
                     f"peer name {link.b.ifname} netns {plan.netns(link.b.node)}")
    for i, node in enumerate(plan.nodes):
        lines.append(f"link add name {MGMT_IF} netns {plan.netns(node)} type veth "
                     f"peer name m{i} netns {plan.netns('mgmt')}")
    lines.append(f"link add name {plan.root_ifname} type veth peer name {MGMT_UPLINK} "
                 f"netns {plan.netns('mgmt')}")
    return lines


def root_batch(plan: Plan) -> list[str]:
    prefixlen = plan.mgmt_net.split("/")[1]
    return [f"address add {plan.mgmt_gateway}/{prefixlen} dev {plan.root_ifname}",
            f"link set {plan.root_ifname} up"]


def _mgmt_lines(plan: Plan, address: str) -> list[str]:
    prefixlen = plan.mgmt_net.split("/")[1]
    return [f"address add {address}/{prefixlen} dev {MGMT_IF}", f"link set {MGMT_IF} up"]


def _ends(plan: Plan, node: str) -> list[tuple[LinkPlan, str, str | None]]:
    """(link, interface name, address) of every data-plane interface of a node."""
    out = []
    for link in plan.links:
        for end in (link.a, link.b):
            if end.node == node:
                out.append((link, end.ifname, end.address))
    return out


def _uplink_nexthops(plan: Plan, leaf: SwitchPlan) -> str:
    hops = []
    for spine in plan.spines:
        link = plan.link_between(leaf.name, spine.name)
        hops.append(f"nexthop via {link.b.ip} dev {link.a.ifname}")
    return " ".join(hops)


def ip_batch(plan: Plan, node: str) -> list[str]:
    """`ip -n <netns> -batch` lines: interfaces up with their MTU and addresses, routes."""
    mtu = plan.spec.mtu
    lines = ["link set lo up"]
    if node == "mgmt":
        lines += [f"link add {MGMT_BRIDGE} type bridge", f"link set {MGMT_BRIDGE} up"]
        for i in range(len(plan.nodes)):
            lines += [f"link set m{i} master {MGMT_BRIDGE}", f"link set m{i} up"]
        return [*lines, f"link set {MGMT_UPLINK} master {MGMT_BRIDGE}", f"link set {MGMT_UPLINK} up"]
    ends = _ends(plan, node)
    try:
        sw = plan.switch(node)
    except KeyError:
        host = plan.host(node)
        lines += _mgmt_lines(plan, host.mgmt_address)
        for i, port in enumerate(host.ports):
            lines += [f"link set {port.name} mtu {mtu} gso_max_segs 1 up",
                      f"address add {port.address}/32 dev {port.name}"]
            if i == 0:
                lines.append(f"route add default via {GATEWAY} dev {port.name} onlink src {port.address}")
            if len(host.ports) > 1:
                # Several ports: traffic leaves by the port whose address it is sourced from.
                table = HOST_TABLE_BASE + i
                lines += [f"rule add from {port.address} table {table} pref {table}",
                          f"route add default via {GATEWAY} dev {port.name} onlink table {table}"]
        return lines
    lines += _mgmt_lines(plan, sw.mgmt_address)
    for _, ifname, address in ends:
        lines.append(f"link set {ifname} mtu {mtu} up")
        if address:
            scope = " scope link" if address.startswith(GATEWAY) else ""
            lines.append(f"address add {address} dev {ifname}{scope}")
    if sw.role == "spine":
        for leaf in plan.leaves:
            link = plan.link_between(leaf.name, sw.name)
            lines.append(f"route add {plan.leaf_subnet(leaf)} via {link.a.ip} dev {link.b.ifname}")
        return lines
    for h in plan.hosts:
        for p in h.ports:
            if p.leaf == sw.name:
                # src: time-exceeded replies to a host name this leaf by its management
                # address, which the fabric document lists (a probe hop the controller knows).
                lines.append(f"route add {p.address}/32 dev {p.leaf_port} scope link src {sw.mgmt_address}")
    lines.append(f"route add unreachable {plan.leaf_subnet(sw)}")
    if plan.spines:
        for other in plan.leaves:
            if other.name != sw.name:
                lines.append(f"route add {plan.leaf_subnet(other)} {_uplink_nexthops(plan, sw)}")
    return lines


def _rate_lines(verb: str, ifname: str, rate_mbit: int, mtu: int) -> list[str]:
    burst = max(2 * (mtu + 14), rate_mbit * 125)  # at least two packets, or 1 ms at the rate
    return [f"class {verb} dev {ifname} parent 1: classid 1:1 htb rate {rate_mbit}mbit "
            f"ceil {rate_mbit}mbit burst {burst} cburst {burst} quantum {mtu + 14}"]


def tc_batch(plan: Plan, node: str) -> list[str]:
    """`tc -n <netns> -batch` lines: HTB at the link rate over a drop-tail buffer, on every
    data-plane interface (each direction of a link is shaped at its sender)."""
    lines = []
    for link, ifname, _ in _ends(plan, node):
        lines.append(f"qdisc add dev {ifname} root handle 1: htb default 1")
        lines += _rate_lines("add", ifname, link.rate_mbit, plan.spec.mtu)
        lines.append(f"qdisc add dev {ifname} parent 1:1 handle 10: bfifo limit {plan.spec.buffer_bytes}")
    return lines


def tc_rate_batch(plan: Plan, ifname: str, rate_mbit: int) -> list[str]:
    return _rate_lines("change", ifname, rate_mbit, plan.spec.mtu)


def packets_per_s(rate_mbit: int, mtu: int) -> int:
    """A port's rate in full-size packets per second (an MTU plus the Ethernet header)."""
    return max(1, round(rate_mbit * 1_000_000 / 8 / (mtu + 14)))


def nft_ruleset(plan: Plan, node: str, overrides: Overrides | None = None) -> str:
    """The node's whole nftables table, replacing any previous one atomically (`nft -f`).

    Switches get an ECN marker per egress port; any node gets the loss faults set on its
    egress ports. Counters are named so they survive rule changes' ordering:
    `ecn_<port>` (CE marks set here) and `loss_<port>` (packets dropped by a loss fault).
    Loading it again (a fault set or cleared, a link's rate changed: its marker follows)
    replaces the rules and keeps the counters: a switch's ECN counter does not restart when
    a link loses capacity (deleting the table did, and the sample spanning a throttle then
    had no mark count at all).
    """
    over = overrides or {}
    is_switch = node in {s.name for s in plan.switches}
    counters, rules = [], []
    for link, ifname, _ in _ends(plan, node):
        state = over.get((node, ifname), PortState())
        if state.loss_ppm:
            counters.append(f"  counter loss_{ifname} {{}}")
            rules.append(f'    oifname "{ifname}" numgen random mod 1000000 < {state.loss_ppm} '
                         f'counter name "loss_{ifname}" drop')
        if is_switch:
            rate = state.rate_mbit or link.rate_mbit
            pps = packets_per_s(rate, plan.spec.mtu)
            counters.append(f"  counter ecn_{ifname} {{}}")
            rules.append(f'    oifname "{ifname}" ip ecn {{ ect0, ect1 }} limit rate over {pps}/second '
                         f'burst {plan.spec.ecn_threshold_pkts} packets ip ecn set ce counter name "ecn_{ifname}"')
    head = "\n".join([*counters, "  chain egress { type filter hook postrouting priority 0; policy accept; }"])
    return (f"table ip {NFT_TABLE} {{\n{head}\n}}\nflush chain ip {NFT_TABLE} egress\n"
            f"table ip {NFT_TABLE} {{\n  chain egress {{\n" + "\n".join(rules) + "\n  }\n}\n")
