"""Publishing change messages with publisher confirms.

A ``ConfirmPublisher`` owns one channel in confirm mode (``confirm.select``):
the broker numbers the messages published on it 1, 2, 3... and answers each
with ``basic.ack`` (it has the message: routed to every bound queue, and
written to disk for durable queues) or ``basic.nack``, possibly for several
at once (``multiple``).  ``publish`` returns a Deferred that fires on that
answer, so "published" means "the broker has it".

``connect_publisher`` opens a one-off connection for publishing only (the
``pushengine-publish`` command): no queue, no retry.
"""
from __future__ import annotations

import os
from itertools import count
from typing import Any, Generator, Iterable

from twisted.internet.defer import Deferred, DeferredList, fail, inlineCallbacks
from twisted.internet.endpoints import HostnameEndpoint
from twisted.internet.interfaces import IReactorTime
from twisted.internet.protocol import Factory
from twisted.python.failure import Failure
from txamqp.content import Content

from pushengine.amqp.connection import Channel, FeedClient, abort, describe
from pushengine.amqp.url import AmqpUrl, parse_amqp_url
from pushengine.core.interfaces import FeedUnavailable

CONTENT_TYPE = "application/json"
PERSISTENT = 2
TIMESTAMP_MS_HEADER = "timestamp_ms"
# interest mode: a message published under several routing keys (an object
# that moved from one routing value to another) says how many copies there
# are; the copies share a message id and a node applies the first it gets
COPIES_HEADER = "copies"


class NotConnected(FeedUnavailable):
    """There is no connection to the broker at the moment."""


class PublishFailed(FeedUnavailable):
    """The broker did not confirm a message: it refused it (``basic.nack``)
    or the connection was lost before its answer."""


_ID_PREFIX = os.urandom(8).hex() + "."
_ID_SEQUENCE = count(1)


def new_message_id() -> str:
    """A message id unique to this message: a random prefix chosen once per
    process and a counter (cheaper than a UUID per message). Consumers drop
    a redelivered message whose id they applied already."""
    return _ID_PREFIX + str(next(_ID_SEQUENCE))


def message_properties(now: float, message_id: str | None = None) -> dict[str, Any]:
    """Properties of a change message published at ``now`` (POSIX seconds),
    with ``message_id`` (a new one when not given).

    ``timestamp`` is the AMQP property (whole seconds); the ``timestamp_ms``
    header carries milliseconds so that the feed lag can be measured below
    one second.  It is a decimal string, not a 64-bit integer: consumers
    with a minimal field-table decoder (stock txamqp knows strings, 32-bit
    integers, tables and booleans only) must be able to read our messages.
    """
    return {
        "content-type": CONTENT_TYPE,
        "delivery-mode": PERSISTENT,
        "timestamp": int(now),
        "message-id": message_id or new_message_id(),
        "headers": {TIMESTAMP_MS_HEADER: str(int(now * 1000))},
    }


def copy_properties(now: float, message_id: str, copies: int) -> dict[str, Any]:
    """Properties of one of ``copies`` copies of a message (same body, one
    routing key each), all with ``message_id``."""
    properties = message_properties(now, message_id)
    properties["headers"][COPIES_HEADER] = str(copies)
    return properties


