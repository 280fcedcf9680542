"""Bipartite edge colouring (König): proper, with exactly max-degree colours, on random multigraphs."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from controller.domain.fabric import LinkState
from controller.te.candidates import for_fabric
from controller.te.colouring import colour, uniform_spines
from controller.topology.build import with_link_state
from controller.topology.generate import Clos3Spec, LeafSpineSpec, clos3, leaf_spine


@pytest.mark.parametrize("seed", range(12))
def test_colouring_is_proper_with_max_degree_colours(seed: int) -> None:
    rng = random.Random(seed)
    left, right = [f"l{i}" for i in range(rng.randint(1, 6))], [f"r{i}" for i in range(rng.randint(1, 6))]
    edges = [(rng.choice(left), rng.choice(right)) for _ in range(rng.randint(1, 120))]
    degree = max(max(Counter(u for u, _ in edges).values()), max(Counter(v for _, v in edges).values()))
    got = colour(edges, degree)
    assert all(0 <= c < degree for c in got)
    assert len({(u, c) for (u, _), c in zip(edges, got, strict=True)}) == len(edges)
    assert len({(v, c) for (_, v), c in zip(edges, got, strict=True)}) == len(edges)


def test_the_exact_method_applies_only_to_healthy_uniform_two_tier_fabrics() -> None:
    ls = leaf_spine(LeafSpineSpec(leaves=4, spines=2, hosts_per_leaf=1))
    assert uniform_spines(for_fabric(ls).view) is not None
    down = with_link_state(ls, next(x.name for x in ls.links if not x.is_host_link), LinkState.DOWN)
    assert uniform_spines(for_fabric(down).view) is None
    assert uniform_spines(for_fabric(clos3(Clos3Spec(pods=2, leaves_per_pod=2, spines_per_pod=2, cores=2,
                                                       hosts_per_leaf=1))).view) is None


def test_load_unit_is_the_common_rational_divisor() -> None:
    from controller.te.bound import load_unit

    assert load_unit([100.0, 200.0]) == 100.0
    assert load_unit([400 / 3, 200.0]) == pytest.approx(200 / 3)
    assert load_unit([50.0]) == 50.0
    assert load_unit([]) is None
