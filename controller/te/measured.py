"""Switch port counters → measured rates per link direction. Pure: values in, values out.

Every link is full duplex and measured per direction (`ab`: from the link's `a` end to its
`b` end, `ba` the reverse; a host link's `a` is the host port, so its `ab` is host → switch).
A switch port sees both directions of its link: what it transmits leaves the switch, what it
receives enters it. Each direction is best measured at its *transmitter*, where the egress
queue that marks ECN sits and where the pause frames that stop it arrive:

- tx side of port P on switch S (the direction leaving S): bytes `tx_bytes`, packets
  `tx_pkts`, ECN marks `ecn_marked_pkts`, drops `tx_discards` + `queue_drops`, and PFC
  pauses `pfc_rx_pause.<prio>` (pause frames S *received* on P stop S's transmission).
- rx side (the direction entering S): bytes `rx_bytes`, packets `rx_pkts`, drops
  `rx_discards`, PFC pauses `pfc_tx_pause.<prio>` (pause frames S *sent* stop the peer); no
  ECN: the marks were made, if anywhere, in the peer's egress queue.

A switch-to-switch direction is taken from its transmitter's tx side; the receiver's rx side
stands in only while the transmitter is not reporting (`use_rx`). A host link has only its
switch end measured: switch → host from the tx side, host → switch from the rx side.

Worked example (the `tiny` fabric): link `leaf0:Ethernet0--spine0:Ethernet0` has
`a = leaf0`. Port `(leaf0, Ethernet0)` maps to `PortEnd(link, tx="ab", rx="ba")` and
`(spine0, Ethernet0)` to `PortEnd(link, tx="ba", rx="ab")`; host link
`host0:mlx5_0:p0--leaf0:Ethernet32` maps `(leaf0, Ethernet32)` to `tx="ba", rx="ab",
peer_is_host=True`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from controller.domain.fabric import Fabric

DIRECTIONS = ("ab", "ba")
# A rate above this multiple of the link's capacity is not physics but a counter
# discontinuity the width heuristics missed (e.g. counters cleared on the switch).
IMPLAUSIBLE_FACTOR = 1.5


@dataclass(frozen=True, slots=True)
class PortEnd:
    """What one switch port measures: its link, the direction it transmits (`tx`) and the
    one it receives (`rx`), the link's capacity, and whether the far end is a host port."""

    link: str
    tx: str
    rx: str
    capacity_gbps: float
    peer: str
    peer_is_host: bool


@dataclass(frozen=True, slots=True)
class DirectionRates:
    """Rates over one poll interval of one link direction, measured at `source` (`switch:port`)
    on its `side` ("tx" or "rx"). None: the counters did not give that rate."""

    link: str
    direction: str
    t_us: int
    interval_s: float
    source: str
    side: str
    bytes_per_s: float | None = None
    pkts_per_s: float | None = None
    ecn_marks_per_s: float | None = None
    drops_per_s: float | None = None
    pfc_pauses_per_s: Mapping[str, float] = field(default_factory=dict)


def port_map(fabric: Fabric) -> dict[tuple[str, str], PortEnd]:
    """(switch, port) → the link end it is, for every switch port that has a link."""
    switches = {s.name for s in fabric.switches}
    out: dict[tuple[str, str], PortEnd] = {}
    for link in fabric.links:
        if link.a in switches:
            out[(link.a, link.a_port)] = PortEnd(link.name, "ab", "ba", link.capacity_gbps, link.b,
                                                 link.b not in switches)
        if link.b in switches:
            out[(link.b, link.b_port)] = PortEnd(link.name, "ba", "ab", link.capacity_gbps, link.a,
                                                 link.a not in switches)
    return out


def _sum(rates: Mapping[str, float], *names: str) -> float | None:
    got = [rates[n] for n in names if n in rates]
    return sum(got) if got else None


def _pfc(rates: Mapping[str, float], prefix: str) -> dict[str, float]:
    return {name[len(prefix):]: value for name, value in sorted(rates.items()) if name.startswith(prefix)}


def side_rates(end: PortEnd, switch: str, port: str, t_us: int, interval_s: float,
               rates: Mapping[str, float], side: str) -> DirectionRates:
    """The rates one port's counters give for the direction it transmits (`side="tx"`) or
    receives (`side="rx"`); `rates` are per-second counter rates keyed like the flat counters
    (`tx_bytes`, `pfc_rx_pause.3`, ...). Implausible byte rates are dropped (None)."""
    if side == "tx":
        direction, bytes_, pkts = end.tx, rates.get("tx_bytes"), rates.get("tx_pkts")
        ecn, drops = rates.get("ecn_marked_pkts"), _sum(rates, "tx_discards", "queue_drops")
        pfc = _pfc(rates, "pfc_rx_pause.")
    else:
        direction, bytes_, pkts = end.rx, rates.get("rx_bytes"), rates.get("rx_pkts")
        ecn, drops = None, rates.get("rx_discards")
        pfc = _pfc(rates, "pfc_tx_pause.")
    if bytes_ is not None and bytes_ * 8 > end.capacity_gbps * 1e9 * IMPLAUSIBLE_FACTOR:
        bytes_ = None
    return DirectionRates(end.link, direction, t_us, interval_s, f"{switch}:{port}", side,
                          bytes_, pkts, ecn, drops, pfc)


def port_directions(end: PortEnd, switch: str, port: str, t_us: int, interval_s: float,
                    rates: Mapping[str, float], use_rx: bool) -> list[DirectionRates]:
    """The link-direction rates one port sample contributes: always its tx side; its rx side
    when the far end is a host port or `use_rx` (the transmitting switch is not reporting)."""
    out = [side_rates(end, switch, port, t_us, interval_s, rates, "tx")]
    if end.peer_is_host or use_rx:
        out.append(side_rates(end, switch, port, t_us, interval_s, rates, "rx"))
    return out
