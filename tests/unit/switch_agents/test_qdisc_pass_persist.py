"""The pass_persist extension's parsing of `tc` and `nft` JSON and its snmpd protocol.
(With real snmpd, a real qdisc and real nftables marks: tests/switch_agents/test_snmpd_netns.py.)"""

from __future__ import annotations

import io
import json

from switch_agents import qdisc_pass_persist as ext
from switch_agents.profiles import C4_QDISC_BASE

TC = json.dumps([
    {"kind": "htb", "handle": "1:", "dev": "swp1", "root": True, "bytes": 9000, "packets": 6, "drops": 7,
     "overlimits": 3, "requeues": 0, "backlog": 1500, "qlen": 1, "options": {"r2q": 10, "default": "0x1"}},
    {"kind": "red", "handle": "10:", "parent": "1:1", "dev": "swp1", "drops": 4, "backlog": 0,
     "options": {"ecn": True}, "marked": 11, "early": 4, "pdrop": 0, "other": 0},
    {"kind": "fq_codel", "handle": "0:", "dev": "swp2", "root": True, "drops": 1, "backlog": 0,
     "options": {"ecn": True}, "ecn_mark": 5, "new_flows_len": 0},
    {"kind": "cake", "handle": "8001:", "dev": "swp3", "root": True, "drops": 0, "backlog": 0,
     "tins": [{"ecn_mark": 2}, {"ecn_mark": 3}]},
    {"kind": "noqueue", "handle": "0:", "dev": "lo", "root": True, "drops": 0, "backlog": 0},
])
NFT = json.dumps({"nftables": [
    {"metainfo": {"version": "1.0.6"}},
    {"rule": {"family": "inet", "table": "c4", "chain": "post", "handle": 2, "expr": [
        {"match": {"op": "==", "left": {"meta": {"key": "oifname"}}, "right": "swp1"}},
        {"limit": {"rate": 1, "per": "second", "inv": True}},
        {"mangle": {"key": {"payload": {"protocol": "ip", "field": "ecn"}}, "value": "ce"}},
        {"counter": {"packets": 100, "bytes": 150000}}]}},
    {"rule": {"family": "inet", "table": "c4", "chain": "post", "handle": 3, "expr": [
        {"counter": {"packets": 999, "bytes": 1}},  # counts before the mangle: not marks
        {"match": {"op": "==", "left": {"meta": {"key": "oifname"}}, "right": {"set": ["swp2", "swp3"]}}},
        {"mangle": {"key": {"payload": {"protocol": "ip6", "field": "ecn"}}, "value": "ce"}},
        {"counter": {"packets": 6, "bytes": 1}}]}},
    {"counter": {"family": "ip", "name": "ecn_swp3", "table": "tb", "handle": 2, "packets": 40, "bytes": 1}},
    {"rule": {"family": "ip", "table": "tb", "chain": "egress", "handle": 5, "expr": [  # the testbed's kind
        {"match": {"op": "==", "left": {"meta": {"key": "oifname"}}, "right": "swp3"}},
        {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "ecn"}}, "right": {"set": ["ect1", "ect0"]}}},
        {"limit": {"rate": 100, "burst": 16, "per": "second", "inv": True}},
        {"mangle": {"key": {"payload": {"protocol": "ip", "field": "ecn"}}, "value": "ce"}},
        {"counter": "ecn_swp3"}]}},
    {"rule": {"family": "inet", "table": "c4", "chain": "post", "handle": 4, "expr": [
        {"match": {"op": "==", "left": {"meta": {"key": "oifname"}}, "right": "swp1"}},
        {"mangle": {"key": {"payload": {"protocol": "ip", "field": "dscp"}}, "value": "cs1"}},
        {"counter": {"packets": 5000, "bytes": 1}}]}},
]})
INDEX = {"lo": 1, "swp1": 5, "swp2": 6, "swp3": 7}
LINK = json.dumps([
    {"ifindex": 5, "ifname": "swp1", "stats64": {"rx": {"bytes": 1, "packets": 1},
                                                  "tx": {"bytes": 3_000_000, "packets": 2000}}},
    {"ifindex": 7, "ifname": "swp3", "stats64": {"rx": {"bytes": 1, "packets": 1}, "tx": {"bytes": 15, "packets": 1}}},
])


def test_marks_drops_and_backlog_per_interface() -> None:
    tc = ext.parse_tc(TC)
    assert tc["swp1"] == {"kind": "htb", "marked": 11, "drops": 7, "backlog": 1500}
    assert tc["swp2"]["marked"] == 5 and tc["swp3"]["marked"] == 5
    assert ext.parse_nft(NFT) == {"swp1": 100, "swp2": 6, "swp3": 46}


def test_table_rows_and_the_pass_persist_protocol() -> None:
    rows = ext.build_table(ext.parse_tc(TC), ext.parse_nft(NFT), INDEX.get, ext.parse_link(LINK))
    base = "." + C4_QDISC_BASE
    script = "PING\nget\n{b}.1.1.3.5\nget\n{b}.1.1.3.99\ngetnext\n{b}\ngetnext\n{b}.1.1.7.7\nset\n{b}.1.1.1.5\nstring x\n"
    out = io.StringIO()
    ext.serve(io.StringIO(script.format(b=base)), out, lambda: rows, cache_s=1.0)
    assert out.getvalue().splitlines() == [
        "PONG",
        f"{base}.1.1.3.5", "counter64", "111",  # red's 11 marks + the nftables rule's 100
        "NONE",
        f"{base}.1.1.1.1", "string", "lo",  # the first row
        "NONE",  # past the last row
        "not-writable",
    ]
    by_oid = {r[0]: r for r in rows}
    assert by_oid[(*ext.ENTRY, 4, 5)][2] == "7" and by_oid[(*ext.ENTRY, 5, 5)] == ((*ext.ENTRY, 5, 5), "gauge", "1500")
    assert by_oid[(*ext.ENTRY, 2, 1)][2] == "noqueue"
    # tx octets and packets, fresh beside the marks (the linux profile's tx_bytes and tx_pkts)
    assert by_oid[(*ext.ENTRY, 6, 5)] == ((*ext.ENTRY, 6, 5), "counter64", "3000000")
    assert by_oid[(*ext.ENTRY, 7, 5)][2] == "2000" and by_oid[(*ext.ENTRY, 7, 7)][2] == "1"
    assert (*ext.ENTRY, 6, 6) not in by_oid  # no link statistics for swp2: no row, not a zero


def test_the_linux_profile_reads_tx_counters_from_the_extension_not_snmpds_cached_if_mib() -> None:
    from switch_agents.profiles import PROFILES

    cols = {c.counter: c.oid for c in PROFILES["linux"].columns}
    assert cols["tx_bytes"] == f"{C4_QDISC_BASE}.1.1.6" and cols["tx_pkts"] == f"{C4_QDISC_BASE}.1.1.7"
    assert cols["ecn_marked_pkts"] == f"{C4_QDISC_BASE}.1.1.3"
    assert len([c for c in PROFILES["linux"].columns if c.counter == "tx_pkts"]) == 1


def test_the_table_is_read_at_most_once_per_cache_period() -> None:
    reads = []
    now = [0.0]

    def table() -> list[ext.Row]:
        reads.append(now[0])
        return []

    script = "getnext\n.1\n" * 3
    ext.serve(io.StringIO(script), io.StringIO(), table, cache_s=1.0, clock=lambda: now[0])
    assert reads == [0.0]
    now[0] = 2.0
    ext.serve(io.StringIO(script), io.StringIO(), table, cache_s=1.0, clock=lambda: now[0])
    assert reads == [0.0, 2.0]
