"""What SSE and WebSocket streams share: the core's delivery interface as a
stream answers it, and push producers of their connection: the socket's
buffer filling pauses them (the session stops writing to them; its events
wait in its log), draining resumes them (the session writes what waits)."""
from __future__ import annotations

from typing import Any, Sequence

from pushengine.core.events import Fragment


class StreamProducer:
    """IPushProducer for a stream delivery with ``session`` and ``sessions``."""

    # a subclass sets these in its ``__init__`` (slots: a held stream is
    # one small object)
    __slots__ = ("paused", "session", "sessions")

    # a stream keeps its session from expiring (core.sessions.Delivery)
    holds_session = True
    paused: bool
    session: Any
    sessions: Any

    def notify(self, session: Any) -> None:
        """Events wait in ``session``'s log: write them if the client reads
        (they stay in the log as its replay buffer)."""
        if self.writable():
            self.sessions.events_out += session.log.write(self.write)

    def writable(self) -> bool:
        """False while the client is not reading (unsent bytes above the bound)."""
        raise NotImplementedError

    def write(self, first: int, fragments: Sequence[Fragment]) -> None:
        """Send these events, numbered from ``first`` (a fragment may be
        ``events.DROPPED``: skip it). Frame them now: the sequence is the
        session's own and changes after the call."""
        raise NotImplementedError

    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        if self.paused:
            self.paused = False
            if self.session is not None:
                self.sessions.resume_writing(self.session, self)

    def stopProducing(self) -> None:
        self.paused = True
