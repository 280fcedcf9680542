"""Counter deltas: plain increase, 32- and 64-bit wraps, resets, missing counters."""

from __future__ import annotations

import pytest

from controller.te.counters import Sample, delta, rates_per_s


@pytest.mark.parametrize(("old", "new", "expected"), [
    (100, 250, 150),
    (2**32 - 10, 5, 15),          # a 32-bit counter wrapped
    (2**64 - 1, 99, 100),         # a 64-bit counter wrapped
    (5_000_000, 12, None),        # far from the top of any width: the switch restarted
    (7, 7, 0),
])
def test_delta(old: int, new: int, expected: int | None) -> None:
    assert delta(old, new) == expected


def test_rates_cover_the_counters_both_samples_carry() -> None:
    before = Sample(1_000_000, {"tx_bytes": 1000, "ecn_marked_pkts": 10, "rx_bytes": 5})
    after = Sample(3_000_000, {"tx_bytes": 5000, "ecn_marked_pkts": 4, "pfc_rx_pause.3": 2})
    assert rates_per_s(before, after) == {"tx_bytes": 2000.0}  # ECN reset, rx gone, pfc new
    assert rates_per_s(None, after) == {}
    assert rates_per_s(after, before) == {}
