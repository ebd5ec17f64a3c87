"""What SSE and WebSocket streams share as push producers of their
connection: the socket's buffer filling pauses them (the session stops
writing to them; its events wait in its log), draining resumes them (the
session writes what waits)."""
from __future__ import annotations

from typing import Any


class StreamProducer:
    """IPushProducer for a stream delivery with ``session`` and ``sessions``."""

    paused = False
    session: Any = None
    sessions: Any = None

    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        if self.paused:
            self.paused = False
            if self.session is not None:
                self.sessions.resume_writing(self.session, self)

    def stopProducing(self) -> None:
        self.paused = True
