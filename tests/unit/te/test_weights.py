"""te.weights.balance: min-max utilization over weights with paths fixed."""

from __future__ import annotations

import pytest

from controller.te.weights import balance

SLOW, FAST, HOST = ("spine0", "ab"), ("spine1", "ab"), ("host", "ba")


def test_a_slow_direction_gets_what_it_delivers_and_the_rest_goes_to_its_sibling() -> None:
    """One connection of 100 Gb/s, a flow on each of two paths, one path's link at 25: the
    program puts 20 % on it (both at 80 % of capacity), not 0 and not half."""
    got = balance({"c": ["a", "b"]}, {"c": 1.0}, {SLOW: [(100.0, "a")], FAST: [(100.0, "b")]}, {},
                  {SLOW: 25.0, FAST: 100.0})
    assert got is not None
    assert got.weights["a"] == pytest.approx(0.2) and got.weights["b"] == pytest.approx(0.8)
    assert got.max_utilization == pytest.approx(0.8)


def test_a_direction_no_weight_can_change_does_not_stop_the_others_being_relieved() -> None:
    """Both flows also cross the receiving host's link, reported at a fraction of its capacity:
    its load is the same whatever the weights. Counted, it would be the bottleneck at 2.0 and
    the program would leave the slow spine link anywhere under 2.0 (the closest-to-even
    solution puts half on it: 2.0 of its capacity); left out, the spine links are balanced."""
    terms = {SLOW: [(100.0, "a")], FAST: [(100.0, "b")], HOST: [(100.0, "a"), (100.0, "b")]}
    got = balance({"c": ["a", "b"]}, {"c": 1.0}, terms, {}, {SLOW: 25.0, FAST: 100.0, HOST: 50.0})
    assert got is not None
    assert got.weights["a"] == pytest.approx(0.2)
    assert got.max_utilization == pytest.approx(2.0)  # reported: the host link is what it is
