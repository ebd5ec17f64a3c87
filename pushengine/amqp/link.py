"""``PublishLink``: a connection to RabbitMQ that only publishes, with
publisher confirms, and reconnects by itself (the relay ``pushengine-cdc``).

It is ``AmqpFeed``'s connecting part without a queue: a ``ClientService``
over a ``HandshakeEndpoint`` (a connection counts once logged in, the
exchange declared and a channel in confirm mode), capped exponential back-off
with jitter. ``on_ready`` is called on each connection made, ``on_lost`` when
it goes, before the messages then unconfirmed fail: the relay holds, and sends
them again on the next ``on_ready``.
"""
from __future__ import annotations

import struct
from typing import Any, Callable, Generator, Mapping, Sequence

from twisted.internet.defer import Deferred, fail, gatherResults, inlineCallbacks, succeed
from twisted.internet.endpoints import HostnameEndpoint
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.amqp.codec import Writer
from pushengine.amqp.connection import (
    Channel, FeedClient, HandshakeEndpoint, ReadyClientFactory, describe)
from pushengine.amqp.feed import _first_failure, _QuietClientService, default_retry_policy
from pushengine.amqp.publisher import (
    ConfirmPublisher, NotConnected, PublishFailed, copy_properties, message_properties,
    new_message_id)
from pushengine.amqp.url import AmqpUrl, parse_amqp_url

log = Logger()

_frame_head = struct.Struct("!BHI")
_method_head = struct.Struct("!HHH")        # class, method, reserved-1
_header_head = struct.Struct("!HHQH")       # class, weight, body size, property flags
_u32 = struct.Struct("!I")
_FRAME_END = b"\xce"
_METHOD, _HEADER, _BODY = 1, 2, 3
_BASIC, _PUBLISH = 60, 40
# basic's content properties in order, with their flag bit and field type
_PROPERTIES = (("content-type", 15, "shortstr"), ("content-encoding", 14, "shortstr"),
               ("headers", 13, "table"), ("delivery-mode", 12, "octet"),
               ("priority", 11, "octet"), ("correlation-id", 10, "shortstr"),
               ("reply-to", 9, "shortstr"), ("expiration", 8, "shortstr"),
               ("message-id", 7, "shortstr"), ("timestamp", 6, "longlong"),
               ("type", 5, "shortstr"), ("user-id", 4, "shortstr"),
               ("app-id", 3, "shortstr"))


def _shortstr(text: str) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) > 255:
        raise ValueError("a short string is at most 255 bytes")
    return bytes((len(raw),)) + raw


def _table(values: Mapping[str, Any]) -> bytes:
    """A field table; text values (the relay's headers) without the codec's
    general path."""
    parts = []
    for key, value in values.items():
        if type(value) is str:
            raw = value.encode("utf-8")
            parts += [_shortstr(key), b"S", _u32.pack(len(raw)), raw]
        else:
            writer = Writer()
            writer.shortstr(key)
            writer.value(value)
            parts.append(writer.getvalue())
    body = b"".join(parts)
    return _u32.pack(len(body)) + body


def publish_frames(channel: int, exchange: str, routing_key: str, body: bytes,
                   properties: Mapping[str, Any], frame_max: int) -> bytes:
    """The bytes of one ``basic.publish`` with its content: the method frame,
    the content header and the body in frames of at most ``frame_max``
    bytes (txamqp's path writes the same frames through a Deferred queue
    and inlineCallbacks per message, the cost that bounded the relay)."""
    method = _method_head.pack(_BASIC, _PUBLISH, 0) + _shortstr(exchange) + \
        _shortstr(routing_key) + b"\x00"
    flags = 0
    fields: list[bytes] = []
    for name, bit, kind in _PROPERTIES:
        value = properties.get(name)
        if value is None:
            continue
        flags |= 1 << bit
        if kind == "shortstr":
            fields.append(_shortstr(value))
        elif kind == "table":
            fields.append(_table(value))
        else:
            writer = Writer()
            writer.encode(kind, value)
            fields.append(writer.getvalue())
    header = _header_head.pack(_BASIC, 0, len(body), flags) + b"".join(fields)
    parts = [_frame_head.pack(_METHOD, channel, len(method)), method, _FRAME_END,
             _frame_head.pack(_HEADER, channel, len(header)), header, _FRAME_END]
    chunk = max(1, frame_max - 8) if frame_max > 0 else len(body) or 1
    for start in range(0, len(body), chunk):
        piece = body[start:start + chunk]
        parts += [_frame_head.pack(_BODY, channel, len(piece)), piece, _FRAME_END]
    return b"".join(parts)


