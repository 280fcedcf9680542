"""The testbed's pure parts: address plan, kernel command text, the fabric document (no root)."""

from __future__ import annotations

import ipaddress

import pytest

from controller.api.schemas.topology import TopologyCreate
from controller.topology.validate import problems
from testbed import commands
from testbed.document import to_document
from testbed.plan import FabricSpec, PlanError, check_prefix, make_plan
from testbed.state import pick_mgmt_net

MGMT = "198.18.16.0/20"


def test_docstring_example_addresses() -> None:
    plan = make_plan(FabricSpec(leaves=2, spines=2, hosts_per_leaf=1, dual_tor=True), "c4tb", "198.18.0.0/20")
    h0, h1 = plan.host("host0"), plan.host("host1")
    assert [(p.name, p.address, p.leaf, p.leaf_port) for p in h0.ports] == [
        ("p0", "10.1.0.2", "leaf0", "Ethernet2"), ("p1", "10.2.1.2", "leaf1", "Ethernet3")]
    assert [(p.address, p.leaf, p.leaf_port) for p in h1.ports] == [
        ("10.2.0.2", "leaf1", "Ethernet2"), ("10.1.1.2", "leaf0", "Ethernet3")]
    up = plan.link_between("leaf0", "spine1")
    assert (up.a.ifname, up.a.address, up.b.ifname, up.b.address) == ("Ethernet1", "100.64.0.2/31", "Ethernet0", "100.64.0.3/31")
    assert [s.mgmt_address for s in plan.switches] == ["198.18.0.2", "198.18.0.3", "198.18.0.4", "198.18.0.5"]
    assert plan.mgmt_gateway == "198.18.0.1"
    assert plan.netns("leaf0") == "c4tb-leaf0"


@pytest.mark.parametrize("spec", [
    FabricSpec(), FabricSpec(leaves=2, spines=2, hosts_per_leaf=2, dual_tor=True),
    FabricSpec(leaves=8, spines=16, hosts_per_leaf=8, rate_mbit=400), FabricSpec(leaves=1, spines=1, hosts_per_leaf=3)])
def test_document_is_a_valid_api_topology(spec: FabricSpec) -> None:
    doc = to_document(make_plan(spec, "c4tb", MGMT))
    fabric = TopologyCreate.model_validate(doc).to_fabric()  # strict: unknown keys refused
    assert problems(fabric) == []
    names = {link.name for link in fabric.links}
    assert all(p["link"] in names for h in doc["hosts"] for p in h["nics"][0]["ports"])
    assert {link["capacity_gbps"] for link in doc["links"]} <= {spec.rate_mbit / 1000}


def test_every_address_is_unique_and_inside_its_leaf_prefix() -> None:
    plan = make_plan(FabricSpec(leaves=4, spines=4, hosts_per_leaf=4, dual_tor=True), "c4tb", MGMT)
    addrs = [p.address for h in plan.hosts for p in h.ports]
    addrs += [e.ip for link in plan.links if not link.host_link for e in (link.a, link.b) if e.ip]
    addrs += [s.mgmt_address for s in plan.switches] + [h.mgmt_address for h in plan.hosts]
    assert len(addrs) == len(set(addrs))
    for h in plan.hosts:
        for p in h.ports:
            assert ipaddress.ip_address(p.address) in ipaddress.ip_network(plan.leaf_subnet(plan.switch(p.leaf)))


def test_seeds_differ_per_switch_and_per_run_seed() -> None:
    a = make_plan(FabricSpec(seed=1), "c4tb", MGMT)
    b = make_plan(FabricSpec(seed=2), "c4tb", MGMT)
    assert len({s.ecmp_seed for s in a.switches}) == len(a.switches)
    assert all(s.ecmp_seed != 0 for s in a.switches)
    assert [s.ecmp_seed for s in a.switches] != [s.ecmp_seed for s in b.switches]


@pytest.mark.parametrize("bad", ["", "C4", "c4-x", "1abc", "abcdefghijkl", "a b"])
def test_prefix_rules(bad: str) -> None:
    with pytest.raises(PlanError):
        check_prefix(bad)
    assert check_prefix("c4tb") == "c4tb"


@pytest.mark.parametrize(("field", "value"), [("leaves", 0), ("spines", 0), ("rate_mbit", 0), ("mtu", 100)])
def test_spec_limits_name_the_field(field: str, value: int) -> None:
    with pytest.raises(PlanError, match=field):
        FabricSpec(**{field: value}).check()
    with pytest.raises(PlanError, match="leaves"):
        FabricSpec(leaves=3, dual_tor=True).check()


def test_switch_commands_hash_on_the_five_tuple_with_their_seed() -> None:
    plan = make_plan(FabricSpec(leaves=2, spines=2, hosts_per_leaf=1), "c4tb", MGMT)
    leaf = plan.switch("leaf0")
    sysctls = commands.sysctls(plan, "leaf0")
    assert "net.ipv4.fib_multipath_hash_policy=3" in sysctls
    assert "net.ipv4.fib_multipath_hash_fields=0x0037" in sysctls
    assert f"net.ipv4.fib_multipath_hash_seed={leaf.ecmp_seed}" in sysctls
    assert "net.ipv4.icmp_ratemask=0" in sysctls
    assert not any("hash_seed" in s for s in commands.sysctls(plan, "leaf0", hash_seed_supported=False))
    routes = [line for line in commands.ip_batch(plan, "leaf0") if line.startswith("route add 10.2.0.0/16")]
    assert routes == ["route add 10.2.0.0/16 nexthop via 100.64.0.1 dev Ethernet0 nexthop via 100.64.0.3 dev Ethernet1"]
    host_lines = commands.ip_batch(plan, "host0")
    assert "link set p0 mtu 9000 gso_max_segs 1 up" in host_lines


def test_ecn_marker_runs_at_the_port_rate_in_packets() -> None:
    plan = make_plan(FabricSpec(leaves=1, spines=1, hosts_per_leaf=1, rate_mbit=100, ecn_threshold_pkts=16), "c4tb", MGMT)
    text = commands.nft_ruleset(plan, "leaf0")
    pps = commands.packets_per_s(100, 9000)
    assert pps == round(100e6 / 8 / 9014)
    assert f'oifname "Ethernet0" ip ecn {{ ect0, ect1 }} limit rate over {pps}/second burst 16 packets' in text
    assert "counter ecn_Ethernet1" in text  # the host-facing port marks too
    assert "ecn" not in commands.nft_ruleset(plan, "host0")
    lossy = commands.nft_ruleset(plan, "host0", {("host0", "p0"): commands.PortState(loss_ppm=20000)})
    assert 'oifname "p0" numgen random mod 1000000 < 20000 counter name "loss_p0" drop' in lossy
    # Loaded again when a link's rate changes: the rules are replaced, the counters kept (a
    # switch's ECN count does not restart when a link loses capacity).
    assert "delete table" not in text and f"flush chain ip {commands.NFT_TABLE} egress" in text
    assert text.index("counter ecn_Ethernet0 {}") < text.index("flush chain") < text.index("limit rate over")


def test_mgmt_network_avoids_what_is_taken() -> None:
    assert pick_mgmt_net([]) in ("198.18.0.0/20",) or pick_mgmt_net([]).startswith("198.1")
    assert pick_mgmt_net(["198.18.0.1/20", "198.18.16.1/20"]) not in ("198.18.0.0/20", "198.18.16.0/20")
