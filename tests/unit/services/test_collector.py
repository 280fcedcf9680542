"""services.collector: pauses nest, big survivors are frozen, maintenance collects frozen cycles."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator

import pytest

from controller.services import collector


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    gc.collect()
    gc.unfreeze()
    was = gc.isenabled()
    gc.enable()
    yield
    gc.unfreeze()
    gc.collect()
    if not was:
        gc.disable()


def test_a_pause_that_leaves_many_objects_alive_freezes_them_and_the_collector_comes_back() -> None:
    with collector.paused():
        assert not gc.isenabled()
        kept = [Node() for _ in range(collector.FREEZE_AT + 1000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(kept)
    assert gc.get_count()[0] < 1000  # the next young collection does not scan them
    frozen = gc.get_freeze_count()
    n = len(kept)
    kept.clear()  # reference counting still frees them
    assert gc.get_freeze_count() <= frozen - n


def test_a_small_pause_freezes_nothing() -> None:
    with collector.paused():
        kept = [Node() for _ in range(100)]
    assert gc.get_freeze_count() == 0
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


def test_maintenance_collects_a_cycle_that_a_freeze_kept() -> None:
    a, b = Node(), Node()
    a.other, b.other = b, a
    probe = weakref.ref(a)
    collector.freeze()
    del a, b
    gc.collect()
    assert probe() is not None  # frozen: no collection sees the cycle
    took = collector.maintain()
    assert probe() is None
    assert took >= 0
    assert gc.get_freeze_count() > 0  # what is alive is frozen again


def test_maintenance_waits_while_a_pause_is_held_and_until_its_interval_has_passed() -> None:
    with collector.paused():
        assert collector.maintain() == 0.0
    assert gc.isenabled()
    a, b = Node(), Node()
    a.other, b.other = b, a
    probe = weakref.ref(a)
    collector.freeze()
    del a, b
    collector.maintain()  # collects now (no interval asked) ...
    assert probe() is None
    c, d = Node(), Node()
    c.other, d.other = d, c
    probe = weakref.ref(c)
    collector.freeze()
    del c, d
    assert collector.maintain(3600.0) == 0.0  # ... and not again within the interval
    assert probe() is not None


def test_lasting_freezes_whatever_it_built() -> None:
    with collector.lasting():
        kept = [Node() for _ in range(10)]
    assert gc.get_freeze_count() >= len(kept)
    assert gc.isenabled()
