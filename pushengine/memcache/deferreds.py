"""Small Deferred helpers for the structures."""
from __future__ import annotations

import functools
from typing import Any, Callable, Coroutine

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater


def as_deferred(fn: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Deferred]:
    """Make an ``async def`` method return a Deferred (the Twisted edge)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Deferred:
        return Deferred.fromCoroutine(fn(*args, **kwargs))

    return wrapper


def sleep(clock: IReactorTime, seconds: float) -> Deferred:
    """Fire after ``seconds`` on ``clock``."""
    return deferLater(clock, seconds, lambda: None)