class _FramePublisher(ConfirmPublisher):
    """A ``ConfirmPublisher`` that writes each message's frames at once
    (``publish_frames``) instead of through txamqp's channel methods; the
    confirms are handled as before."""

    def __init__(self, channel: Channel, exchange: str, client: FeedClient) -> None:
        super().__init__(channel, exchange)
        self.client = client

    def publish(self, body: bytes, properties: dict[str, Any],
                routing_key: str = "") -> Deferred[Any]:
        transport = self.client.transport
        if self.channel.closed or transport is None:
            return fail(NotConnected("the publishing channel is closed"))
        tag = self._next_tag
        self._next_tag += 1
        confirmed: Deferred[Any] = Deferred()
        self._pending[tag] = confirmed
        transport.write(publish_frames(self.channel.id, self.exchange, routing_key, body,
                                       properties, self.client.MAX_LENGTH))
        return confirmed

    def confirmed(self, delivery_tag: int, multiple: bool, ack: bool) -> None:
        """As ``ConfirmPublisher.confirmed``, looking only at the tags it
        answers: tags grow, and ``_pending`` keeps them in that order (with
        a thousand messages in flight, going through all of them for every
        ``multiple`` answer was a tenth of the relay's time)."""
        pending = self._pending
        if multiple:
            tags = []
            for tag in pending:
                if tag > delivery_tag:
                    break
                tags.append(tag)
        else:
            tags = [delivery_tag] if delivery_tag in pending else []
        for tag in tags:
            d = pending.pop(tag)
            if ack:
                d.callback(None)
            else:
                d.errback(PublishFailed("the broker refused the message (basic.nack)"))


class _Connection:
    """One connection that is up: its client and confirming publisher; the
    client's listener."""

    def __init__(self, link: PublishLink, client: FeedClient,
                 publisher: ConfirmPublisher) -> None:
        self.link = link
        self.client = client
        self.publisher = publisher
        self.dropped = False

    def confirmed(self, channel: Channel, delivery_tag: int, multiple: bool, ack: bool) -> None:
        if channel is self.publisher.channel:
            self.publisher.confirmed(delivery_tag, multiple, ack)

    def consumer_cancelled(self, channel: Channel, consumer_tag: str) -> None:
        pass

    def channel_failed(self, channel: Channel, reason: Failure) -> None:
        # the exchange was deleted, a frame refused...: start afresh
        self.link._drop(self, f"the broker closed channel {channel.id}: {describe(reason)}")


