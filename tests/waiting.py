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

import subprocess
import time
from typing import Callable, TypeVar

T = TypeVar("T")


class Deadline:
    """The end of a wait: ``check(value)`` fails once ``timeout`` seconds
    have passed, saying ``what`` was awaited and the last value seen."""

    def __init__(self, timeout: float, what: str) -> None:
        self.timeout = timeout
        self.what = what
        self.end = time.monotonic() + timeout

    def check(self, last: object) -> None:
        if time.monotonic() > self.end:
            raise AssertionError(f"{self.what} not reached within {self.timeout} s "
                                 f"(last: {last!r})")


def wait_until(check: Callable[[], T], timeout: float = 10.0, what: str = "the condition",
               interval: float = 0.02,
               sleep: Callable[[float], object] = time.sleep) -> T:
    """``check()``'s first true value, looked at every ``interval`` seconds
    for up to ``timeout`` seconds; AssertionError after that."""
    deadline = Deadline(timeout, what)
    while not (value := check()):
        deadline.check(value)
        sleep(interval)
    return value


def wait_listening(process: subprocess.Popen, port: int, timeout: float = 10.0,
                   interval: float = 0.02) -> str | None:
    """None once the child ``process`` listens on 127.0.0.1:``port``; else
    why not: "exited" (first) or "timed out"."""
    from tests.services import port_open
    try:
        up = wait_until(lambda: "exited" if process.poll() is not None
                        else port_open("127.0.0.1", port, timeout=0.2),
                        timeout, f"a child process listening on {port}", interval=interval)
    except AssertionError:
        return "timed out"
    return None if up is True else str(up)


def wait_serving(process: subprocess.Popen, healthy: Callable[[], bool], timeout: float,
                 log_text: Callable[[], str], stop: Callable[[], object],
                 name: str = "twistd") -> None:
    """Until a child process answers (``healthy()``, an OSError counting
    as not yet); the test fails with its output when it exits first, and is
    stopped when it does not answer within ``timeout`` seconds."""
    import pytest

    def ready() -> bool:
        if process.poll() is not None:
            out = process.stdout.read().decode("utf-8", "replace") if process.stdout else ""
            pytest.fail(f"{name} exited with {process.returncode}:\n{out}\n{log_text()}")
        try:
            return healthy()
        except OSError:
            return False
    try:
        wait_until(ready, timeout, f"{name} answering", interval=0.05)
    except AssertionError:
        stop()
        pytest.fail(f"{name} did not answer /health in {timeout} s:\n{log_text()}")


def page_sleep(page: object) -> Callable[[float], object]:
    """A ``sleep`` for ``wait_until`` that lets a Playwright page handle its
    events meanwhile (``time.sleep`` would hold them back)."""
    return lambda seconds: page.wait_for_timeout(seconds * 1000)  # type: ignore[attr-defined]
