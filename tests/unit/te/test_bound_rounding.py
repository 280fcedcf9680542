"""`bound.rounded` and `bound.load_unit` (issue 18: both run for every summary)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from controller.te import bound


@dataclass
class _Group:
    demand_gbps: float


@dataclass
class _Inst:
    groups: list[_Group]
    background_gbps: np.ndarray
    capacity_gbps: np.ndarray


def test_a_unit_too_fine_to_count_in_leaves_the_bound_as_it_is() -> None:
    """Loads whose common unit is ~1e-300 made `ceil(bound * c / unit)` overflow (a whole
    planning batch failed with OverflowError); the bound is now returned unlifted."""
    inst = _Inst([_Group(1e-300)], np.array([]), np.array([200.0, np.inf]))
    assert bound.rounded(inst, 0.5) == 0.5  # type: ignore[arg-type]


def test_a_bound_is_lifted_to_the_next_achievable_value() -> None:
    inst = _Inst([_Group(50.0)], np.array([25.0]), np.array([200.0, np.inf]))
    assert bound.rounded(inst, 0.3) == 0.375  # type: ignore[arg-type]  # loads are multiples of 25 Gb/s


def test_load_unit_is_the_pairwise_gcd_of_the_fractions() -> None:
    rng = random.Random(3)
    for _ in range(500):
        demands = [400 / n for n in rng.sample(range(1, 25), 5)]
        values = sorted({sum(rng.choice(demands) for _ in range(rng.randint(1, 10))) for _ in range(50)})
        fracs = [Fraction(v).limit_denominator(1_000_000) for v in values]
        if any(abs(float(f) - v) > 1e-9 * max(1.0, v) for f, v in zip(fracs, values, strict=True)):
            assert bound.load_unit(values) is None
            continue
        unit = fracs[0]
        for f in fracs[1:]:
            unit = Fraction(math.gcd(unit.numerator * f.denominator, f.numerator * unit.denominator),
                            unit.denominator * f.denominator)
        assert bound.load_unit(values) == float(unit)


def _rounded_reference(inst: _Inst, b: float) -> float:
    """`rounded` as it was: the whole unit first (`load_unit`), then the lift."""
    if b <= 0:
        return b
    unit = bound.load_unit(sorted({g.demand_gbps for g in inst.groups}
                                  | {float(x) for x in inst.background_gbps if x > 0}))
    if unit is None or unit <= 0:
        return b
    caps = np.unique(inst.capacity_gbps[:-1])
    with np.errstate(over="ignore", divide="ignore"):
        steps = [float(b * c / unit) for c in caps]
    if not all(math.isfinite(k) and k < 2.0 ** 52 for k in steps):
        return b
    return float(max(b, min(math.ceil(k - 1e-7) * unit / c for k, c in zip(steps, caps, strict=True))))


def test_stopping_the_unit_once_too_fine_lifts_exactly_as_the_whole_unit() -> None:
    """`rounded` stops folding the unit once it is too fine to count in (issue 18: hundreds of
    background loads of many jobs made the exact unit most of a summary's bound): the same
    bound as computing the whole unit first, whether the unit is coarse or too fine."""
    rng = random.Random(7)
    lifted = unlifted = 0
    for _ in range(150):
        demands = [400 / n for n in rng.sample(range(1, rng.choice([3, 8, 60])), 2)]
        drawn = {sum(rng.choice(demands) for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(0, 40))}
        if rng.random() < 0.5:  # loads of other jobs' unrelated demands: a unit too fine to count in
            drawn |= {rng.randint(1, 10 ** 6) / rng.choice([999_983, 99_991, 65_537, 7_919])
                      for _ in range(rng.randint(1, 20))}
        loads = np.array([*sorted(drawn), 0.0])
        inst = _Inst([_Group(d) for d in demands], loads, np.array([200.0, 400.0, np.inf]))
        b = rng.uniform(0.01, 2.0)
        got = bound.rounded(inst, b)  # type: ignore[arg-type]
        assert got == _rounded_reference(inst, b)
        lifted += got > b
        unlifted += got == b
    assert lifted > 20 and unlifted > 20  # both cases occur
