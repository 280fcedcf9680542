"""What the controller knows of each host's agent: its clock offset and when it was last heard.

Hosts' clocks may be seconds apart; records are stamped on their own host's clock. A stamp
can only have been taken before the record arrived, so `arrival - t_end` over a host's recent
finished records is at least its clock's offset, and its minimum is the offset plus the
shortest delivery delay (milliseconds once a few records came in). In-flight re-sends are left
out: their newest stamp is the last progress, which for a hung rank is arbitrarily old, so
they would drag the estimate (and a hang's stall with it) forward. The hang detector turns a
stalled record's last activity into controller time with it, so a skewed host neither hangs
early nor late. The minimum is kept over two epochs of `EPOCH_US`, so a host whose clock is
stepped is followed within two epochs.

A host is heard whenever its agent posts, records or an empty batch (a heartbeat); one silent
for the telemetry-gap time is in a gap. Pure values; the caller passes arrival times.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.domain.telemetry import CollectiveRecord

EPOCH_US = 30_000_000




@dataclass(slots=True)
class _Offset:
    epoch: int
    current: int
    previous: int | None = None

    def best(self) -> int:
        return self.current if self.previous is None else min(self.current, self.previous)


@dataclass(slots=True)
class HostClocks:
    offsets: dict[str, _Offset] = field(default_factory=dict)
    heard_us: dict[str, int] = field(default_factory=dict)
    first_heard_us: dict[str, int] = field(default_factory=dict)

    def heard(self, host: str, arrival_us: int) -> None:
        if arrival_us > self.heard_us.get(host, -1):
            self.heard_us[host] = arrival_us
        self.first_heard_us.setdefault(host, arrival_us)

    def observe(self, record: CollectiveRecord, arrival_us: int) -> None:
        self.heard(record.host, arrival_us)
        if record.t_end_us is None:
            return
        delta = arrival_us - record.t_end_us
        epoch = arrival_us // EPOCH_US
        got = self.offsets.get(record.host)
        if got is None:
            self.offsets[record.host] = _Offset(epoch, delta)
        elif epoch != got.epoch:
            got.previous = got.current if epoch == got.epoch + 1 else None
            got.epoch, got.current = epoch, delta
        elif delta < got.current:
            got.current = delta

    def to_controller_us(self, host: str, host_us: int) -> int:
        """A host-clock time in controller time (unchanged while the host is unknown)."""
        got = self.offsets.get(host)
        return host_us if got is None else host_us + got.best()

    def silent_since_us(self, host: str, now_us: int, gap_us: int) -> int | None:
        """When the host was last heard, if that is `gap_us` or longer ago (a telemetry
        gap); None while it reports, or if it never reported."""
        last = self.heard_us.get(host)
        if last is None or now_us - last < gap_us:
            return None
        return last

    def hosts(self) -> list[str]:
        return sorted(self.heard_us)
