"""Small Deferred helpers for the structures."""
from __future__ import annotations

import functools
from typing import Any, Callable, Coroutine, ParamSpec, TypeVar

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater

P = ParamSpec("P")
T = TypeVar("T")


def as_deferred(fn: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, Deferred[T]]:
    """Make an ``async def`` method return a Deferred (the Twisted edge)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Deferred[T]:
        return Deferred.fromCoroutine(fn(*args, **kwargs))

    return wrapper


def sleep(clock: IReactorTime, seconds: float) -> Deferred[None]:
    """Fire after ``seconds`` on ``clock``."""
    return deferLater(clock, seconds, lambda: None)
