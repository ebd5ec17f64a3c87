"""A change feed run as a twisted.application service: the one wrapper
every feed (in-process, RabbitMQ, the WAL) is started and stopped with."""
from __future__ import annotations

from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred

from pushengine.core.interfaces import ChangeFeed, ChangeSink


class FeedService(Service):
    """Starts ``feed`` into ``sink`` when the application starts; its stop
    waits for the feed's."""

    def __init__(self, feed: ChangeFeed, sink: ChangeSink) -> None:
        self.feed = feed
        self.sink = sink

    def startService(self) -> None:
        super().startService()
        self.feed.start(self.sink)

    def stopService(self) -> Deferred[Any] | None:
        super().stopService()
        return self.feed.stop()
