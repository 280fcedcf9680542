"""Alarm values: what C4D concludes about a job (API.md, Diagnosis).

Frozen values only; the alarm's id and state (`AlarmState`: open, acknowledged, resolved)
belong to the store, which keys alarms by `incident_key`. No I/O, stdlib only.

A slow link reads::

    Alarm(incident_key="gpt-22b-run7/comm_slow/link:leaf3:Ethernet1--spine1:Ethernet3/1764430012000000",
          kind=AlarmKind.COMM_SLOW, job="gpt-22b-run7", comm="0x7f3a9c01", seq=1042,
          suspects=(Suspect(SuspectKind.LINK, "leaf3:Ethernet1--spine1:Ethernet3"),),
          evidence={"summary": "connection 3->4 at 21% of its peers' median rate over 12 "
                               "collectives", "slow_connections": [[3, 4]]},
          opened_at_us=1764430012000000)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal


class AlarmKind(StrEnum):
    COMM_HANG = "comm_hang"
    NONCOMM_HANG = "noncomm_hang"
    COMM_SLOW = "comm_slow"
    NONCOMM_SLOW = "noncomm_slow"


class AlarmState(StrEnum):
    """Where an alarm stands: `open` (new), `acknowledged` (an operator or scheduler has seen it),
    `resolved` (its evidence is gone, or someone resolved it). Resolved is final."""

    OPEN = "open"
    ACKNOWLEDGED = "acknowledged"
    RESOLVED = "resolved"


class SuspectKind(StrEnum):
    HOST = "host"
    NIC_PORT = "nic_port"
    LINK = "link"
    RANK = "rank"


@dataclass(frozen=True, slots=True, order=True)
class Suspect:
    """A host name, a `host:nic:port` name, a link name or a rank number as a string."""

    kind: SuspectKind
    name: str


@dataclass(frozen=True, slots=True)
class Alarm:
    """One incident. `evidence` holds a human `summary` and the numbers behind it (JSON-able)."""

    incident_key: str
    kind: AlarmKind
    job: str
    comm: str
    seq: int
    suspects: tuple[Suspect, ...]
    evidence: Mapping[str, object]
    opened_at_us: int

    @property
    def first_suspect(self) -> Suspect | None:
        return self.suspects[0] if self.suspects else None


AlarmEventKind = Literal["opened", "resolved"]


@dataclass(frozen=True, slots=True)
class AlarmEvent:
    """An alarm opened or resolved itself at `at_us` (controller clock)."""

    event: AlarmEventKind
    alarm: Alarm
    at_us: int
