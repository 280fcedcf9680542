"""Switch port → link direction mapping and the rates each side of a port gives."""

from __future__ import annotations

from controller.te.measured import port_directions, port_map
from tests.unit.topology.fabrics import tiny_fabric

T = 1_764_430_000_000_000


def test_every_linked_switch_port_maps_to_its_link_and_directions() -> None:
    fabric = tiny_fabric()
    ends = port_map(fabric)
    leaf = ends[("leaf0", "Ethernet0")]
    spine = ends[("spine0", "Ethernet0")]
    assert leaf.link == spine.link == "leaf0:Ethernet0--spine0:Ethernet0"
    # a = leaf0: what leaf0 transmits is `ab`, what spine0 transmits is `ba`.
    assert (leaf.tx, leaf.rx, spine.tx, spine.rx) == ("ab", "ba", "ba", "ab")
    assert not leaf.peer_is_host and leaf.peer == "spine0"
    host = ends[("leaf0", "Ethernet32")]
    assert host.link == "host0:mlx5_0:p0--leaf0:Ethernet32"
    # A host link's `a` is the host port: the switch transmits `ba` (switch -> host).
    assert (host.tx, host.rx, host.peer_is_host, host.capacity_gbps) == ("ba", "ab", True, 200.0)
    switch_ports = {(lk.a, lk.a_port) for lk in fabric.links if not lk.is_host_link}
    switch_ports |= {(lk.b, lk.b_port) for lk in fabric.links}
    assert set(ends) == switch_ports


def test_tx_side_carries_ecn_and_received_pauses_rx_side_sent_pauses() -> None:
    ends = port_map(tiny_fabric())
    rates = {"tx_bytes": 1e9, "rx_bytes": 2e9, "tx_pkts": 1e6, "rx_pkts": 2e6, "ecn_marked_pkts": 5e4,
             "pfc_rx_pause.3": 7.0, "pfc_tx_pause.3": 9.0, "pfc_tx_pause.4": 1.0,
             "tx_discards": 1.0, "queue_drops": 2.0, "rx_discards": 3.0}
    [tx] = port_directions(ends[("leaf0", "Ethernet0")], "leaf0", "Ethernet0", T, 10.0, rates, use_rx=False)
    assert (tx.direction, tx.side, tx.source) == ("ab", "tx", "leaf0:Ethernet0")
    assert (tx.bytes_per_s, tx.pkts_per_s, tx.ecn_marks_per_s, tx.drops_per_s) == (1e9, 1e6, 5e4, 3.0)
    assert tx.pfc_pauses_per_s == {"3": 7.0}
    tx, rx = port_directions(ends[("leaf0", "Ethernet0")], "leaf0", "Ethernet0", T, 10.0, rates, use_rx=True)
    assert (rx.direction, rx.side, rx.bytes_per_s, rx.ecn_marks_per_s, rx.drops_per_s) == ("ba", "rx", 2e9, None, 3.0)
    assert rx.pfc_pauses_per_s == {"3": 9.0, "4": 1.0}
    # Host-facing ports always give both directions (the host end is never polled).
    both = port_directions(ends[("leaf0", "Ethernet32")], "leaf0", "Ethernet32", T, 10.0, rates, use_rx=False)
    assert [(d.direction, d.side) for d in both] == [("ba", "tx"), ("ab", "rx")]


def test_a_byte_rate_beyond_the_link_is_a_discontinuity_not_a_rate() -> None:
    end = port_map(tiny_fabric())[("leaf0", "Ethernet32")]  # 200 Gbit/s
    [tx, _] = port_directions(end, "leaf0", "Ethernet32", T, 10.0, {"tx_bytes": 40e9, "rx_bytes": 25e9}, False)
    assert tx.bytes_per_s is None  # 320 Gbit/s on a 200 Gbit/s port
    assert _.bytes_per_s == 25e9  # 200 Gbit/s: line rate is plausible