class ConfirmPublisher:
    """Publishes to one exchange on a channel in confirm mode."""

    def __init__(self, channel: Channel, exchange: str) -> None:
        self.channel = channel
        self.exchange = exchange
        self._next_tag = 1
        self._pending: dict[int, Deferred] = {}

    @classmethod
    @inlineCallbacks
    def open(cls, client: FeedClient,
             exchange: str) -> Generator[Deferred, Any, ConfirmPublisher]:
        """Open a channel on ``client``, switch it to confirm mode."""
        channel = yield client.open_channel()
        yield channel.confirm_select()
        return cls(channel, exchange)

    @property
    def unconfirmed(self) -> int:
        return len(self._pending)

    def publish(self, body: bytes, properties: dict[str, Any],
                routing_key: str = "") -> Deferred:
        """Publish ``body`` (with ``routing_key``: a topic exchange); fire
        with None once the broker confirmed it."""
        if self.channel.closed:
            return fail(NotConnected("the publishing channel is closed"))
        tag = self._next_tag
        self._next_tag += 1
        confirmed: Deferred = Deferred()
        self._pending[tag] = confirmed
        sent = self.channel.basic_publish(
            exchange=self.exchange, routing_key=routing_key,
            content=Content(body, properties=dict(properties)))
        sent.addErrback(self._send_failed, tag)
        return confirmed

    def _send_failed(self, failure: Failure, tag: int) -> None:
        confirmed = self._pending.pop(tag, None)
        if confirmed is not None:
            confirmed.errback(PublishFailed(
                f"the message could not be sent: {describe(failure)}"))

    def confirmed(self, delivery_tag: int, multiple: bool, ack: bool) -> None:
        """The broker's ``basic.ack``/``basic.nack`` for ``delivery_tag``."""
        if multiple:
            tags = [t for t in self._pending if t <= delivery_tag]
        else:
            tags = [delivery_tag] if delivery_tag in self._pending else []
        for tag in tags:
            d = self._pending.pop(tag)
            if ack:
                d.callback(None)
            else:
                d.errback(PublishFailed("the broker refused the message (basic.nack)"))

    def fail_all(self, reason: str) -> None:
        """The channel or connection is gone: fail every unconfirmed publish."""
        pending, self._pending = self._pending, {}
        for d in pending.values():
            d.errback(PublishFailed(reason))


class OneShotPublisher:
    """A connection used only to publish (the command-line tool)."""

    def __init__(self, client: FeedClient, publisher: ConfirmPublisher,
                 clock: IReactorTime) -> None:
        self.client = client
        self.publisher = publisher
        self.clock = clock
        client.listener = self

    def publish(self, body: bytes, routing_key: str = "",
                properties: dict[str, Any] | None = None) -> Deferred:
        if properties is None:
            properties = message_properties(self.clock.seconds())
        return self.publisher.publish(body, properties, routing_key=routing_key)

    # FeedClient listener
    def confirmed(self, channel: Channel, delivery_tag: int, multiple: bool,
                  ack: bool) -> None:
        if channel is self.publisher.channel:
            self.publisher.confirmed(delivery_tag, multiple, ack)

    def consumer_cancelled(self, channel: Channel, consumer_tag: str) -> None:
        pass

    def channel_failed(self, channel: Channel, reason: Failure) -> None:
        self.publisher.fail_all(f"the broker closed the channel: {describe(reason)}")

    def close(self) -> Deferred:
        """Close the AMQP connection politely (waits at most 2 s)."""
        return self.client.close(within=2)


@inlineCallbacks
def connect_publisher(reactor: IReactorTime, url: str | AmqpUrl, exchange: str,
                      timeout: float = 10.0, exchange_type: str = "fanout"
                      ) -> Generator[Deferred, Any, OneShotPublisher]:
    """Connect to ``url``, declare ``exchange`` (fanout, or ``topic`` for
    the interest mode), return a ``OneShotPublisher``.  Fails (no retry)
    when the broker cannot be reached or refuses us."""
    target = parse_amqp_url(url) if isinstance(url, str) else url
    client = FeedClient(target.vhost, heartbeat=0, clock=reactor,
                        connection_name="pushengine-publish")
    endpoint = HostnameEndpoint(reactor, target.host, target.port, timeout=timeout)
    factory = Factory.forProtocol(lambda: client)
    factory.noisy = False
    yield endpoint.connect(factory)
    try:
        setup = _setup_publisher(client, target, exchange, exchange_type)
        setup.addTimeout(timeout, reactor)
        publisher = yield setup
    except BaseException:
        abort(client.transport)
        raise
    return OneShotPublisher(client, publisher, reactor)


@inlineCallbacks
def _setup_publisher(client: FeedClient, target: AmqpUrl, exchange: str,
                     exchange_type: str) -> Generator[Deferred, Any, ConfirmPublisher]:
    yield client.authenticate(target.username, target.password)
    channel = yield client.open_channel()
    yield channel.exchange_declare(exchange=exchange, type=exchange_type, durable=True)
    publisher = yield ConfirmPublisher.open(client, exchange)
    return publisher


def publish_all(publisher: OneShotPublisher, bodies: Iterable[bytes]) -> Deferred:
    """Publish every body; fire with one ``(confirmed, result)`` pair per
    message, in order (``result`` is the Failure when not confirmed)."""
    return DeferredList([publisher.publish(body) for body in bodies],
                        consumeErrors=True)
