"""From one poll's SNMP values to the sample the controller gets. Pure: values in, values out.

Three steps:
1. `select_ports`: interface index → the fabric's port name, for the interfaces the target
   reports (include/exclude globs on ifName, then `port_names` renames).
2. `port_counters`: the profile's columns → counters per port, keyed as in the API
   (`tx_bytes`, `pfc_rx_pause.3`, ...), each with its width (32 or 64 bits).
3. `CounterTracker.update`: Counter32 values become 64-bit running totals (one wrap per poll
   is recovered exactly: `+ (new - old) mod 2**32`), and a restart of the switch — sysUpTime
   went back — starts a new `counter_epoch`, so the controller computes no rate across it.

The result, `sample_doc`, is one item of `POST /v1/telemetry/switches` (FORMAT.md)::

    {"switch": "leaf0", "t_us": 1764430000000000, "counter_epoch": "7f3a9c01.0",
     "ports": [{"port": "Ethernet0", "tx_bytes": 123, "rx_bytes": 456, "tx_pkts": 7,
                "ecn_marked_pkts": 0, "pfc_rx_pause": {"3": 0}, "pfc_tx_pause": {"3": 0}}]}
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from switch_agents.profiles import OPER_STATUS_NAMES, Column, Profile
from switch_agents.snmp import Oid, Value, oid

WRAP32 = 1 << 32
# (value, width in bits) per counter key, per port name
PortCounters = dict[str, dict[str, tuple[int, int]]]


def interface_names(values: Mapping[Oid, Value], column: str) -> dict[int, str]:
    """ifIndex → name from a walk of ifName (or ifDescr)."""
    col = oid(column)
    n = len(col)
    return {o[n]: str(v.value) for o, v in values.items() if o[:n] == col and len(o) == n + 1}


def select_ports(names: Mapping[int, str], include: Sequence[str], exclude: Sequence[str],
                 renames: Mapping[str, str]) -> dict[int, str]:
    """ifIndex → reported port name, for interfaces matching an include glob and no exclude
    glob (globs match the interface's own name, before renaming)."""
    out = {}
    for index, name in names.items():
        if any(fnmatchcase(name, g) for g in include) and not any(fnmatchcase(name, g) for g in exclude):
            out[index] = renames.get(name, name)
    return out


def port_counters(profile: Profile, values: Mapping[Oid, Value], ports: Mapping[int, str],
                  pfc_priorities: Sequence[int] | None, per_port_priority: int) -> PortCounters:
    """Counters per selected port from the values of the profile's columns."""
    columns: dict[Oid, Column] = {oid(c.oid): c for c in profile.columns}
    lengths = sorted({len(c) for c in columns}, reverse=True)
    wanted = None if pfc_priorities is None else {str(p) for p in pfc_priorities}
    out: PortCounters = {}
    for o, v in values.items():
        if v.kind not in ("counter32", "counter64"):
            continue
        column = None
        for n in lengths:
            column = columns.get(o[:n])
            if column is not None:
                suffix = o[n:]
                break
        if column is None or not suffix:
            continue
        port = ports.get(suffix[0])
        if port is None:
            continue
        width = 32 if v.kind == "counter32" else 64
        value = int(v.value)
        if column.index == "if.prio":
            if len(suffix) != 2 or not 0 <= suffix[1] <= 7:
                continue
            key = f"{column.counter}.{suffix[1]}"
            if wanted is not None and str(suffix[1]) not in wanted:
                continue
        elif column.index == "if.sum":
            key = column.counter
            counters = out.setdefault(port, {})
            old = counters.get(key)
            # A sum of 64-bit members stays 64-bit; of 32-bit ones it can no longer be
            # unwrapped, so it is reported as 64-bit (the controller sees a reset, not a wrap).
            counters[key] = ((old[0] if old else 0) + value, 64)
            continue
        elif len(suffix) != 1:
            continue
        elif column.counter.startswith("pfc_"):
            key = f"{column.counter}.{per_port_priority}"
        else:
            key = column.counter
        out.setdefault(port, {})[key] = (value, width)
    return out


def oper_states(values: Mapping[Oid, Value], column: str, ports: Mapping[int, str]) -> dict[str, str]:
    """Port name → IF-MIB ifOperStatus name ("up", "down", "lowerLayerDown", ...) from a walk of
    the column; ports the switch gives no (or an out-of-range) value for are left out."""
    col = oid(column)
    n = len(col)
    out = {}
    for o, v in values.items():
        if o[:n] != col or len(o) != n + 1 or v.kind != "integer":
            continue
        port = ports.get(o[n])
        name = OPER_STATUS_NAMES.get(int(v.value))
        if port is not None and name is not None:
            out[port] = name
    return out


@dataclass(frozen=True, slots=True)
class Tracked:
    ports: dict[str, dict[str, int]]
    epoch: str
    reset: bool
    wraps: int


class CounterTracker:
    """Per target: Counter32 → 64-bit running totals, and restarts → new epochs.

    The epoch is `<run_id>.<restarts seen>`; `run_id` is new each time the agent starts, since
    its running totals restart with it."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.restarts = 0
        self._uptime: int | None = None
        self._c32: dict[tuple[str, str], tuple[int, int]] = {}

    @property
    def epoch(self) -> str:
        return f"{self.run_id}.{self.restarts}"

    def update(self, uptime_ticks: int | None, counters: PortCounters) -> Tracked:
        reset = uptime_ticks is not None and self._uptime is not None and uptime_ticks < self._uptime
        if reset:
            self.restarts += 1
            self._c32.clear()
        if uptime_ticks is not None:
            self._uptime = uptime_ticks
        wraps = 0
        out: dict[str, dict[str, int]] = {}
        for port, keyed in counters.items():
            row = out[port] = {}
            for key, (value, width) in keyed.items():
                if width != 32:
                    row[key] = value
                    continue
                prev = self._c32.get((port, key))
                if prev is None:
                    total = value
                else:
                    raw, total = prev
                    if value < raw:
                        wraps += 1
                    total += (value - raw) % WRAP32
                self._c32[(port, key)] = (value, total)
                row[key] = total
        return Tracked(out, self.epoch, reset, wraps)


def sample_doc(switch: str, t_us: int, epoch: str, ports: Mapping[str, Mapping[str, int]],
               oper: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One `samples[]` item of `POST /v1/telemetry/switches`; `oper`: ifOperStatus per port."""
    items = []
    for name in sorted(set(ports) | set(oper or {})):
        doc: dict[str, Any] = {"port": name}
        if oper and name in oper:
            doc["oper_status"] = oper[name]
        pfc: dict[str, dict[str, int]] = {}
        for key, value in sorted(ports.get(name, {}).items()):
            if key.startswith("pfc_"):
                counter, prio = key.split(".", 1)
                pfc.setdefault(counter, {})[prio] = value
            else:
                doc[key] = value
        doc.update(pfc)
        items.append(doc)
    return {"switch": switch, "t_us": t_us, "counter_epoch": epoch, "ports": items}


# What makes a port's latest interval look like lost capacity to the agent (the re-poll
# trigger, `AgentConfig.repoll_after_s`): deliberately looser than any controller's detector
# (its lost-capacity entry needs an enter threshold, 2-5 % of packets marked or 100 pauses/s,
# and a 10 % fall), since a false trigger costs one extra poll of one target and a missed one
# costs a whole interval.
REPOLL_FALL = 0.1
REPOLL_ECN_FRACTION = 0.005
REPOLL_PFC_PER_S = 10.0


def interval_rates(before: tuple[int, Mapping[str, Mapping[str, int]]],
                   after: tuple[int, Mapping[str, Mapping[str, int]]]) -> dict[str, dict[str, float]]:
    """Per port, per counter both samples carry, the rate per second between two `(t_us,
    running totals)` of one counter epoch; {} when `after` is not later."""
    dt = (after[0] - before[0]) / 1e6
    if dt <= 0:
        return {}
    out: dict[str, dict[str, float]] = {}
    for port, now in after[1].items():
        old = before[1].get(port)
        if old is None:
            continue
        out[port] = {k: (v - old[k]) / dt for k, v in now.items() if k in old and v >= old[k]}
    return out


def lost_capacity_ports(previous: Mapping[str, Mapping[str, float]] | None,
                        latest: Mapping[str, Mapping[str, float]], still: Collection[str] = ()) -> list[str]:
    """Ports whose latest interval transmitted `REPOLL_FALL` less than `previous` (per port, the
    most of the last few intervals: the detector compares with a smoothed rate, which a
    first slow interval without a readable mark count may already have pulled down) while marking (`REPOLL_ECN_FRACTION` of its packets) or pausing (`REPOLL_PFC_PER_S`): what
    a link that lost capacity shows, and also traffic that ended inside the interval with a
    marking tail, which only a later reading can tell apart (the controller's detector waits
    for one: `te.congestion`, 5).

    A port in `still` (a suspect in the sample before) stays one on the fall alone: the
    detector decides on the marks of the windows after the first *added up*, and one short
    window of a link busy at its new rate can carry none (a rate-based marker marks when the
    queue grows, not while it stands: on the testbed 0.4 s re-poll windows of a throttled link
    read 0 marks between 1.6 s windows marking 6-16 %, and the re-polls stopped there, leaving
    the confirmation to the next regular poll)."""
    out = []
    for port, r in sorted(latest.items()):
        before = (previous or {}).get(port, {})
        rate, was = r.get("tx_bytes"), before.get("tx_bytes")
        if rate is None or was is None or rate >= (1 - REPOLL_FALL) * was:
            continue
        pkts, marks = r.get("tx_pkts"), r.get("ecn_marked_pkts")
        marking = bool(pkts) and marks is not None and marks >= REPOLL_ECN_FRACTION * (pkts or 0.0)
        pausing = max((v for k, v in r.items() if k.startswith("pfc_")), default=0.0) >= REPOLL_PFC_PER_S
        if marking or pausing or port in still:
            out.append(port)
    return out
