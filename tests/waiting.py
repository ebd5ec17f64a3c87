"""Waiting for a condition, never for a fixed time.

A test that drives a real process (``twistd``, memcached, Redis, Chromium)
cannot know when the process has done what it was asked; it waits until it
can see that it has: ``wait_until(check)`` calls ``check()`` every
``interval`` seconds until it returns something true, and returns that, or
fails after ``timeout`` seconds saying ``what`` it waited for and the last
value it saw. A negative ("nothing else arrives") is waited for through a
positive that must come after it: a marker sent behind the thing that must
not happen, or a counter that says every answer is in.

Time inside the test process is never waited for: a ``Clock`` is advanced
(``tests/deferreds.py`` says how Deferred tests are written, and has the
reactor-side ``eventually`` for in-process tests on real sockets).

``sleep`` replaces ``time.sleep`` between two looks when something else
must run meanwhile: a Playwright page passes ``page_sleep(page)``, so that
its events (console messages, responses) are taken in while waiting.
"""
from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_until(check: Callable[[], T], timeout: float = 10.0, what: str = "the condition",
               interval: float = 0.02,
               sleep: Callable[[float], object] = time.sleep) -> T:
    """``check()``'s first true value, looked at every ``interval`` seconds
    for up to ``timeout`` seconds; AssertionError after that."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s (last: {value!r})")
        sleep(interval)


def page_sleep(page: object) -> Callable[[float], object]:
    """A ``sleep`` for ``wait_until`` that lets a Playwright page handle its
    events meanwhile (``time.sleep`` would hold them back)."""
    return lambda seconds: page.wait_for_timeout(seconds * 1000)  # type: ignore[attr-defined]
