"""A twisted.web Request that refuses bodies above a size limit.

twisted.web reads the whole body (spooling large ones to disk) before
``render`` runs and has no limit of its own; this request stops keeping the
body once it passes ``max_body`` and marks itself, so the handler answers 413
without ever holding the excess.
"""
from __future__ import annotations

from twisted.web.server import Request


class LimitedRequest(Request):
    max_body = 1 << 20
    body_too_large = False
    _received = 0

    def gotLength(self, length: int | None) -> None:
        if length is not None and length > self.max_body:
            self.body_too_large = True
            length = 0
        super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:
        self._received += len(data)
        if self._received > self.max_body:
            self.body_too_large = True
        if not self.body_too_large:
            super().handleContentChunk(data)


def limited_request_factory(max_body: int) -> type[LimitedRequest]:
    return type("LimitedRequest", (LimitedRequest,), {"max_body": max_body})
