"""The congestion detector on synthetic series: enter, leave, persistence, no flapping,
staleness, the rebalancer's view and per-flow hold-downs."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from controller.te.congestion import (
    ENTERED,
    LEFT,
    CongestionConfig,
    DirectionState,
    HoldDowns,
    congested,
    expire,
    observe,
    observe_all,
)
from controller.te.measured import DirectionRates
from controller.te.rebalance import LatestSample, RebalanceConfig, delivered_gbps, judged_degraded

LINK = "leaf0:Ethernet0--spine0:Ethernet0"
T0 = 1_764_430_000_000_000
CFG = CongestionConfig()
PKTS = 1e6  # packets/s: well above min_pkts_per_s


def point(t_s: float, marked: float = 0.0, pfc: float | None = None, interval_s: float = 10.0,
          pkts: float = PKTS, bytes_per_s: float = 40e9) -> DirectionRates:
    return DirectionRates(LINK, "ab", T0 + int(t_s * 1e6), interval_s, "leaf0:Ethernet0", "tx",
                          bytes_per_s=bytes_per_s, pkts_per_s=pkts, ecn_marks_per_s=marked * pkts,
                          pfc_pauses_per_s={} if pfc is None else {"3": pfc})


def run(points: list[DirectionRates], config: CongestionConfig = CFG) -> tuple[DirectionState | None, list]:
    state = None
    history = []
    for p in points:
        state, transition = observe(state, p, config)
        history.append((p.t_us, state, transition))
    return state, history


def transitions(history: list) -> list[tuple[float, str]]:
    return [((t - T0) / 1e6, tr.kind) for t, _, tr in history if tr is not None]


def test_the_docstring_example_enters_on_the_second_hot_sample_and_leaves_slowly() -> None:
    pts = [point(0)] + [point(t, 0.2 if t <= 30 else 0.0) for t in range(10, 140, 10)]
    _, history = run(pts)
    fractions = [round(100 * s.ecn_marked_fraction(), 1) for _, s, _ in history[1:9]]
    assert fractions == [9.7, 14.7, 17.3, 8.9, 4.6, 2.3, 1.2, 0.6]
    assert transitions(history) == [(20.0, ENTERED), (120.0, LEFT)]
    entered = next(tr for _, _, tr in history if tr is not None)
    assert "ECN marks on 14.7% of packets" in entered.reason


def test_a_link_losing_capacity_enters_on_its_second_marking_sample_load_rising_does_not() -> None:
    """Testbed (1 s polls, tau 2 s, enter at 2 %, a 50 Mbit/s spine link throttled to 12): the
    first whole throttled interval marked 8.5 % at 12 Mbit/s, its smoothed fraction 1.8 %; the
    smoothed two-sample rule entered 2 polls after that. With the link's capacity, a sample at
    an enter threshold under half the capacity and below the smoothed rate, confirmed by the
    next one (still marking, still under half), enters then. Traffic that ended inside an
    interval (its tail marking) is not confirmed: the next sample is quiet."""
    cfg = CongestionConfig(ewma_tau_s=2.0, ecn_enter_fraction=0.02, min_pkts_per_s=50.0)
    cap = 50e6 / 8
    mbit = lambda x: x * 1e6 / 8  # noqa: E731
    pts = [point(t, 0.0, interval_s=1.0, pkts=1000, bytes_per_s=mbit(49)) for t in range(4)]
    throttled = [*pts, point(4, 0.007, interval_s=1.0, pkts=600, bytes_per_s=mbit(28)),
                 point(5, 0.085, interval_s=1.0, pkts=260, bytes_per_s=mbit(12.1)),
                 point(6, 0.08, interval_s=1.0, pkts=260, bytes_per_s=mbit(12.0))]

    def entered_at(points: list[DirectionRates], capacity: float | None) -> float | None:
        state = None
        for p in points:
            state, tr = observe(state, p, cfg, capacity)
            if tr is not None and tr.kind == ENTERED:
                return (p.t_us - T0) / 1e6
        return None

    assert entered_at(throttled, None) is None  # the smoothed rule alone: not yet
    assert entered_at(throttled, cap) == 6.0
    state = None
    for p in throttled:
        state, tr = observe(state, p, cfg, cap)
    assert tr is not None and "lost capacity" in tr.reason and "ECN marks on 8.0% of packets" in tr.reason
    # A job stopped 0.3 s into an interval (a checkpoint): that interval's rate falls, its tail
    # marks; the next interval carries nothing. Not lost capacity.
    ended = [*pts, point(4, 0.06, interval_s=1.0, pkts=300, bytes_per_s=mbit(12)),
             point(5, 0.0, interval_s=1.0, pkts=0, bytes_per_s=0.0), point(6, 0.0, interval_s=1.0, pkts=0, bytes_per_s=0.0)]
    assert entered_at(ended, cap) is None
    # ... nor one that resumes at its full rate
    resumed = [*ended[:5], point(5, 0.01, interval_s=1.0, pkts=1000, bytes_per_s=mbit(49))]
    assert entered_at(resumed, cap) is None
    # Load moved onto a healthy link: under half its capacity, marking, but its rate rising: no.
    rising = [point(t, 0.0, interval_s=1.0, pkts=300, bytes_per_s=mbit(12)) for t in range(4)]
    rising.append(point(4, 0.05, interval_s=1.0, pkts=500, bytes_per_s=mbit(23)))
    assert entered_at(rising, cap) is None
    # Slowed but calm (a healthy link of a slowed ring), or marking at its full rate: no.
    assert entered_at([*pts, point(4, 0.0, interval_s=1.0, pkts=260, bytes_per_s=mbit(12))], cap) is None
    assert entered_at([*pts, point(4, 0.08, interval_s=1.0, pkts=1000, bytes_per_s=mbit(44))], cap) is None
    # Off.
    off = CongestionConfig(ewma_tau_s=2.0, ecn_enter_fraction=0.02, min_pkts_per_s=50.0, fast_enter_fraction=0.0)
    state = None
    for p in throttled:
        state, tr = observe(state, p, off, cap)
        assert tr is None


def entered_at(points: list[DirectionRates], cfg: CongestionConfig, cap: float) -> float | None:
    """When the direction entered congestion, in seconds after T0 (None: it did not)."""
    state = None
    for p in points:
        state, tr = observe(state, p, cfg, cap)
        if tr is not None and tr.kind == ENTERED:
            return (p.t_us - T0) / 1e6
    return None


def test_lost_capacity_is_confirmed_by_early_re_polls_spanning_fast_confirm_span_s() -> None:
    """A switch agent may poll again 0.35 s after a sample that looks like lost capacity, and
    once more 0.35 s later (`repoll_after_s`): once the windows after the first span
    `fast_confirm_span_s` (0.7 s) under half the capacity with marks, lost capacity is
    confirmed (testbed: 0.3 s before the regular poll). One window shorter than
    `fast_confirm_min_s` (the last of a queue draining) neither confirms nor cancels."""
    cfg = CongestionConfig(ewma_tau_s=2.0, ecn_enter_fraction=0.02, min_pkts_per_s=50.0)
    cap = 50e6 / 8
    mbit = lambda x: x * 1e6 / 8  # noqa: E731
    pts = [point(t, 0.0, interval_s=1.0, pkts=1000, bytes_per_s=mbit(49)) for t in range(5)]
    first = point(5, 0.085, interval_s=1.0, pkts=260, bytes_per_s=mbit(12.1))  # looks like lost capacity
    slow = lambda t, i, m=0.08: point(t, m, interval_s=i, pkts=260, bytes_per_s=mbit(12.0))  # noqa: E731

    assert entered_at([*pts, first, slow(5.35, 0.35)], cfg, cap) is None  # 0.35 s: not yet
    assert entered_at([*pts, first, slow(5.35, 0.35), slow(5.7, 0.35)], cfg, cap) == 5.7
    # Traffic that ended 0.3 s into the interval: the re-polls see nothing.
    ended = point(5, 0.06, interval_s=1.0, pkts=300, bytes_per_s=mbit(12))
    assert entered_at([*pts, ended, point(5.35, 0.0, interval_s=0.35, pkts=0, bytes_per_s=0.0),
                       point(5.7, 0.0, interval_s=0.35, pkts=0, bytes_per_s=0.0),
                       point(6, 0.0, interval_s=0.3, pkts=0, bytes_per_s=0.0)], cfg, cap) is None
    # 50 ms after it, the last of its queue still marking: too short to count on its own.
    tail = point(5.05, 0.5, interval_s=0.05, pkts=200, bytes_per_s=mbit(10))
    assert entered_at([*pts, ended, tail, point(5.4, 0.0, interval_s=0.35, pkts=0, bytes_per_s=0.0),
                       point(5.75, 0.0, interval_s=0.35, pkts=0, bytes_per_s=0.0)], cfg, cap) is None
    # ... nor cancel: a link that lost capacity is still confirmed by the samples after it.
    assert entered_at([*pts, first, point(5.05, 0.0, interval_s=0.05, pkts=0, bytes_per_s=0.0),
                       slow(5.4, 0.35), slow(5.75, 0.35)], cfg, cap) == 5.75


def test_a_compute_gap_after_the_first_sample_does_not_confirm_lost_capacity() -> None:
    """The defect of the single 0.35 s re-poll (review): a ring that stops inside an interval
    and restarts 0.25 s after the poll (a compute gap) gives the re-poll window under half the
    capacity, marking at the restart (the line-rate level). Confirmed there, a healthy link was
    solved as degraded for the hold-down. Now the confirming windows must span 0.7 s, and one
    that carries half the capacity or more (the sender back at line rate) cancels: a gap
    fakes lost capacity only if over half that span."""
    cfg = CongestionConfig(ewma_tau_s=2.0, ecn_enter_fraction=0.02, min_pkts_per_s=50.0)
    cap = 50e6 / 8
    mbit = lambda x: x * 1e6 / 8  # noqa: E731
    line = [point(t, 0.04, interval_s=1.0, pkts=1000, bytes_per_s=mbit(49)) for t in range(5)]
    # 0.45 s at line rate, then the gap: under half, marking (its line-rate part)
    stopped = point(5, 0.04, interval_s=1.0, pkts=450, bytes_per_s=mbit(22))
    # idle 0.25 s, 0.1 s at line rate with the restart's marks: 14 Mbit/s, 6 % marked
    restart = point(5.35, 0.06, interval_s=0.35, pkts=290, bytes_per_s=mbit(14))
    at_line = lambda t, i: point(t, 0.04, interval_s=i, pkts=1000, bytes_per_s=mbit(49))  # noqa: E731
    for after in ([restart, at_line(5.7, 0.35), at_line(6, 0.3)], [restart, at_line(6, 0.65)]):
        for pts in ([point(t, 0.0, interval_s=1.0, pkts=1000, bytes_per_s=mbit(49)) for t in range(5)], line):
            state = None
            for p in [*pts, stopped, *after]:
                state, tr = observe(state, p, cfg, cap)
                assert tr is None or "lost capacity" not in tr.reason, tr
                assert state.lost_confirmed_us is None
    # A longer gap does confirm (the limit, documented): idle 0.55 s after the poll, then 0.15 s
    # at line rate: 0 and 21 Mbit/s in the two re-poll windows.
    long_gap = [point(5.35, 0.0, interval_s=0.35, pkts=0, bytes_per_s=0.0),
                point(5.7, 0.06, interval_s=0.35, pkts=430, bytes_per_s=mbit(21))]
    assert entered_at([*[point(t, 0.0, interval_s=1.0, pkts=1000, bytes_per_s=mbit(49)) for t in range(5)],
                       stopped, *long_gap], cfg, cap) == 5.7


def test_a_re_poll_without_marks_leaves_the_decision_to_the_whole_interval_after_the_first_sample() -> None:
    """The testbed's packet-counting marker can leave a throttled link's 0.4 s window without a
    mark: that re-poll neither confirms nor cancels; the regular sample after it decides on the
    span of both (as without the re-poll). A link whose load dropped (no queue) is cancelled
    there, and a later marking sample alone does not confirm it."""
    cfg = CongestionConfig(ewma_tau_s=2.0, ecn_enter_fraction=0.02, min_pkts_per_s=50.0)
    cap = 50e6 / 8
    mbit = lambda x: x * 1e6 / 8  # noqa: E731
    pts = [point(t, 0.0, interval_s=1.0, pkts=1000, bytes_per_s=mbit(49)) for t in range(5)]
    first = point(5, 0.085, interval_s=1.0, pkts=260, bytes_per_s=mbit(12.1))
    quiet = point(5.4, 0.0, interval_s=0.4, pkts=260, bytes_per_s=mbit(12.0))

    assert entered_at([*pts, first, quiet, point(6, 0.08, interval_s=0.6, pkts=260, bytes_per_s=mbit(12.0))], cfg, cap) == 6.0
    dropped = [*pts, first, quiet, point(6, 0.0, interval_s=0.6, pkts=260, bytes_per_s=mbit(12.0))]
    assert entered_at(dropped, cfg, cap) is None
    assert entered_at([*dropped, point(7, 0.05, interval_s=1.0, pkts=260, bytes_per_s=mbit(12.0))], cfg, cap) is None


def test_lost_capacity_is_tracked_on_a_direction_already_congested() -> None:
    """A link marking at line rate (congested by the smoothed rule) that then loses capacity:
    the same samples confirm it (`lost_capacity`, what the rebalancer judges a degraded link
    on). Once confirmed it is cleared only by `leave_samples` samples in a row that do not show
    it (a quiet one is what the rebalancer's own cut leaves on a slow link; before, one such
    sample cleared it); traffic that ended inside an interval is not confirmed."""
    cfg = CongestionConfig(ewma_tau_s=2.0, ecn_enter_fraction=0.02, min_pkts_per_s=50.0, leave_samples=3)
    cap = 50e6 / 8
    mbit = lambda x: x * 1e6 / 8  # noqa: E731
    line = [point(t, 0.04, interval_s=1.0, pkts=1000, bytes_per_s=mbit(49)) for t in range(4)]
    quiet = lambda t: point(t, 0.0, interval_s=1.0, pkts=200, bytes_per_s=mbit(9))  # noqa: E731

    def lost(points: list[DirectionRates]) -> list[bool]:
        state, out = None, []
        for p in points:
            state, _ = observe(state, p, cfg, cap)
            out.append(state.lost_confirmed_us is not None)
            assert state.congested or p.t_us - T0 < 2e6
        view = congested([state], {LINK: 0.05}, {}, state.t_us, cfg)
        assert view and view[0].lost_capacity == out[-1]
        return out

    throttled = [*line, point(4, 0.08, interval_s=1.0, pkts=260, bytes_per_s=mbit(12)),
                 point(4.4, 0.08, interval_s=0.4, pkts=260, bytes_per_s=mbit(12)),
                 point(5, 0.1, interval_s=0.6, pkts=260, bytes_per_s=mbit(11))]
    assert lost(throttled)[4:] == [False, False, True]
    # weights cut: quiet under half; a marking sample restarts the count; 3 in a row clear it
    assert lost([*throttled, quiet(6), quiet(7), point(8, 0.1, interval_s=1.0, pkts=260, bytes_per_s=mbit(11)),
                 quiet(9), quiet(10), quiet(11)])[7:] == [True, True, True, True, True, False]
    # the capacity back (line rate): the same 3 samples
    back = lambda t: point(t, 0.04, interval_s=1.0, pkts=1000, bytes_per_s=mbit(49))  # noqa: E731
    assert lost([*throttled, back(6), back(7), back(8)])[7:] == [True, True, False]
    assert lost([*line, point(4, 0.08, interval_s=1.0, pkts=300, bytes_per_s=mbit(12)),
                 point(4.4, 0.0, interval_s=0.4, pkts=0, bytes_per_s=0.0),
                 point(5, 0.0, interval_s=0.6, pkts=0, bytes_per_s=0.0)])[4:] == [False, False, False]


def test_a_link_slow_from_the_start_needs_the_same_confirmation() -> None:
    """A link slow before its samples began shows no fall: a marking sample under half the
    capacity with the smoothed rate under half too starts the same confirmation (it is what
    the rebalancer's "slow for a while" degraded judgment now needs). A healthy link of a ring
    slowed for one iteration (testbed, j13d: 23.7 of 50 Mbit/s smoothed, 3.5 % marked, solved
    as degraded 1.4 s before any throttle) is cancelled by the window back at its rate."""
    cfg = CongestionConfig(ewma_tau_s=2.0, ecn_enter_fraction=0.02, min_pkts_per_s=50.0)
    cap = 50e6 / 8
    mbit = lambda x: x * 1e6 / 8  # noqa: E731
    slow = [point(t, 0.08, interval_s=1.0, pkts=260, bytes_per_s=mbit(12)) for t in range(4)]
    state, confirmed = None, []
    for p in slow:
        state, _ = observe(state, p, cfg, cap)
        confirmed.append(state.lost_confirmed_us is not None)
    assert confirmed == [False, False, True, True]  # first at 1, confirmed by the next
    half = [point(t, 0.0, interval_s=1.0, pkts=500, bytes_per_s=mbit(23.7)) for t in range(4)]
    blip = [*half, point(4, 0.035, interval_s=1.0, pkts=500, bytes_per_s=mbit(23)),
            point(4.35, 0.03, interval_s=0.35, pkts=900, bytes_per_s=mbit(40)),
            point(5, 0.03, interval_s=0.65, pkts=900, bytes_per_s=mbit(40))]
    state = None
    for p in blip:
        state, _ = observe(state, p, cfg, cap)
        assert state.lost_confirmed_us is None
    # ramping up from a light load, marking: not this rule
    ramp = [*[point(t, 0.0, interval_s=1.0, pkts=100, bytes_per_s=mbit(5)) for t in range(4)],
            point(4, 0.05, interval_s=1.0, pkts=400, bytes_per_s=mbit(18)),
            point(5, 0.05, interval_s=1.0, pkts=400, bytes_per_s=mbit(18))]
    state = None
    for p in ramp[:5]:
        state, _ = observe(state, p, cfg, cap)
    assert state is not None and state.lost_since_us is None


def test_one_burst_enters_only_if_its_echo_stays_hot() -> None:
    def burst(fraction: float) -> list[tuple[float, str]]:
        _, history = run([point(0)] + [point(t, fraction if t == 30 else 0.0) for t in range(10, 300, 10)])
        return transitions(history)

    assert burst(0.15) == []  # smoothed 7.3 %, then 3.7 %: one hot sample
    assert [k for _, k in burst(0.5)] == [ENTERED, LEFT]  # 24 %, then 12.5 %: two


def test_marginal_congestion_enters_later_than_strong() -> None:
    def entered_at(fraction: float) -> float:
        _, history = run([point(0)] + [point(t, fraction) for t in range(10, 200, 10)])
        return next(t for t, kind in transitions(history) if kind == ENTERED)

    assert entered_at(0.5) == 20.0
    assert entered_at(0.06) > entered_at(0.2) >= 20.0


def test_pfc_pauses_enter_and_name_the_priority() -> None:
    pts = [point(0)] + [point(t, pfc=500.0) for t in range(10, 40, 10)]
    state, history = run(pts)
    assert transitions(history) == [(20.0, ENTERED)]
    assert state is not None and "PFC" in state.reason and "priority 3" in state.reason


def test_no_leave_before_the_minimum_dwell() -> None:
    cfg = CongestionConfig(min_congested_s=200.0)
    pts = [point(0)] + [point(t, 0.3 if t <= 20 else 0.0) for t in range(10, 400, 10)]
    _, history = run(pts, cfg)
    (t_in, k_in), (t_out, k_out) = transitions(history)
    assert (k_in, k_out) == (ENTERED, LEFT)
    assert t_out - t_in >= 200.0


def test_values_between_thresholds_keep_the_state() -> None:
    # 3 % marked sits between leave (1 %) and enter (5 %): it neither enters nor leaves.
    calm_then_mid = [point(0)] + [point(t, 0.03) for t in range(10, 300, 10)]
    _, history = run(calm_then_mid)
    assert transitions(history) == []
    hot_then_mid = [point(0)] + [point(t, 0.3 if t <= 30 else 0.03) for t in range(10, 600, 10)]
    state, history = run(hot_then_mid)
    assert transitions(history) == [(20.0, ENTERED)]
    assert state is not None and state.congested


@pytest.mark.parametrize("period_s", [20, 40, 60, 120])
def test_oscillating_load_does_not_flap(period_s: int) -> None:
    """Ten minutes of load that swings between 20 % marked and calm every `period_s / 2`:
    the detector enters once and stays in; it never alternates faster than its dwell."""
    rng = random.Random(period_s)
    pts = [point(0)]
    for t in range(10, 610, 10):
        on = (t // (period_s // 2)) % 2 == 0
        pts.append(point(t, (0.2 if on else 0.0) * rng.uniform(0.8, 1.2)))
    _, history = run(pts)
    kinds = transitions(history)
    assert kinds and kinds[0][1] == ENTERED
    assert len(kinds) <= 2, kinds  # at most one episode: entered, and perhaps left at the end
    for (t1, _), (t2, _) in itertools.pairwise(kinds):
        assert t2 - t1 >= CFG.min_congested_s


def test_noise_around_the_enter_threshold_does_not_flap() -> None:
    rng = random.Random(7)
    pts = [point(0)] + [point(t, max(0.0, rng.gauss(0.05, 0.02))) for t in range(10, 1210, 10)]
    _, history = run(pts)
    episodes = [k for _, k in transitions(history) if k == ENTERED]
    assert len(episodes) <= 1


def test_smoothing_is_per_time_not_per_sample() -> None:
    """Polled every second or every ten, the same load gives the same smoothed value at the
    same time."""
    fast, _ = run([point(0, 0.0, interval_s=1.0)] + [point(t, 0.2, interval_s=1.0) for t in range(1, 31)])
    slow, _ = run([point(0, 0.0)] + [point(t, 0.2) for t in (10, 20, 30)])
    assert fast is not None and slow is not None
    assert fast.ecn_marked_fraction() == pytest.approx(slow.ecn_marked_fraction(), rel=1e-9)
    assert fast.ecn_marked_fraction() == pytest.approx(0.2 * (1 - math.exp(-30 / 15)), rel=1e-9)


def test_few_packets_give_no_fraction() -> None:
    state, history = run([point(0, pkts=10)] + [point(t, 0.5, pkts=10) for t in range(10, 100, 10)])
    assert transitions(history) == [] and state is not None and state.ecn_marked_fraction(CFG.min_pkts_per_s) is None


def test_late_and_repeated_points_change_nothing() -> None:
    state, _ = run([point(0), point(10, 0.3)])
    assert state is not None
    again, transition = observe(state, point(10, 0.9), CFG)
    late, transition2 = observe(state, point(5, 0.9), CFG)
    assert again is state and late is state and transition is None and transition2 is None


def test_a_silent_congested_direction_leaves_after_stale_s() -> None:
    state, _ = run([point(0)] + [point(t, 0.5) for t in (10, 20)])
    assert state is not None and state.congested
    same, none = expire(state, state.t_us + int(30e6), CFG)
    assert same is state and none is None
    left, transition = expire(state, state.t_us + int(61e6), CFG)
    assert not left.congested and transition is not None and transition.kind == LEFT
    assert "no samples" in transition.reason


def test_state_round_trips_through_its_document() -> None:
    state, _ = run([point(0, pfc=1.0)] + [point(t, 0.5, pfc=300.0) for t in (10, 20)])
    assert state is not None
    assert DirectionState.from_doc(state.to_doc()) == state


def test_observe_all_orders_by_time_and_reports_changes() -> None:
    pts = [point(t, 0.5) for t in (20, 0, 10)]
    changed, trs = observe_all({}, pts, CFG)
    assert list(changed) == [(LINK, "ab")]
    assert [(tr.kind, (tr.t_us - T0) / 1e6) for tr in trs] == [(ENTERED, 10.0)]


def test_congested_view_for_the_rebalancer() -> None:
    state, _ = run([point(0, bytes_per_s=30e9)] + [point(t, 0.5, bytes_per_s=30e9) for t in (10, 20)])
    assert state is not None
    now = state.t_us + int(5e6)
    [c] = congested([state], {LINK: 400.0}, {(LINK, "ab"): 100.0}, now, CFG)
    assert (c.link, c.direction, c.since_us) == (LINK, "ab", T0 + int(20e6))
    assert c.measured_gbps == pytest.approx(240.0)
    assert c.utilization == pytest.approx(0.6)
    assert c.background_gbps == pytest.approx(140.0)
    assert c.ecn_marked_fraction == pytest.approx(state.ecn_marked_fraction())
    # Unknown links and stale states are left out.
    assert congested([state], {}, {}, now, CFG) == []
    assert congested([state], {LINK: 400.0}, {}, state.t_us + int(61e6), CFG) == []


def test_hold_downs_expire() -> None:
    holds = HoldDowns()
    holds.hold(("job", 1), T0, 300.0, "moved", LINK, "ab")
    assert holds.held(("job", 1), T0 + int(299e6))
    assert not holds.held(("job", 1), T0 + int(300e6))
    assert not holds.held(("job", 2), T0)
    assert [h.key for h in holds.active(T0)] == [("job", 1)]
    assert [h.key for h in holds.expire(T0 + int(301e6))] == [("job", 1)]
    assert len(holds) == 0


def test_a_window_of_unknown_bytes_never_confirms_lost_capacity() -> None:
    """A sample whose byte rate was dropped (implausible) is unknown, not "0 bytes": at line
    rate, with its packets and marks counted, it confirmed lost capacity "at 0% of capacity"."""
    cfg = CongestionConfig(ewma_tau_s=2.0, ecn_enter_fraction=0.02, min_pkts_per_s=50.0)
    cap = 50e6 / 8
    mbit = lambda x: x * 1e6 / 8  # noqa: E731
    pts = [point(t, 0.0, interval_s=1.0, pkts=1000, bytes_per_s=mbit(49)) for t in range(5)]
    first = point(5, 0.085, interval_s=1.0, pkts=260, bytes_per_s=mbit(12.1))
    unknown = DirectionRates(LINK, "ab", T0 + int(5.4e6), 0.4, "leaf0:Ethernet0", "tx", bytes_per_s=None,
                             pkts_per_s=4000, ecn_marks_per_s=200, pfc_pauses_per_s={})
    state = None
    for p in [*pts, first, unknown]:
        state, tr = observe(state, p, cfg, cap)
        assert tr is None, tr
    assert state is not None and state.lost_confirmed_us is None


def test_lost_capacity_is_not_known_when_the_rule_is_off() -> None:
    """`fast_enter_fraction` 0 turns the lost-capacity rule off: the rebalancer's view says
    "not known" (None), not "no" (False, which would stop it judging a building queue)."""
    on, off = CongestionConfig(), CongestionConfig(fast_enter_fraction=0.0)
    hot = [point(t, 0.1, interval_s=1.0) for t in range(6)]
    for cfg, want in ((on, False), (off, None)):
        state, _ = run(hot, cfg)
        assert state is not None and state.congested
        view = congested([state], {LINK: 400.0}, {}, state.t_us, cfg)
        assert view and view[0].lost_capacity is want


def confirmed_at(points: list[DirectionRates], cfg: CongestionConfig, cap: float) -> float | None:
    """When lost capacity was first confirmed, in seconds after T0 (None: never; the smoothed
    rule may enter meanwhile, which this does not count)."""
    state = None
    for p in points:
        state, _ = observe(state, p, cfg, cap)
        if state.lost_confirmed_us is not None:
            return (state.lost_confirmed_us - T0) / 1e6
    return None


def test_a_window_under_fast_confirm_min_s_never_completes_a_confirmation() -> None:
    """Review (j13e): a window shorter than `fast_confirm_min_s` counted towards the span, so
    one at line rate could complete it (the span reached, the sum still under half) and
    confirm lost capacity in the very window that showed the capacity there; and one
    carrying the last of a draining queue's marks could tip the sum over the enter threshold.
    Such a window now only adds to the sums: the span counts windows of at least
    `fast_confirm_min_s`, and only those confirm or cancel."""
    cfg = CongestionConfig(ewma_tau_s=2.0, ecn_enter_fraction=0.02, min_pkts_per_s=50.0)
    cap = 50e6 / 8
    mbit = lambda x: x * 1e6 / 8  # noqa: E731
    pts = [point(t, 0.0, interval_s=1.0, pkts=1000, bytes_per_s=mbit(49)) for t in range(5)]
    first = point(5, 0.085, interval_s=1.0, pkts=260, bytes_per_s=mbit(12.1))
    slow = lambda t, i, m=0.08: point(t, m, interval_s=i, pkts=260, bytes_per_s=mbit(12.0))  # noqa: E731
    line = lambda t, i: point(t, 0.04, interval_s=i, pkts=1000, bytes_per_s=mbit(49))  # noqa: E731
    # 0.65 s of slow windows, then 0.1 s at line rate (span 0.75 s, sum 17 Mbit/s), then line rate
    assert confirmed_at([*pts, first, slow(5.35, 0.35), slow(5.65, 0.3), line(5.75, 0.1)], cfg, cap) is None
    assert confirmed_at([*pts, first, slow(5.35, 0.35), slow(5.65, 0.3), line(5.75, 0.1), line(6.05, 0.3)],
                      cfg, cap) is None
    # ... and a link that lost capacity is still confirmed by the next whole window
    assert confirmed_at([*pts, first, slow(5.35, 0.35), slow(5.65, 0.3), slow(5.75, 0.1), slow(6.05, 0.3)],
                      cfg, cap) == 6.05
    # Unmarked windows spanning 0.7 s (not yet 3/4 of the first's 1 s: pending), then 40 ms of a
    # queue draining, half its packets marked: 2.1 % of the sum. Not on that window.
    unmarked = [*pts, first, slow(5.35, 0.35, 0.0), slow(5.7, 0.35, 0.0),
                point(5.74, 0.5, interval_s=0.04, pkts=200, bytes_per_s=mbit(10))]
    state = None
    for p in unmarked:
        state, tr = observe(state, p, cfg, cap)
        assert tr is None, tr
    assert state is not None and state.lost_since_us == first.t_us and state.lost_confirmed_us is None
    state, tr = observe(state, slow(6.0, 0.26, 0.0), cfg, cap)  # the next whole window decides: 1.6 %
    assert tr is None and state.lost_since_us is None and state.lost_confirmed_us is None


def test_a_pending_lost_capacity_sample_expires() -> None:
    """A first lost-capacity sample left neither confirmed nor cancelled (its windows stopped
    coming: a direction's samples missing, a switch agent restarted) expires `PENDING_INTERVALS`
    (3) times the longest of `fast_confirm_span_s`, its own interval and the arriving window
    after it: that window is judged as a first one itself, and the windows after it must
    confirm it. Before, the first 1 s window of a restarted agent's run (10 s after the first
    sample; a new run's first poll gives no rates) confirmed that 10 s old sample."""
    cfg = CongestionConfig(ewma_tau_s=2.0, ecn_enter_fraction=0.02, min_pkts_per_s=50.0)
    cap = 50e6 / 8
    mbit = lambda x: x * 1e6 / 8  # noqa: E731
    pts = [point(t, 0.0, interval_s=1.0, pkts=1000, bytes_per_s=mbit(49)) for t in range(5)]
    first = point(5, 0.085, interval_s=1.0, pkts=260, bytes_per_s=mbit(12.1))
    slow = lambda t, i: point(t, 0.08, interval_s=i, pkts=260, bytes_per_s=mbit(12.0))  # noqa: E731
    state = None
    for p in [*pts, first, slow(15, 1.0)]:
        state, _ = observe(state, p, cfg, cap)
    assert state is not None and state.lost_confirmed_us is None
    assert state.lost_since_us == T0 + 15_000_000  # a first sample again
    assert confirmed_at([*pts, first, slow(15, 1.0), slow(15.35, 0.35), slow(15.7, 0.35)], cfg, cap) == 15.7
    # A long window right after the first, no gap (polls that failed for 9 s, the counters
    # kept: one 10 s window) still decides: it measured its whole span
    assert confirmed_at([*pts, first, slow(15, 10.0)], cfg, cap) == 15.0
    # Only windows shorter than fast_confirm_min_s: they never decide; 3 s after the first
    # sample it expires (the one then is judged as a first one: slow and marking, it is)
    state = None
    for p in [*pts, first, *[slow(5 + k / 10, 0.1) for k in range(1, 41)]]:
        state, _ = observe(state, p, cfg, cap)
        assert state.lost_confirmed_us is None
        assert state.lost_since_us is None or state.t_us - state.lost_since_us <= 3_000_000
    assert state is not None and state.lost_since_us is not None and state.lost_since_us > first.t_us


def test_known_limit_an_on_off_sender_busy_under_half_the_time_confirms_lost_capacity() -> None:
    """The documented limit (module docstring, 5; README, Decisions): per-interval counters
    cannot tell a healthy link whose sender runs at line rate under half the time (on/off
    faster than the windows, each burst's queue marking) from one that lost capacity and is
    busy all the time at that share, marking. Both deliver the same bytes with the same marks:
    40 % of 0.1 s periods at 49 of 50 Mbit/s is confirmed as lost capacity and judged degraded
    by the rebalancer (its weights solved with ~20 Mbit/s for the link's capacity).
    Busy 60 % of the time, every window carries over half the capacity: not. If this starts
    failing, the limit moved: say so where it is documented."""
    cfg = CongestionConfig(ewma_tau_s=2.0, ecn_enter_fraction=0.02, min_pkts_per_s=50.0)
    rcfg = RebalanceConfig(ecn_enter_fraction=0.02, min_pkts_per_s=50.0)
    cap = 50e6 / 8
    mbit = lambda x: x * 1e6 / 8  # noqa: E731

    def on_off(duty: float) -> tuple[DirectionState, bool]:
        """1 s polls; bursts mark 5 % of packets, so the smoothed rule enters either way.
        Returns the state and whether the rebalancer judges the direction degraded."""
        state = None
        for t in range(6):
            state, _ = observe(state, point(t, 0.05, interval_s=1.0, pkts=1000 * duty, bytes_per_s=mbit(49 * duty)),
                               cfg, cap)
        assert state is not None and state.congested
        [c] = congested([state], {LINK: 0.05}, {}, state.t_us, cfg)
        sample = LatestSample(state.t_us, 0.05, 0.0, 49 * duty / 1000)
        return state, judged_degraded(c, delivered_gbps(c, sample, rcfg), rcfg, sample, {})

    busy, degraded = on_off(0.6)
    assert busy.lost_confirmed_us is None and busy.lost_since_us is None and not degraded
    idle_most, degraded = on_off(0.4)
    assert idle_most.lost_confirmed_us is not None and degraded  # the limit


def test_a_pending_window_round_trips_and_reads_a_stored_one_without_its_span() -> None:
    """The span (seconds of whole windows) is stored beside the 6-long `lost_window`, which a
    controller before it unpacks (a rolling upgrade); a state stored by one is read with its
    whole seconds as the span."""
    cfg = CongestionConfig(ewma_tau_s=2.0, ecn_enter_fraction=0.02, min_pkts_per_s=50.0)
    cap = 50e6 / 8
    mbit = lambda x: x * 1e6 / 8  # noqa: E731
    pts = [point(t, 0.0, interval_s=1.0, pkts=1000, bytes_per_s=mbit(49)) for t in range(5)]
    slow = lambda t, i: point(t, 0.08, interval_s=i, pkts=260, bytes_per_s=mbit(12.0))  # noqa: E731
    state = None
    for p in [*pts, slow(5, 1.0), slow(5.35, 0.35), slow(5.45, 0.1)]:
        state, _ = observe(state, p, cfg, cap)
    assert state is not None and state.lost_window is not None and len(state.lost_window) == 7
    doc = state.to_doc()
    assert len(doc["lost_window"]) == 6 and doc["lost_span_s"] == pytest.approx(0.35)
    assert DirectionState.from_doc(doc) == state
    old = DirectionState.from_doc({**doc, "lost_span_s": None})
    assert old.lost_window == state.lost_window[:6]
    after, _ = observe(old, slow(5.8, 0.35), cfg, cap)  # 0.45 + 0.35 s: spans 0.7 s
    assert after.lost_confirmed_us == T0 + 5_800_000
