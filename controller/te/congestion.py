"""The congestion detector: smoothed ECN and PFC signals per link direction, with hysteresis.

Pure (values and `now` in, values out), so the rebalancer that acts on it lives beside it in
`te` (which may not import `diagnosis`) and dry runs need no switch. Per link direction:

1. **EWMA** of every rate (bytes, packets, ECN marks, drops, PFC pauses per priority), with a
   time constant rather than a per-sample weight: `alpha = 1 - exp(-interval_s / tau)`, so the
   smoothing means the same whether switches are polled every second or every ten.
2. **Signals**: the ECN-marked fraction is `EWMA(marks) / EWMA(packets)` (a ratio of
   averages: a mostly idle interval does not count as much as a busy one) and is only read
   when the direction moves at least `min_pkts_per_s`; the PFC signal is the largest EWMA of
   pause frames per second over the priorities.
3. **Enter and leave thresholds** (hysteresis): a direction is *hot* when a signal is at or
   above its enter threshold, *calm* when every signal is at or below its leave threshold;
   between the two, nothing changes.
4. **Persistence**: `enter_samples` hot samples in a row enter congestion; `leave_samples`
   calm samples in a row leave it, and not before `min_congested_s` after entering. Both read
   the smoothed signals, so load that alternates faster than the polls counts by its average,
   and a single burst enters only if it is strong enough for its echo in the average to stay
   hot for `enter_samples` samples (at the defaults, 20 % or more of one interval's packets marked).
5. **Lost capacity enters on a first sample and the windows after it**: a sample whose own
   (raw) signals are at or above an enter threshold while its rate is under
   `fast_enter_fraction` of the link's capacity and under `1 - fast_enter_fall` of the smoothed
   rate before it (the link delivers less than it did, with a queue: a throttled port, a bad
   optic), or with the smoothed rate under that share too and not rising (slow for a while: a
   link degraded before its samples began shows no fall), then the samples after it, enter
   without waiting for the average or `enter_samples` once those samples span
   `fast_confirm_span_s` and together are still at an enter threshold under
   `fast_enter_fraction` of capacity. One sample cannot tell lost capacity from traffic that
   ended inside the interval (a job reaching a checkpoint: the interval's rate falls, its tail
   incast marks): the windows after it can (review: one such sample cut a healthy link's
   weights for five minutes). Load rising onto a link never looks like this (its rate rises),
   a slowed collective's healthy links carry less but have no queue. The confirming samples
   need not be whole poll intervals: a switch agent may poll a target again soon after a sample
   that looks like lost capacity (`c4-switch-agent`'s `repoll_after_s`, twice 0.35 s apart on
   the testbed). **Why a span, and why each window must stay under the share**: a link that
   lost capacity, with a standing queue, is busy at its new rate the whole time, so every
   window after the first shows it under `fast_enter_fraction` of capacity. A healthy link
   whose sender pauses (a compute gap between steps) and then comes back at line rate shows a
   window under half only where the pause covers more than half of it, and the restart's
   incast marks it: one 0.35 s re-poll window after a 0.25 s pause confirmed a healthy link as
   degraded (the known defect of the j13d re-poll). So any window of at least
   `fast_confirm_min_s` carrying `fast_enter_fraction` of the capacity or more cancels at once
   (in it the link carried that much), and the windows must span `fast_confirm_span_s`: pauses
   after the first sample keep the span's average under half only if together they are over
   half the span (with the sender at line rate otherwise; a slower sender lowers that bound).
   At 0.7 s one pause up to 0.35 s (the 0.2-0.35 s gaps the review named) cannot confirm; a
   longer one can, and so can many short ones adding up to more (below). Until the windows
   span both `fast_confirm_span_s` and 3/4 of the first sample's interval they may only
   confirm, after that they cancel (a packet-counting marker can leave a throttled link's
   0.35 s window unmarked). A window shorter than `fast_confirm_min_s` only adds to the sums:
   it neither confirms nor cancels and does not count in the span (it could end while the
   queue that ended traffic left behind still drains and marks; review: one at line rate
   completed the span and confirmed in the very window that showed the capacity there). A
   first sample neither confirmed nor cancelled `PENDING_INTERVALS` (3) times the longest of
   `fast_confirm_span_s`, its own interval and the window now arriving after it expires, and
   that window is judged as a first one itself: its windows stopped coming (a direction's
   samples missing, an agent restarted: before, the first 1 s window of its new run confirmed
   a sample 10 s old), or only windows too short to decide came. A long window that follows
   the first without a gap (a poll that overran) still decides: it is a measurement of its
   whole span.
   **Known limit: a sender busy under half the time.** Per-interval counters (bytes,
   packets, marks, pauses) cannot tell a healthy link whose traffic is on at line rate less
   than `fast_enter_fraction` of the time (on/off faster than the windows: a collective whose
   communication takes under half of each step, each burst's queue marking) from a link that
   lost capacity and is busy all the time at that share: same bytes, same marks. Such a
   healthy link is confirmed as having lost capacity (from its first marking sample: its
   smoothed rate is under half and not rising), and the rebalancer judges it degraded and
   solves its weights with what it delivers as its capacity, until the detector leaves it
   (`tests/unit/te/test_congestion.py` pins this: 40 % on is confirmed, 60 % is not). Telling
   them apart needs what the counters do not carry: the queue's backlog over time (the qdisc
   has it; not posted) or rates sampled faster than the bursts.
   Testbed (1 s polls, tau 2 s, a spine link throttled to a quarter): the first whole
   throttled interval marked 8.5 %, its smoothed fraction read 1.8 %, and the smoothed rule
   entered 2 polls later (the rebalancer's weights 3.6 s after the throttle); entering on the
   first lost-capacity sample they came at 1.5 s, on the next regular sample at 2.3-2.5 s, on
   one re-poll's window 0.9-2.0 s (bench/README.md, 2026-12-02 evening). Needs the capacity
   (`observe`'s `capacity_bytes_per_s`); without it, only the smoothed rule. The same tracking
   runs on a direction already congested (a link marking at line rate when it lost capacity):
   `CongestedDirection.lost_capacity`, on which the rebalancer judges a newly degraded link,
   and the ingest wakes the rebalancer when it is confirmed. Once confirmed it stays so until
   `leave_samples` samples in a row (of at least `fast_confirm_min_s`) no longer show it, as
   congestion itself leaves slowly: the rebalancer's own answer leaves a slow link quiet.
6. **Staleness**: a congested direction with no sample for `stale_s` leaves (reason "no
   samples"), so a dead switch agent does not pin flows away forever.
7. **Per-flow hold-down** (`HoldDowns`): the rebalancer records each flow it moves and does not
   move it again before `hold_down_s`, whatever the detector says meanwhile.

Defaults and their reasons (also in the README, Decisions):
- `ewma_tau_s = 15`: with the default 10 s poll the first congested sample already weighs
  49 %, so strong congestion (10.3 % of packets marked or more) enters after 2 samples — inside the
  "new weights within 2 poll intervals" target — while one odd interval is damped by half.
- `ecn_enter_fraction = 0.05`, `ecn_leave_fraction = 0.01`: DCQCN-style marking (RED between
  Kmin and Kmax) marks a few percent of packets only when the queue sits above Kmin; 5 %
  sustained means a standing queue. 1 % to leave leaves a 5x gap, so noise around one
  threshold cannot toggle the state (research/telemetry.md §5.2 proposes the same pair).
- `min_pkts_per_s = 1000`: below that, one marked packet is a percent; fractions of a few
  packets are noise, and a direction that carries so little cannot be worth relieving.
- `pfc_enter_per_s = 100`, `pfc_leave_per_s = 10`: a few pause frames per second are normal
  incast at collective starts; at 100 frames/s with maximal quanta a 100G port is paused
  about 3 % of the time, a loss RoCE throughput shows. Operators treat sustained PFC as a
  warning light, not a rate to tolerate.
- `enter_samples = 2`: one sample can be a burst that straddles a poll; two is the most the
  "within 2 poll intervals" target allows.
- `leave_samples = 5`, `min_congested_s = 60`: leaving is cheap to delay (flows stay where
  they were moved) and expensive to get wrong (flows moved back into the hot spot), so leave
  slowly: at least a minute and five calm samples.
- `fast_confirm_min_s = 0.2`: a confirming sample shorter than that could end while the queue
  that ended traffic left behind still drains and marks (milliseconds at line rate, tens of
  them at a testbed's 12 Mbit/s); 0.2 s is an order of magnitude over both, and under the
  0.35 s re-poll the testbed's agents use (its snmpd extension caches readings 0.15 s).
- `fast_confirm_span_s = 0.7`: twice the longest single sender pause it rules out (0.35 s, the
  top of the compute gaps the review named); two 0.35 s re-polls bring it 0.7 s after the first
  sample, 0.3 s before the next regular 1 s poll (at 10 s polls the next poll spans it anyway).
  The setting refuses values over 60 s, infinite or NaN (`controller.settings`).
- `stale_s = 60`: six default poll intervals without a sample.
- `hold_down_s = 300`: a moved flow stays put for five minutes — longer than the minute an
  oscillating load needs to swing back, so an oscillation cannot drag flows back and forth
  (route-flap dampening uses minutes for the same reason).

Worked example (tau 15 s, 10 s samples, alpha 0.49; steady packets, so the fraction is the
marks' EWMA over the packet rate): 20 % of packets marked in the intervals ending at t = 10,
20 and 30 s, none after. Smoothed fraction: 9.7 %, 14.7 % (second hot sample: entered at
t = 20 s), 17.3 %, 8.9 %, 4.6 %, 2.3 %, 1.2 %, 0.6 % (first calm sample, t = 80 s), ... and
left at t = 120 s, the fifth calm sample, 100 s after entering. `tests/unit/te/test_congestion.py`
runs this example.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from controller.te.measured import DirectionRates

ENTERED = "entered"
LEFT = "left"
# A lost-capacity sample not confirmed or cancelled this long after it, in multiples of the
# longest of `fast_confirm_span_s`, its own interval (about a poll interval) and the window
# arriving, expires: the windows that decide follow it within an interval or two, gapless
# (module docstring, 5).
PENDING_INTERVALS = 3.0


@dataclass(frozen=True, slots=True)
class CongestionConfig:
    """Thresholds and time constants; every field is a `C4_CONGESTION_*` setting."""

    ewma_tau_s: float = 15.0
    ecn_enter_fraction: float = 0.05
    ecn_leave_fraction: float = 0.01
    min_pkts_per_s: float = 1000.0
    pfc_enter_per_s: float = 100.0
    pfc_leave_per_s: float = 10.0
    enter_samples: int = 2
    leave_samples: int = 5
    min_congested_s: float = 60.0
    stale_s: float = 60.0
    hold_down_s: float = 300.0
    fast_enter_fraction: float = 0.5  # 0: off
    fast_enter_fall: float = 0.1
    fast_confirm_min_s: float = 0.2
    fast_confirm_span_s: float = 0.7


@dataclass(frozen=True, slots=True)
class DirectionState:
    """One link direction as the detector knows it after its latest sample (`t_us`): the
    smoothed rates, whether it is congested and since when, and the length of the current run
    of samples pointing to the other state."""

    link: str
    direction: str
    t_us: int
    source: str
    bytes_per_s: float | None = None
    pkts_per_s: float | None = None
    ecn_marks_per_s: float | None = None
    drops_per_s: float | None = None
    pfc_pauses_per_s: Mapping[str, float] = field(default_factory=dict)
    congested: bool = False
    since_us: int | None = None
    run: int = 0
    reason: str = ""
    samples: int = 0
    lost_since_us: int | None = None  # a sample looked like lost capacity; the windows after it decide
    lost_confirmed_us: int | None = None  # the sample that confirmed it; kept until `lost_quiet` reaches leave_samples
    lost_window: list[float] | None = None  # the windows since lost_since_us, added up (`_lost_step`)
    # (its 7th entry, the span, is stored as "lost_span_s"; a window stored without it: 6 long)
    lost_quiet: int = 0  # confirmed, and this many samples in a row since have not shown it

    def ecn_marked_fraction(self, min_pkts_per_s: float = 0.0) -> float | None:
        """Smoothed marks over smoothed packets; None without both or below `min_pkts_per_s`."""
        return _fraction(self.ecn_marks_per_s, self.pkts_per_s, min_pkts_per_s)

    def pfc_max_per_s(self) -> float:
        return max(self.pfc_pauses_per_s.values(), default=0.0)

    def to_doc(self) -> dict[str, Any]:
        """A JSON-able dict (the service stores it); `from_doc` reads it back."""
        return {"link": self.link, "direction": self.direction, "t_us": self.t_us, "source": self.source,
                "bytes_per_s": self.bytes_per_s, "pkts_per_s": self.pkts_per_s,
                "ecn_marks_per_s": self.ecn_marks_per_s, "drops_per_s": self.drops_per_s,
                "pfc_pauses_per_s": dict(self.pfc_pauses_per_s), "congested": self.congested,
                "since_us": self.since_us, "run": self.run, "reason": self.reason, "samples": self.samples,
                "lost_since_us": self.lost_since_us, "lost_confirmed_us": self.lost_confirmed_us,
                # the span (7th) apart: a controller before it reads a 6-long window (rolling upgrade)
                "lost_window": None if self.lost_window is None else self.lost_window[:6],
                "lost_span_s": self.lost_window[6] if self.lost_window and len(self.lost_window) > 6 else None,
                "lost_quiet": self.lost_quiet}

    @staticmethod
    def from_doc(doc: Mapping[str, Any]) -> DirectionState:
        return DirectionState(
            link=str(doc["link"]), direction=str(doc["direction"]), t_us=int(doc["t_us"]),
            source=str(doc.get("source", "")), bytes_per_s=doc.get("bytes_per_s"),
            pkts_per_s=doc.get("pkts_per_s"), ecn_marks_per_s=doc.get("ecn_marks_per_s"),
            drops_per_s=doc.get("drops_per_s"),
            pfc_pauses_per_s={str(k): float(v) for k, v in (doc.get("pfc_pauses_per_s") or {}).items()},
            congested=bool(doc.get("congested", False)), since_us=_us(doc.get("since_us")),
            run=int(doc.get("run", 0)), reason=str(doc.get("reason", "")), samples=int(doc.get("samples", 0)),
            lost_since_us=_us(doc.get("lost_since_us")), lost_confirmed_us=_us(doc.get("lost_confirmed_us")),
            lost_window=None if doc.get("lost_window") is None else [
                *(float(x) for x in doc["lost_window"]),
                *(() if doc.get("lost_span_s") is None else (float(doc["lost_span_s"]),))],
            lost_quiet=int(doc.get("lost_quiet", 0)))


@dataclass(frozen=True, slots=True)
class Transition:
    """A direction entered or left congestion at `t_us` (the sample that decided it)."""

    link: str
    direction: str
    kind: str
    t_us: int
    reason: str


@dataclass(frozen=True, slots=True)
class CongestedDirection:
    """What the rebalancer acts on: a congested link direction, since when, and its smoothed
    measured load. `background_gbps` is the measured load that the planned flows do not
    explain (`max(0, measured - planned)`), the load to treat as fixed when moving flows."""

    link: str
    direction: str
    since_us: int
    t_us: int
    capacity_gbps: float
    measured_gbps: float | None
    utilization: float | None
    planned_gbps: float
    background_gbps: float | None
    ecn_marked_fraction: float | None
    pfc_pauses_per_s: float
    reason: str
    # Whether the detector holds lost capacity confirmed (module docstring, 5: the windows after
    # a first sample, each at least `fast_confirm_min_s`, spanning `fast_confirm_span_s`; kept
    # until `leave_samples` samples in a row no longer show it); None: not known (rule off).
    lost_capacity: bool | None = None
    # The sample whose windows confirmed it (module docstring, 5): the rebalancer takes that
    # sample as showing the queue even when its own (short) window happens not to mark.
    lost_confirmed_us: int | None = None


def _us(value: Any) -> int | None:
    """A time in microseconds read back from a document: an int (a store may give a float)."""
    return None if value is None else round(value)


def _ewma(old: float | None, new: float | None, alpha: float) -> float | None:
    if new is None:
        return old
    if old is None:
        return new
    return old + alpha * (new - old)


def _smooth_pfc(old: Mapping[str, float], new: Mapping[str, float], alpha: float) -> dict[str, float]:
    out = dict(old)
    for prio, rate in new.items():
        out[prio] = rate if prio not in old else old[prio] + alpha * (rate - old[prio])
    return dict(sorted(out.items()))


def _fraction(marks: float | None, pkts: float | None, min_pkts_per_s: float) -> float | None:
    if marks is None or not pkts or pkts < max(min_pkts_per_s, 1e-9):
        return None
    return min(1.0, marks / pkts)


def _signals(state: DirectionState, config: CongestionConfig) -> tuple[str | None, bool]:
    """(why the smoothed signals are hot, or None; whether they are calm)."""
    fraction = state.ecn_marked_fraction(config.min_pkts_per_s)
    pfc = state.pfc_max_per_s()
    hot = []
    if fraction is not None and fraction >= config.ecn_enter_fraction:
        hot.append(f"ECN marks on {fraction:.1%} of packets")
    if pfc >= config.pfc_enter_per_s:
        prio = max(state.pfc_pauses_per_s, key=lambda p: state.pfc_pauses_per_s[p])
        hot.append(f"PFC {pfc:.0f} pauses/s on priority {prio}")
    calm = (fraction is None or fraction <= config.ecn_leave_fraction) and pfc <= config.pfc_leave_per_s
    return ("; ".join(hot) or None), calm


def _lost_why(bytes_per_s: float | None, pkts_per_s: float | None, marks_per_s: float | None, pfc_per_s: float,
              capacity_bytes_per_s: float, config: CongestionConfig) -> str | None:
    """Why these rates show a link short of capacity with a queue, or None: under
    `fast_enter_fraction` of its capacity and at an enter threshold."""
    if bytes_per_s is None or bytes_per_s >= config.fast_enter_fraction * capacity_bytes_per_s:
        return None
    fraction = _fraction(marks_per_s, pkts_per_s, config.min_pkts_per_s)
    if fraction is not None and fraction >= config.ecn_enter_fraction:
        why = f"ECN marks on {fraction:.1%} of packets"
    elif pfc_per_s >= config.pfc_enter_per_s:
        why = f"PFC {pfc_per_s:.0f} pauses/s"
    else:
        return None
    return f"{why} at {bytes_per_s / capacity_bytes_per_s:.0%} of capacity (lost capacity)"


def _lost_first(before: DirectionState | None, point: DirectionRates, capacity_bytes_per_s: float | None,
                config: CongestionConfig) -> str | None:
    """Why this sample looks like a link that lost capacity (module docstring, 5): short of
    capacity with a queue, its rate under `1 - fast_enter_fall` of the smoothed rate before it,
    or the smoothed rate before it under `fast_enter_fraction` of the capacity too and this
    sample's not rising over it by `fast_enter_fall` (slow for a while: a link degraded before
    its samples began shows no fall; load ramping up onto a link is not this)."""
    if (before is None or before.bytes_per_s is None or point.bytes_per_s is None or not capacity_bytes_per_s
            or config.fast_enter_fraction <= 0):
        return None
    fell = point.bytes_per_s < (1 - config.fast_enter_fall) * before.bytes_per_s
    slow = (before.bytes_per_s < config.fast_enter_fraction * capacity_bytes_per_s
            and point.bytes_per_s <= (1 + config.fast_enter_fall) * before.bytes_per_s)
    if not (fell or slow):
        return None
    return _lost_why(point.bytes_per_s, point.pkts_per_s, point.ecn_marks_per_s,
                     max(point.pfc_pauses_per_s.values(), default=0.0), capacity_bytes_per_s, config)


def _lost_step(before: DirectionState | None, point: DirectionRates, capacity_bytes_per_s: float | None,
               config: CongestionConfig) -> tuple[int | None, list[float] | None, int | None, int, str | None]:
    """The lost-capacity fields after this sample (`lost_since_us`, `lost_window`,
    `lost_confirmed_us`, `lost_quiet`) and, when it confirms lost capacity or shows it still, why.

    After a first sample that looks like lost capacity, the samples that follow are added up
    (`lost_window`: the first sample's interval, then seconds, bytes, packets, marks, pauses,
    and the seconds of windows at least `fast_confirm_min_s` long: the span). Only such a
    window decides: one that carries `fast_enter_fraction` of the capacity or more cancels at
    once (in that window the link carried it); once they span `fast_confirm_span_s` they
    confirm it if together (all the sums, shorter windows' too) still short of capacity with a
    queue; until they span that and most (3/4) of the first sample's interval they may only
    confirm, after that they cancel. A shorter window only adds to the sums. The span is what
    a compute gap cannot fake (module docstring, 5): traffic that pauses after the first
    sample and otherwise runs at line rate keeps a span of windows under half its capacity
    only if its pauses add up to over half the span (an on/off sender busy under half the
    time does: the known limit). A first sample still undecided `PENDING_INTERVALS` times the
    longest of the span, its own interval and the arriving window after it expires.

    Once confirmed it stays so until `leave_samples` samples in a row (each at least
    `fast_confirm_min_s`) no longer show it, like congestion's own leave: a link whose load
    the rebalancer took off is quiet with its capacity still lost."""
    if before is not None and before.lost_confirmed_us is not None:
        if point.interval_s < config.fast_confirm_min_s:
            return None, None, before.lost_confirmed_us, before.lost_quiet, None
        why = _lost_why(point.bytes_per_s, point.pkts_per_s, point.ecn_marks_per_s,
                        max(point.pfc_pauses_per_s.values(), default=0.0), capacity_bytes_per_s or 0.0, config)
        if why is not None:
            return None, None, before.lost_confirmed_us, 0, why
        quiet = before.lost_quiet + 1
        if quiet >= max(config.leave_samples, 1):
            return None, None, None, 0, None
        return None, None, before.lost_confirmed_us, quiet, None
    if before is not None and before.lost_since_us is not None and before.lost_window is not None:
        if point.bytes_per_s is None:  # (a rate dropped as implausible: unknown, never "0 bytes")
            return None, None, None, 0, None  # cancelled: a confirmation needs known rates
        first_s, secs, nbytes, pkts, marks, pauses, *rest = before.lost_window
        counted = rest[0] if rest else secs  # (a state stored before the 7th field: all counted)
        span_s = max(config.fast_confirm_span_s, config.fast_confirm_min_s)
        if point.t_us - before.lost_since_us <= PENDING_INTERVALS * max(span_s, first_s, point.interval_s) * 1e6:
            whole = point.interval_s >= config.fast_confirm_min_s
            if capacity_bytes_per_s and whole and point.bytes_per_s >= config.fast_enter_fraction * capacity_bytes_per_s:
                return None, None, None, 0, None  # this window carried it: the capacity is there
            dt = max(point.interval_s, 0.0)
            secs += dt
            nbytes += point.bytes_per_s * dt
            pkts += (point.pkts_per_s or 0.0) * dt
            marks += (point.ecn_marks_per_s or 0.0) * dt
            pauses += max(point.pfc_pauses_per_s.values(), default=0.0) * dt
            counted += dt if whole else 0.0
            window = [first_s, secs, nbytes, pkts, marks, pauses, counted]
            if not whole:  # in the sums only: it neither confirms nor cancels, nor counts in the span
                return before.lost_since_us, window, None, 0, None
            why = None
            if counted >= span_s and secs > 0 and capacity_bytes_per_s:
                why = _lost_why(nbytes / secs, pkts / secs, marks / secs, pauses / secs, capacity_bytes_per_s, config)
            if why is not None:
                return None, None, point.t_us, 0, why
            if counted < max(span_s, 0.75 * first_s):
                return before.lost_since_us, window, None, 0, None
            return None, None, None, 0, None
        # else: pending too long (samples stopped, or only short windows came): expired; this
        # sample may be a first one itself
    if _lost_first(before, point, capacity_bytes_per_s, config) is not None:
        return point.t_us, [max(point.interval_s, 0.0), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], None, 0, None
    return None, None, None, 0, None


def observe(state: DirectionState | None, point: DirectionRates, config: CongestionConfig,
            capacity_bytes_per_s: float | None = None) -> tuple[DirectionState, Transition | None]:
    """Fold one interval's rates into a direction's state. A point not newer than the state
    changes nothing (late or repeated samples are harmless). With the link's capacity, a
    sample that shows lost capacity enters at once (module docstring, 5)."""
    if state is not None and point.t_us <= state.t_us:
        return state, None
    before = state
    if state is None:
        state = DirectionState(point.link, point.direction, point.t_us, point.source)
        alpha = 1.0
    else:
        alpha = 1.0 - math.exp(-max(point.interval_s, 0.0) / config.ewma_tau_s) if config.ewma_tau_s > 0 else 1.0
    smoothed = replace(
        state, t_us=point.t_us, source=point.source, samples=state.samples + 1,
        bytes_per_s=_ewma(state.bytes_per_s, point.bytes_per_s, alpha),
        pkts_per_s=_ewma(state.pkts_per_s, point.pkts_per_s, alpha),
        ecn_marks_per_s=_ewma(state.ecn_marks_per_s, point.ecn_marks_per_s, alpha),
        drops_per_s=_ewma(state.drops_per_s, point.drops_per_s, alpha),
        pfc_pauses_per_s=_smooth_pfc(state.pfc_pauses_per_s, point.pfc_pauses_per_s, alpha))
    hot, calm = _signals(smoothed, config)
    # Lost capacity (5), tracked whether congested or not: a congested direction's is what the
    # rebalancer judges a degraded link on (`CongestedDirection.lost_capacity`).
    since, window, confirmed, quiet, lost = _lost_step(before, point, capacity_bytes_per_s, config)
    smoothed = replace(smoothed, lost_since_us=since, lost_window=window, lost_confirmed_us=confirmed,
                       lost_quiet=quiet)
    if not smoothed.congested:
        if lost is not None:
            entered = replace(smoothed, congested=True, since_us=point.t_us, run=0, reason=lost)
            return entered, Transition(point.link, point.direction, ENTERED, point.t_us, lost)
        run = smoothed.run + 1 if hot else 0
        if hot and run >= config.enter_samples:
            entered = replace(smoothed, congested=True, since_us=point.t_us, run=0, reason=hot)
            return entered, Transition(point.link, point.direction, ENTERED, point.t_us, hot)
        return replace(smoothed, run=run), None
    if hot:
        smoothed = replace(smoothed, reason=hot)
    run = smoothed.run + 1 if calm else 0
    dwelt_s = (point.t_us - (smoothed.since_us or point.t_us)) / 1e6
    if run >= config.leave_samples and dwelt_s >= config.min_congested_s:
        left = replace(smoothed, congested=False, since_us=None, run=0, reason="", lost_since_us=None,
                       lost_confirmed_us=None, lost_window=None, lost_quiet=0)
        return left, Transition(point.link, point.direction, LEFT, point.t_us,
                                f"calm for {run} samples after {dwelt_s:.0f} s congested")
    return replace(smoothed, run=run), None


def observe_all(states: Mapping[tuple[str, str], DirectionState], points: Iterable[DirectionRates],
                config: CongestionConfig, capacity_bytes_per_s: Mapping[str, float] | None = None,
                ) -> tuple[dict[tuple[str, str], DirectionState], list[Transition]]:
    """Fold many points (any order; each direction's are applied oldest first). Returns the
    states that changed and the transitions, in time order."""
    changed: dict[tuple[str, str], DirectionState] = {}
    transitions: list[Transition] = []
    for point in sorted(points, key=lambda p: (p.t_us, p.link, p.direction)):
        key = (point.link, point.direction)
        before = changed.get(key, states.get(key))
        after, transition = observe(before, point, config, (capacity_bytes_per_s or {}).get(point.link))
        if after is not before:
            changed[key] = after
        if transition is not None:
            transitions.append(transition)
    return changed, transitions


def expire(state: DirectionState, now_us: int, config: CongestionConfig) -> tuple[DirectionState, Transition | None]:
    """A congested direction whose samples stopped `stale_s` ago leaves congestion."""
    silent_s = (now_us - state.t_us) / 1e6
    if not state.congested or silent_s < config.stale_s:
        return state, None
    left = replace(state, congested=False, since_us=None, run=0, reason="", lost_since_us=None, lost_confirmed_us=None,
                   lost_window=None, lost_quiet=0)
    return left, Transition(state.link, state.direction, LEFT, now_us, f"no samples for {silent_s:.0f} s")


def fresh(state: DirectionState, now_us: int, fresh_s: float) -> bool:
    return (now_us - state.t_us) / 1e6 <= fresh_s


def congested(states: Iterable[DirectionState], capacity_gbps: Mapping[str, float],
              planned_gbps: Mapping[tuple[str, str], float], now_us: int,
              config: CongestionConfig) -> list[CongestedDirection]:
    """The congested directions with a sample in the last `stale_s`, most utilized first (ties
    by name). `capacity_gbps` is per link name; directions of unknown links are left out."""
    out = []
    for s in states:
        if not s.congested or s.since_us is None or not fresh(s, now_us, config.stale_s):
            continue
        capacity = capacity_gbps.get(s.link)
        if capacity is None:
            continue
        measured = None if s.bytes_per_s is None else s.bytes_per_s * 8 / 1e9
        planned = planned_gbps.get((s.link, s.direction), 0.0)
        out.append(CongestedDirection(
            link=s.link, direction=s.direction, since_us=s.since_us, t_us=s.t_us, capacity_gbps=capacity,
            measured_gbps=measured, utilization=None if measured is None else measured / capacity,
            planned_gbps=planned, background_gbps=None if measured is None else max(0.0, measured - planned),
            ecn_marked_fraction=s.ecn_marked_fraction(config.min_pkts_per_s), pfc_pauses_per_s=s.pfc_max_per_s(),
            reason=s.reason,
            # not known when the rule is off (`fast_enter_fraction` 0): the rebalancer then
            # judges a building queue on its own, as before the rule
            lost_capacity=None if config.fast_enter_fraction <= 0 else s.lost_confirmed_us is not None,
            lost_confirmed_us=s.lost_confirmed_us))
    out.sort(key=lambda c: (-(c.utilization or 0.0), c.link, c.direction))
    return out


@dataclass(frozen=True, slots=True)
class Hold:
    """A flow the rebalancer moved off `link`/`direction`; not to be moved before `until_us`."""

    key: Hashable
    until_us: int
    reason: str
    link: str = ""
    direction: str = ""


class HoldDowns:
    """Per-flow hold-down bookkeeping for the rebalancer: `hold` after moving a flow, `held`
    before moving one, `expire` now and then. Keys are whatever identifies a flow to the
    rebalancer, e.g. `(job, FlowKey)`. Usage::

        holds = HoldDowns()
        holds.hold(("job-a", key), now_us, config.hold_down_s, "moved off leaf0:E1--spine0:E0 ab")
        if not holds.held(("job-a", key), now_us): ...  # free to move again
    """

    def __init__(self) -> None:
        self._holds: dict[Hashable, Hold] = {}

    def hold(self, key: Hashable, now_us: int, hold_down_s: float, reason: str,
             link: str = "", direction: str = "") -> Hold:
        held = Hold(key, now_us + int(hold_down_s * 1e6), reason, link, direction)
        self._holds[key] = held
        return held

    def held(self, key: Hashable, now_us: int) -> bool:
        h = self._holds.get(key)
        return h is not None and h.until_us > now_us

    def expire(self, now_us: int) -> list[Hold]:
        gone = [h for h in self._holds.values() if h.until_us <= now_us]
        for h in gone:
            del self._holds[h.key]
        return gone

    def active(self, now_us: int) -> list[Hold]:
        return sorted((h for h in self._holds.values() if h.until_us > now_us), key=lambda h: (h.until_us, repr(h.key)))

    def __len__(self) -> int:
        return len(self._holds)
