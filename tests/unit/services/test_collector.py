"""services.collector: pauses nest, big survivors are frozen, maintenance collects frozen cycles.

A full collection of the test process's heap takes seconds once the suite has run (it holds
millions of objects), so nothing here collects in process: freezing is undone with the cheap
`gc.unfreeze`, and the maintenance cases (which collect) run in a fresh interpreter."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.services import collector

ROOT = Path(__file__).resolve().parents[3]


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    gc.unfreeze()  # (moves the permanent generation back to the oldest: no scan)
    if not was:
        gc.disable()


def test_a_pause_that_leaves_many_objects_alive_freezes_them_and_the_collector_comes_back() -> None:
    before = gc.get_freeze_count()
    with collector.paused():
        assert not gc.isenabled()
        kept = [Node() for _ in range(collector.FREEZE_AT + 1000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= before + len(kept)
    assert gc.get_count()[0] < 1000  # the next young collection does not scan them
    frozen = gc.get_freeze_count()
    n = len(kept)
    kept.clear()  # reference counting still frees them
    assert gc.get_freeze_count() <= frozen - n


def test_a_small_pause_freezes_nothing() -> None:
    gc.collect(0)  # (the young generation only: cheap) so that the pause starts near empty
    before = gc.get_freeze_count()
    with collector.paused():
        kept = [Node() for _ in range(100)]
    assert gc.get_freeze_count() == before
    assert len(kept) == 100


def test_nested_and_concurrent_pauses_keep_the_collector_off_until_the_last_ends() -> None:
    inside = threading.Event()
    leave = threading.Event()

    def other() -> None:
        with collector.paused():
            inside.set()
            leave.wait(5)

    t = threading.Thread(target=other)
    with collector.paused():
        t.start()
        assert inside.wait(5)
    assert not gc.isenabled()  # the other thread still holds its pause
    leave.set()
    t.join(5)
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled_after_a_pause() -> None:
    gc.disable()
    with collector.paused():
        pass
    assert not gc.isenabled()


def test_lasting_freezes_whatever_it_built() -> None:
    before = gc.get_freeze_count()
    with collector.lasting():
        kept = [Node() for _ in range(10)]
    assert gc.get_freeze_count() >= before + len(kept)
    assert gc.isenabled()


def _fresh(code: str) -> None:
    """Run `code` in a fresh interpreter (a small heap: its full collections are quick)."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]


def test_maintenance_collects_a_cycle_that_a_freeze_kept() -> None:
    _fresh("""
        import gc, weakref
        from controller.services import collector
        class Node: pass
        a, b = Node(), Node()
        a.other, b.other = b, a
        probe = weakref.ref(a)
        collector.freeze()
        del a, b
        gc.collect()
        assert probe() is not None  # frozen: no collection sees the cycle
        assert collector.maintain() >= 0
        assert probe() is None
        assert gc.get_freeze_count() > 0  # what is alive is frozen again
    """)


def test_maintenance_waits_while_a_pause_is_held_and_until_its_interval_has_passed() -> None:
    _fresh("""
        import gc, weakref
        from controller.services import collector
        class Node: pass
        def frozen_cycle():
            a, b = Node(), Node()
            a.other, b.other = b, a
            probe = weakref.ref(a)
            collector.freeze()
            return probe
        probe = frozen_cycle()
        with collector.paused():
            assert collector.maintain() == 0.0  # a pause is held: later
        assert gc.isenabled() and probe() is not None
        collector.maintain()  # no interval asked: now
        assert probe() is None
        probe = frozen_cycle()
        assert collector.maintain(3600.0) == 0.0  # not again within the interval
        assert probe() is not None
    """)


def test_the_frozen_gauge_is_counted_when_scraped_not_on_every_freeze() -> None:
    """`gc.get_freeze_count` walks the whole permanent generation (a fabric PUT in this test
    process spent ~100 ms in it); the gauge reads it at scrape time instead."""
    from prometheus_client import REGISTRY

    keep = [Node() for _ in range(1000)]
    collector.freeze()
    assert REGISTRY.get_sample_value("c4_gc_frozen_objects") == gc.get_freeze_count() >= len(keep)
    gc.unfreeze()
    assert REGISTRY.get_sample_value("c4_gc_frozen_objects") == gc.get_freeze_count() == 0
