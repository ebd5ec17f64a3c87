"""A twisted.web Request that refuses bodies above a size limit.

twisted.web reads the whole body (spooling large ones to disk) before
``render`` runs and has no limit of its own. This request answers 413 as soon
as it knows the body is too large: from the Content-Length header, before any
of the body is read (or, for a chunked body, once the received chunks pass the
limit). It never keeps the excess; the rest of the body is read and dropped,
and the connection is closed instead of the request being processed.
"""
from __future__ import annotations

import json

from twisted.web.server import Request

_MESSAGE = "the request body is too large"
SEGMENT_UPLOADS = b"/api/segments/"


def _too_large(path: bytes, max_body: int) -> bytes:
    message = f"{_MESSAGE} (at most {max_body} bytes)"
    if path.startswith(b"/api/jsonrpc"):
        body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
    else:
        body = {"error": message}
    data = json.dumps(body, separators=(",", ":")).encode()
    return (b"HTTP/1.1 413 Request Entity Too Large\r\n"
            b"Content-Type: application/json\r\n"
            b"Content-Length: %d\r\n"
            b"Connection: close\r\n\r\n" % len(data)) + data


class LimitedRequest(Request):
    # an answer that names no type of its own (a bare error text of klein or
    # twisted.web) must not pass for an HTML page
    defaultContentType = b"text/plain; charset=utf-8"
    max_body = 1 << 20
    max_segment_body: int | None = None   # POST /api/segments/NAME (SPEC 15)
    body_too_large = False
    _received = 0

    def _limit(self) -> int:
        """The body limit of this request: segment uploads have their own."""
        if self.max_segment_body is not None and getattr(
                self.channel, "_path", b"").startswith(SEGMENT_UPLOADS):
            return max(self.max_segment_body, self.max_body)
        return self.max_body

    def gotLength(self, length: int | None) -> None:
        self.max_body = self._limit()
        if length is not None and length > self.max_body:
            self._refuse()
            length = 0
        super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:
        self._received += len(data)
        if self._received > self.max_body and not self.body_too_large:
            self._refuse()
        if not self.body_too_large:
            super().handleContentChunk(data)

    def _refuse(self) -> None:
        """Answer 413 now, before the body has arrived."""
        self.body_too_large = True
        channel = self.channel
        if channel is None or channel.transport is None:
            return
        # a final answer is given: "Expect: 100-continue" must not be honoured
        self.requestHeaders.removeHeader(b"expect")
        channel.transport.write(_too_large(getattr(channel, "_path", b"") or b"",
                                           self.max_body))

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if self.body_too_large:
            # answered already; the body was read and dropped: nothing to process
            self.loseConnection()
            return
        super().requestReceived(command, path, version)


def limited_request_factory(max_body: int,
                            max_segment_body: int | None = None) -> type[LimitedRequest]:
    return type("LimitedRequest", (LimitedRequest,), {"max_body": max_body,
                                                      "max_segment_body": max_segment_body})
