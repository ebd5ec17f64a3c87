"""The clock the edge and the streams are given (the reactor, or a test's
``twisted.internet.task.Clock``), as the typing Protocols they use of it."""
from __future__ import annotations

from typing import Any, Callable, Protocol


class Timer(Protocol):
    """A call scheduled with ``Clock.callLater`` (``IDelayedCall``)."""

    def active(self) -> bool: ...

    def cancel(self) -> None: ...

    def reset(self, seconds: float) -> None: ...


class Clock(Protocol):
    """``IReactorTime``: the time, and calls scheduled on it."""

    def seconds(self) -> float: ...

    def callLater(self, delay: float, callable: Callable[..., Any], *args: Any,
                  **kw: Any) -> Timer: ...
