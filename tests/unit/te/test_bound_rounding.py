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