class PublishLink:
    """Publishes to ``exchange`` (declared durable, ``exchange_type``) on
    ``url``, reconnecting until ``stop``."""

    def __init__(self, reactor: IReactorTime, url: str | AmqpUrl, exchange: str, *,
                 exchange_type: str = "fanout", name: str = "pushengine",
                 heartbeat: int = 10,
                 retry_policy: Callable[[int], float] | None = None,
                 connect_timeout: float = 10.0, handshake_timeout: float = 30.0,
                 on_ready: Callable[[], None] | None = None,
                 on_lost: Callable[[], None] | None = None) -> None:
        self.reactor = reactor
        self.url = parse_amqp_url(url) if isinstance(url, str) else url
        self.exchange = exchange
        self.exchange_type = exchange_type
        self.name = name
        self.heartbeat = heartbeat
        self.on_ready = on_ready
        self.on_lost = on_lost
        self._connection: _Connection | None = None
        self._stopping = False
        self._failed_attempts = 0
        self._last_failure: str | None = None
        self._connected_before = False
        self.connects = 0
        self.reconnects = 0
        self.connect_failures = 0
        self.messages_published = 0     # publish calls (a message under two keys: 1)
        tcp = HostnameEndpoint(reactor, self.url.host, self.url.port, timeout=connect_timeout)
        ready = ReadyClientFactory()
        endpoint = HandshakeEndpoint(tcp, self._build_client, self._handshake, ready, reactor,
                                     handshake_timeout=handshake_timeout,
                                     on_failure=self._attempt_failed)
        self.service = _QuietClientService(
            endpoint, ready, retryPolicy=retry_policy or default_retry_policy(), clock=reactor)

    @property
    def connected(self) -> bool:
        return self._connection is not None

    def start(self) -> None:
        if self.service.running:
            return
        self._stopping = False
        log.info("AMQP: connecting to {url} to publish to {exchange}", url=str(self.url),
                 exchange=self.exchange)
        self.service.startService()

    def stop(self) -> Deferred[None]:
        """Close the connection politely (2 s at most) and stop retrying."""
        if not self.service.running:
            return succeed(None)
        self._stopping = True
        connection = self._connection
        closing: Deferred[Any] = succeed(None)
        if connection is not None:
            closing = connection.client.close(within=2)
            closing.addErrback(lambda f: log.failure("AMQP: error while closing", f))
        closing.addCallback(lambda _: self.service.stopService())
        closing.addCallback(lambda _: None)
        closing.addErrback(lambda f: log.failure("AMQP: error while stopping", f))
        return closing

    def publish(self, body: bytes, keys: Sequence[str], headers: dict[str, str]) -> Deferred[Any]:
        """Publish ``body`` under each of ``keys`` (one key: one message;
        more: copies with one message id and the ``copies`` header), with
        ``headers`` added to the message's; fire once the broker confirmed
        every copy, fail with NotConnected or PublishFailed otherwise."""
        connection = self._connection
        if connection is None:
            return fail(NotConnected(f"not connected to {self.url}"))
        now = self.reactor.seconds()
        publisher = connection.publisher
        self.messages_published += 1
        if len(keys) == 1:
            properties = message_properties(now)
            properties["headers"].update(headers)
            return publisher.publish(body, properties, routing_key=keys[0])
        properties = copy_properties(now, new_message_id(), len(keys))
        properties["headers"].update(headers)
        sent = gatherResults([publisher.publish(body, properties, routing_key=key)
                              for key in keys], consumeErrors=True)
        return sent.addErrback(_first_failure)

    def health(self) -> dict[str, Any]:
        return {"up": self.connected, "broker": str(self.url), "exchange": self.exchange,
                "error": self._last_failure}

    def stats(self) -> dict[str, float]:
        unconfirmed = self._connection.publisher.unconfirmed if self._connection else 0
        return {"connected": 1 if self.connected else 0, "reconnects": self.reconnects,
                "connect_failures": self.connect_failures,
                "messages_published": self.messages_published,
                "unconfirmed": unconfirmed}

    # connecting

    def _build_client(self) -> FeedClient:
        return FeedClient(self.url.vhost, heartbeat=self.heartbeat, clock=self.reactor,
                          connection_name=self.name)

    @inlineCallbacks
    def _handshake(self, client: FeedClient) -> Generator[Deferred[Any], Any, None]:
        yield client.authenticate(self.url.username, self.url.password)
        channel = yield client.open_channel()
        yield channel.exchange_declare(exchange=self.exchange, type=self.exchange_type,
                                       durable=True)
        channel = yield client.open_channel()
        yield channel.confirm_select()
        publisher = _FramePublisher(channel, self.exchange, client)
        connection = _Connection(self, client, publisher)
        client.listener = connection
        self._connected(connection)

    def _connected(self, connection: _Connection) -> None:
        transport = connection.client.transport
        if transport is not None and hasattr(transport, "setTcpNoDelay"):
            # small messages go out at once, not after the broker's delayed
            # ACK of the previous write (Nagle): the confirms' latency bounds
            # the rate of a relay publishing one message per change
            transport.setTcpNoDelay(True)
        self._connection = connection
        failed, self._failed_attempts = self._failed_attempts, 0
        self._last_failure = None
        self.connects += 1
        if self._connected_before:
            self.reconnects += 1
        self._connected_before = True
        log.info("AMQP: connected to {url}{after}", url=str(self.url),
                 after=f" (after {failed} failed attempts)" if failed else "")
        connection.client.disconnected.wait().addCallback(
            lambda _: self._disconnected(connection)).addErrback(
            lambda f: log.failure("AMQP: disconnect handling failed", f))
        if self.on_ready is not None:
            try:
                self.on_ready()
            except Exception:
                log.failure("AMQP: on_ready failed")

    def _disconnected(self, connection: _Connection) -> None:
        if self._connection is connection:
            self._connection = None
            if self.on_lost is not None:
                try:
                    self.on_lost()
                except Exception:
                    log.failure("AMQP: on_lost failed")
        connection.publisher.fail_all("the connection was lost before the broker confirmed")
        if not self._stopping and not connection.dropped:
            log.warn("AMQP: lost the connection to {url}: {reason}; reconnecting",
                     url=str(self.url), reason=connection.client.loss_reason())

    def _drop(self, connection: _Connection, why: str) -> None:
        if connection.dropped:
            return
        connection.dropped = True
        log.warn("AMQP: {why}; reconnecting", why=why)
        connection.client.close(within=2).addErrback(
            lambda f: log.failure("AMQP: error while closing", f))

    def _attempt_failed(self, failure: Failure) -> None:
        self._failed_attempts += 1
        self.connect_failures += 1
        if self._stopping:
            return
        text = describe(failure)
        if text != self._last_failure:
            self._last_failure = text
            log.warn("AMQP: cannot connect to {url}: {reason}; retrying with back-off",
                     url=str(self.url), reason=text)
