"""`simulate.max_min_rates` drops frozen classes as it goes (issue 18: a summary runs it over
every active job's flows): exactly the rates of the definition, which works on every class
each round, on random fabrics of classes."""

from __future__ import annotations

import numpy as np
import pytest

from controller.te import simulate


@pytest.mark.parametrize("seed", range(30))
def test_rates_equal_the_definitions(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_links = int(rng.integers(3, 40))
    caps = np.concatenate([rng.choice([100.0, 200.0, 400.0, 50.0], n_links), [np.inf]])
    n = int(rng.integers(1, 300))
    width = int(rng.integers(1, 6))
    links = np.full((n, width), n_links, dtype=np.int64)
    for i in range(n):
        k = int(rng.integers(1, width + 1))
        links[i, :k] = rng.choice(n_links, k, replace=False)
    count = rng.integers(0, 5, n).astype(np.int64)
    demand = rng.choice([12.5, 25.0, 50.0, 100.0, 200.0 / 3], n)
    classes = simulate.FlowClasses(links, count, demand)
    got = simulate.max_min_rates(classes, caps)
    want = simulate.max_min_rates_reference(classes, caps)
    assert got.tolist() == want.tolist()  # bit for bit
    assert (got <= demand + 1e-9).all()
