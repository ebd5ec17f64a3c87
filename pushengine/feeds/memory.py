"""The in-process change feed of the embedded default: publish delivers at once."""
from __future__ import annotations

from typing import Any, Sequence

from twisted.internet.defer import Deferred, fail, succeed

from pushengine.core.changes import Change
from pushengine.core.interfaces import ChangeSink, FeedUnavailable


class FeedNotStarted(FeedUnavailable):
    pass


class MemoryFeed:
    def __init__(self) -> None:
        self.sink: ChangeSink | None = None
        self.published = 0

    def start(self, sink: ChangeSink) -> None:
        self.sink = sink

    def stop(self) -> None:
        self.sink = None

    def publish(self, changes: Sequence[Change]) -> Deferred:
        if self.sink is None:
            return fail(FeedNotStarted("the feed is not running"))
        self.published += len(changes)
        self.sink.apply_changes(list(changes))
        return succeed(len(changes))

    def health(self) -> dict[str, Any]:
        return {"up": self.sink is not None, "kind": "memory"}

    def stats(self) -> dict[str, float]:
        return {"messages": self.published, "connected": int(self.sink is not None)}
