"""A twisted.web Request that refuses bodies above the policy's size limit.

twisted.web reads the whole body (spooling large ones to disk) before
``render`` runs and has no limit of its own. This request answers 413 as soon
as it knows the body is too large: from the Content-Length header, before any
of the body is read (or, for a chunked body, once the received chunks pass the
limit). It never keeps the excess; the rest of the body is read and dropped,
and the connection is closed instead of the request being processed. The
limit and the answer are the edge's (``policy.py``), as on the fast front.
"""
from __future__ import annotations

from twisted.web.server import Request

from pushengine.web.policy import LINGER_BYTES, HttpPolicy, too_large


class LimitedRequest(Request):
    # an answer that names no type of its own (a bare error text of klein or
    # twisted.web) must not pass for an HTML page
    defaultContentType = b"text/plain; charset=utf-8"
    policy = HttpPolicy()
    max_body = policy.max_body
    body_too_large = False
    _received = 0
    _dropped = 0                        # body bytes read and dropped after a refusal

    def _target(self) -> tuple[bytes, bytes]:
        """The method and the path (without its query) of the request being read."""
        channel = self.channel
        return (getattr(channel, "_command", b"") or b"",
                (getattr(channel, "_path", b"") or b"").partition(b"?")[0])

    def gotLength(self, length: int | None) -> None:
        self.max_body = self.policy.body_limit(*self._target())
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
        else:
            self._dropped += len(data)
            if self._dropped > LINGER_BYTES:
                # read and dropped for long enough (lingering close): close now
                channel = self.channel
                if channel is not None and channel.transport is not None:
                    channel.transport.loseConnection()

    def _refuse(self) -> None:
        """Answer 413 now, before the body has arrived."""
        self.body_too_large = True
        channel = self.channel
        if channel is None or channel.transport is None:
            return
        # a final answer is given: "Expect: 100-continue" must not be honoured
        self.requestHeaders.removeHeader(b"expect")
        channel.transport.write(too_large(self._target()[1], self.max_body))

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if self.body_too_large:
            # answered already; the body was read and dropped: nothing to process
            self.loseConnection()
            return
        super().requestReceived(command, path, version)


def limited_request_factory(policy: HttpPolicy) -> type[LimitedRequest]:
    return type("LimitedRequest", (LimitedRequest,), {"policy": policy})
