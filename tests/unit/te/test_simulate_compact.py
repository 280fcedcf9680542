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


@pytest.mark.parametrize("seed", range(30))
def test_stopping_once_the_wanted_classes_froze_gives_their_exact_rates(seed: int) -> None:
    """A summary asks for its own job's classes only: the filling stops once they are all
    frozen, and their rates (so the bus bandwidth fraction) are the full run's, bit for bit."""
    rng = np.random.default_rng(1000 + seed)
    n_links = int(rng.integers(3, 40))
    caps = np.concatenate([rng.choice([100.0, 200.0, 400.0, 50.0], n_links), [np.inf]])
    n = int(rng.integers(2, 300))
    width = int(rng.integers(1, 6))
    links = np.full((n, width), n_links, dtype=np.int64)
    for i in range(n):
        k = int(rng.integers(1, width + 1))
        links[i, :k] = rng.choice(n_links, k, replace=False)
    classes = simulate.FlowClasses(links, rng.integers(0, 5, n).astype(np.int64),
                                   rng.choice([12.5, 25.0, 50.0, 100.0, 200.0 / 3], n))
    wanted = np.sort(rng.choice(n, int(rng.integers(1, max(2, n // 4))), replace=False)).astype(np.int64)
    full = simulate.max_min_rates(classes, caps)
    assert simulate.max_min_rates(classes, caps, wanted)[wanted].tolist() == full[wanted].tolist()
    assert simulate.member_fraction(classes, caps, wanted) == simulate.busbw_fraction(classes, full, wanted)


@pytest.mark.parametrize("seed", range(30))
def test_a_prepared_base_gives_the_fraction_of_the_classes_in_one(seed: int) -> None:
    """`member_fraction_with` (issue 18: a batch's summaries index every job's classes once,
    then take one job's flows out and put them back another way): the fraction of the same
    classes in one `FlowClasses`, bit for bit, with some base classes emptied."""
    rng = np.random.default_rng(2000 + seed)
    n_links = int(rng.integers(3, 40))
    caps = np.concatenate([rng.choice([100.0, 200.0, 400.0, 50.0], n_links), [np.inf]])
    demands = [12.5, 25.0, 50.0, 100.0, 200.0 / 3]

    def random_classes(n: int, width: int) -> simulate.FlowClasses:
        links = np.full((n, width), n_links, dtype=np.int64)
        for i in range(n):
            k = int(rng.integers(1, min(width, n_links) + 1))
            links[i, :k] = rng.choice(n_links, k, replace=False)
        return simulate.FlowClasses(links, rng.integers(1, 5, n).astype(np.int64), rng.choice(demands, n))

    base = random_classes(int(rng.integers(1, 300)), int(rng.integers(1, 6)))
    extra = random_classes(int(rng.integers(1, 12)), int(rng.integers(1, 6)))
    taken = rng.choice(len(base.count), int(rng.integers(0, len(base.count) + 1)), replace=False)
    minus = {int(i): int(rng.integers(1, base.count[i] + 1)) for i in taken}  # some emptied
    width = max(base.links.shape[1], extra.links.shape[1])
    links = np.full((len(base.count) + len(extra.count), width), n_links, dtype=np.int64)
    links[: len(base.count), : base.links.shape[1]] = base.links
    links[len(base.count):, : extra.links.shape[1]] = extra.links
    count = base.count.copy()
    for i, n in minus.items():
        count[i] -= n
    one = simulate.FlowClasses(links, np.concatenate([count, extra.count]),
                               np.concatenate([base.demand_gbps, extra.demand_gbps]))
    members = np.arange(len(base.count), len(one.count), dtype=np.int64)
    want = simulate.busbw_fraction(one, simulate.max_min_rates_reference(one, caps), members)
    prepared = simulate.prepare(base, caps)
    assert simulate.member_fraction_with(prepared, minus, extra, caps) == want
    assert simulate.member_fraction_with(prepared, minus, extra, caps) == want  # (the base is left as it was)
