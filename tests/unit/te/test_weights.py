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


def test_a_weights_bound_and_a_directions_limit_hold_and_the_rounding_stays_under_them() -> None:
    """The rebalancer's hold-downs: a flow's weight at most `upper`, a direction's load at most
    `limit`. Unbounded, the fast link here would carry 0.8 of the connection; with the slow
    flow's weight held at 0.1 it carries 0.9 and the slow one 0.1 (its utilization 0.4, not
    the 0.8 of the balance); with the fast direction's load limited to 70 Gb/s, 0.7 and 0.3.
    A connection's weights still sum to its share (to the 1e-9 each weight is rounded to), the
    remainder going to the flow with room under its bound."""
    terms = {SLOW: [(100.0, "a")], FAST: [(100.0, "b")]}
    caps = {SLOW: 25.0, FAST: 100.0}
    held = balance({"c": ["a", "b"]}, {"c": 1.0}, terms, {}, caps, upper={"a": 0.1})
    assert held is not None and held.weights["a"] <= 0.1 and held.weights["b"] == pytest.approx(0.9)
    assert held.weights["a"] + held.weights["b"] == 1.0
    limited = balance({"c": ["a", "b"]}, {"c": 1.0}, terms, {}, caps, limit={FAST: 70.0})
    assert limited is not None and limited.weights["b"] == pytest.approx(0.7) and limited.weights["a"] == pytest.approx(0.3)
    assert limited.max_utilization == pytest.approx(1.2)
    thirds = balance({"c": ["a", "b", "c"]}, {"c": 1.0}, {FAST: [(100.0, "a"), (100.0, "b"), (100.0, "c")]}, {},
                     {FAST: 100.0}, upper={"a": 1 / 3, "b": 1 / 3})
    assert thirds is not None and thirds.weights["a"] <= 1 / 3 and thirds.weights["b"] <= 1 / 3
    assert sum(thirds.weights.values()) == pytest.approx(1.0, abs=1e-8)  # (rounded to 1e-9 per weight)
