"""The collector's settings of a running node (app/gcfreeze.py): frozen
after start-up, young collections every N allocations, nothing when 0."""
from __future__ import annotations

import gc
from typing import Any

import pytest

from pushengine.app import gcfreeze


class Collector:
    """Records what is asked of it, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def collect(self) -> None:
        self.calls.append(("collect",))

    def freeze(self) -> None:
        self.calls.append(("freeze",))

    def set_threshold(self, *t: int) -> None:
        self.calls.append(("set_threshold", *t))


class Reactor:
    def __init__(self) -> None:
        self.when_running: list[tuple[Any, ...]] = []

    def callWhenRunning(self, f: Any, *args: Any) -> None:
        self.when_running.append((f, *args))


def test_garbage_is_collected_before_the_rest_is_frozen() -> None:
    c = Collector()
    assert gcfreeze.freeze(1000, c)
    assert c.calls == [("collect",), ("freeze",), ("set_threshold", 1000, 20, 100)]


def test_zero_changes_nothing() -> None:
    c = Collector()
    assert not gcfreeze.freeze(0, c)
    assert c.calls == []
    r = Reactor()
    gcfreeze.after_start(r, 0)
    assert r.when_running == []


def test_the_freeze_waits_for_the_reactor_to_run() -> None:
    r = Reactor()
    gcfreeze.after_start(r, 7000)
    assert r.when_running == [(gcfreeze.freeze, 7000)]


@pytest.fixture
def real_gc():
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def test_the_real_collector_is_frozen_and_its_threshold_raised(real_gc) -> None:
    held = [object() for _ in range(100)]
    gc.unfreeze()
    assert gcfreeze.freeze(12_345)
    assert gc.get_threshold() == (12_345, 20, 100)
    assert gc.get_freeze_count() >= len(held)
