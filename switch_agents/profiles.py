"""Vendor OID profiles: which SNMP columns give which counters, as data.

Every profile reads IF-MIB (64-bit octets and unicast packets, 32-bit discards) and adds
its vendor's PFC and ECN tables. Counters are named as in the controller's API (API.md,
`POST /v1/telemetry/switches`): `tx_bytes`, `rx_bytes`, `tx_pkts`, `rx_pkts`, `rx_discards`,
`tx_discards`, `ecn_marked_pkts`, `queue_drops`, and per priority `pfc_rx_pause` (pause
frames received: the peer asks this port to stop sending) and `pfc_tx_pause` (sent).

Index shapes of a column's rows (the OID suffix after the column):
- `if`: `<ifIndex>`
- `if.prio`: `<ifIndex>.<priority 0..7>`
- `if.sum`: `<ifIndex>.<anything>`, summed per interface (e.g. per egress queue)

OIDs and semantics are from docs/research/telemetry.md §3 (with their sources there). What
each profile cannot give is said in its description: SONiC exports no ECN counter over SNMP
(COUNTERS_DB only), Mellanox's QoS MIB has WRED drops but no ECN marks, and IEEE8021-PFC-MIB
counts pauses per port, not per priority — this agent reports those under the target's first
`pfc_priorities` entry (default priority 3, RoCE's usual lossless class).
"""

from __future__ import annotations

from dataclasses import dataclass

SYS_UPTIME = "1.3.6.1.2.1.1.3.0"
IF_NAME = "1.3.6.1.2.1.31.1.1.1.1"
IF_DESCR = "1.3.6.1.2.1.2.2.1.2"
# ifOperStatus (IF-MIB, INTEGER): walked on every target whatever its profile, reported per port
# as `oper_status` (FORMAT.md): a port that went down is known to the controller at the next poll.
IF_OPER_STATUS = "1.3.6.1.2.1.2.2.1.8"
OPER_STATUS_NAMES = {1: "up", 2: "down", 3: "testing", 4: "unknown", 5: "dormant", 6: "notPresent",
                     7: "lowerLayerDown"}

# The pass_persist extension shipped with the agent (switch_agents/qdisc_pass_persist.py)
# serves its table under net-snmp's "playpen" subtree, meant for local extensions.
C4_QDISC_BASE = "1.3.6.1.4.1.8072.9999.9999.13"


@dataclass(frozen=True, slots=True)
class Column:
    oid: str
    counter: str
    index: str = "if"  # "if", "if.prio" or "if.sum"


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    description: str
    columns: tuple[Column, ...]
    default_ports: tuple[str, ...] = ("*",)
    default_exclude: tuple[str, ...] = ()
    per_port_pfc: bool = False  # PFC counted per port: reported under one priority


IF_MIB = (
    Column("1.3.6.1.2.1.31.1.1.1.6", "rx_bytes"),    # ifHCInOctets, Counter64
    Column("1.3.6.1.2.1.31.1.1.1.10", "tx_bytes"),   # ifHCOutOctets
    Column("1.3.6.1.2.1.31.1.1.1.7", "rx_pkts"),     # ifHCInUcastPkts
    Column("1.3.6.1.2.1.31.1.1.1.11", "tx_pkts"),    # ifHCOutUcastPkts
    Column("1.3.6.1.2.1.2.2.1.13", "rx_discards"),   # ifInDiscards, Counter32
    Column("1.3.6.1.2.1.2.2.1.19", "tx_discards"),   # ifOutDiscards, Counter32
)

CISCO_PFC_EXT = (  # CISCO-PFC-EXT-MIB cpfcIfPriorityTable (1.3.6.1.4.1.9.9.813.1.2.1), Counter64
    Column("1.3.6.1.4.1.9.9.813.1.2.1.2", "pfc_tx_pause", "if.prio"),  # cpfcIfPriorityRequests: sent
    Column("1.3.6.1.4.1.9.9.813.1.2.1.3", "pfc_rx_pause", "if.prio"),  # cpfcIfPriorityIndications: received
)

PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("ifmib", "IF-MIB only: octets, unicast packets, discards. No PFC, no ECN.", IF_MIB),
    Profile("sonic", "SONiC's snmp agent: IF-MIB + CISCO-PFC-EXT-MIB per priority (per-interface "
                     "cpfcIf* columns are skipped: SONiC fills them with priority 3 only). No ECN over "
                     "SNMP (SONiC keeps ECN marks in COUNTERS_DB).",
            IF_MIB + CISCO_PFC_EXT, default_ports=("Ethernet*",)),
    Profile("nexus", "Cisco Nexus (NX-OS): IF-MIB + CISCO-PFC-EXT-MIB per priority. No ECN over SNMP.",
            IF_MIB + CISCO_PFC_EXT, default_ports=("Eth*",)),
    Profile("arista", "Arista EOS: IF-MIB + ARISTA-PFC-MIB per priority + ARISTA-QOS-MIB ECN-marked "
                      "packets summed over egress queues.",
            (*IF_MIB,
                Column("1.3.6.1.4.1.30065.3.11.1.1.1.3", "pfc_tx_pause", "if.prio"),  # aristaPfcPriorityRequests
                Column("1.3.6.1.4.1.30065.3.11.1.1.1.4", "pfc_rx_pause", "if.prio"),  # aristaPfcPriorityIndications
                Column("1.3.6.1.4.1.30065.3.13.1.9.1.4", "ecn_marked_pkts", "if.sum"),  # aristaEcnQueuePktsMarked
            ), default_ports=("Ethernet*",)),
    Profile("mellanox", "NVIDIA/Mellanox Onyx: IF-MIB + MELLANOX-QOS-MIB PFC per priority and WRED "
                        "discards summed over traffic classes (as queue_drops). No ECN counter in the MIB.",
            (*IF_MIB,
                Column("1.3.6.1.4.1.33049.15.1.2.1.3", "pfc_rx_pause", "if.prio"),  # mellanoxQoSPFCRxPausePkts
                Column("1.3.6.1.4.1.33049.15.1.2.1.5", "pfc_tx_pause", "if.prio"),  # mellanoxQoSPFCTxPausePkts
                Column("1.3.6.1.4.1.33049.15.1.4.1.9", "queue_drops", "if.sum"),    # TC table WRED discards
            ), default_ports=("Eth*",)),
    Profile("ieee8021", "IEEE8021-PFC-MIB: pause frames per port (Counter32), reported under the "
                        "target's first pfc_priorities entry (default 3). No ECN.",
            (*IF_MIB,
                Column("1.3.111.2.802.1.1.21.1.1.1.2", "pfc_tx_pause"),  # ieee8021PfcRequests
                Column("1.3.111.2.802.1.1.21.1.1.1.3", "pfc_rx_pause"),  # ieee8021PfcIndications
            ), per_port_pfc=True),
    Profile("linux", "Debian's snmpd on a Linux switch (the testbed): IF-MIB + c4's pass_persist "
                     "extension (c4-qdisc-pass-persist) with each interface's ECN marks and egress "
                     "queue drops (its qdiscs, and nftables rules that set CE), and its tx octets and "
                     "packets read fresh beside them.",
            # tx octets and packets from the extension, read at the same moment as the marks
            # (snmpd's IF-MIB is a few seconds stale: qdisc_pass_persist's docstring).
            (*(c for c in IF_MIB if c.counter not in ("tx_bytes", "tx_pkts")),
             Column(f"{C4_QDISC_BASE}.1.1.6", "tx_bytes"), Column(f"{C4_QDISC_BASE}.1.1.7", "tx_pkts"),
             Column(f"{C4_QDISC_BASE}.1.1.3", "ecn_marked_pkts"), Column(f"{C4_QDISC_BASE}.1.1.4", "queue_drops")),
            default_exclude=("lo",)),
)}

DEFAULT_PFC_PRIORITY = 3
