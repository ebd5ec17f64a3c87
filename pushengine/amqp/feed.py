"""``AmqpFeed``: the change feed over a RabbitMQ fanout exchange, or a topic
exchange with bindings by interest (``routing="interest"``)."""
from __future__ import annotations

import socket
from collections import OrderedDict
from dataclasses import replace
from typing import Any, Callable, Generator, Mapping, Protocol, Sequence

from twisted.application.internet import ClientService, backoffPolicy
from twisted.application.service import Service
from twisted.internet.defer import (
    Deferred, FirstError, fail, gatherResults, inlineCallbacks, succeed)
from twisted.internet.endpoints import HostnameEndpoint
from twisted.internet.interfaces import IReactorTime
from twisted.logger import ILogObserver, LogEvent, Logger, globalLogPublisher
from twisted.python.failure import Failure
from zope.interface import implementer
from txamqp.client import ChannelClosed

from pushengine.amqp.connection import (
    NOT_FOUND, PRECONDITION_FAILED, Channel, FeedClient, HandshakeEndpoint,
    ReadyClientFactory, describe, reply_code)
from pushengine.amqp.debezium import TableName, decode_message, table_map
from pushengine.amqp.delivery import Delivery, as_delivery
from pushengine.amqp.interest import Bindings
from pushengine.amqp.publisher import (
    COPIES_HEADER, TIMESTAMP_MS_HEADER, ConfirmPublisher, NotConnected, copy_properties,
    message_properties, new_message_id)
from pushengine.amqp.routing import plan
from pushengine.amqp.url import AmqpUrl, parse_amqp_url
from pushengine.core.changes import Change, decode_changes, encode_changes
from pushengine.core.interfaces import ChangeSink
from pushengine.core.numbers import parse_decimal
from pushengine.core.feedservice import FeedService
from pushengine.core.positions import GAP_HEADER, LSN_HEADER, Position, Watermark

log = Logger()

DEFAULT_EXCHANGE = "pushengine.changes"
# interest mode: a topic exchange (an exchange's type cannot change, so the
# two modes never share an exchange name)
DEFAULT_ROUTED_EXCHANGE = "pushengine.routed"
FANOUT = "fanout"
INTEREST = "interest"
ROUTINGS = (FANOUT, INTEREST)
# what a message body is: the engine's change messages (SPEC 2), or
# Debezium's change events (amqp/debezium.py)
JSON = "json"
DEBEZIUM = "debezium"
FORMATS = (JSON, DEBEZIUM)
# tables whose unmapped events were logged (once each)
UNMAPPED_LOGGED = 1000
# ids of the messages applied last, kept to drop a later copy (interest mode)
# or a redelivery of a message applied before its ack was lost
SEEN_MESSAGES = 10_000
QUEUE_PREFIX = "pushengine.node."
# messages in flight: enough for the deliveries of one read to make a batch
DEFAULT_PREFETCH = 2000
DEFAULT_QUEUE_TTL = 3600.0

STOPPED = "stopped"
CONNECTING = "connecting"
CONNECTED = "connected"
RECONNECTING = "reconnecting"


def default_retry_policy() -> Callable[[int], float]:
    """Capped exponential back-off with jitter: about 1.5, 2.3, 3.4... s,
    at most 30 s, plus up to 1 s of random jitter so that many nodes do not
    reconnect in step after a broker restart."""
    return backoffPolicy(initialDelay=1.0, maxDelay=30.0, factor=1.5)


@implementer(ILogObserver)
class _WithoutRetryChatter:
    """The global log, less ClientService's line for every scheduled retry
    (the feed logs its changes of state)."""

    def __call__(self, event: LogEvent) -> None:
        if str(event.get("log_format", "")).startswith("Scheduling retry"):
            return
        globalLogPublisher(event)


class _QuietClientService(ClientService):
    """A ClientService that does not log each retry (the feed logs changes
    of state instead)."""

    _log = Logger(observer=_WithoutRetryChatter())


class Content(Protocol):
    """A message's content as txamqp gives it: the body (text when it was
    valid UTF-8, else bytes) and the properties."""

    body: str | bytes
    properties: Mapping[str, Any]


class Delivered(Protocol):
    """A delivered message as txamqp gives it (``basic.deliver`` with its
    content)."""

    delivery_tag: int
    redelivered: bool
    content: Content


class AmqpFeed:
    """The change feed over RabbitMQ: consumes and publishes change messages.

    Wiring: call ``start(sink)`` and ``stop()`` (the application's own
    service does, or ``as_service(sink)`` gives an IService for a
    MultiService).  ``feed.service`` is the ``ClientService`` holding the
    connection; it is started and stopped by ``start``/``stop`` and must
    not be added to a MultiService as well.

    Layout: a durable fanout ``exchange``; per node a durable queue
    ``pushengine.node.<node_id>`` bound to it, neither exclusive nor
    auto-delete, with ``x-expires`` = ``queue_ttl`` so that changes wait
    there while the node is disconnected or restarting (even across a broker
    restart) and the queue of a node gone for good disappears.  One
    consumer per queue (``exclusive``: a second process with the same node
    id is refused and keeps retrying, loudly).  Manual acks, ``prefetch``
    messages in flight.  The messages of one read from the socket are one
    batch: their changes go to the sink in one ``apply_changes``, then one
    ``basic.ack`` with ``multiple`` covers them all, malformed or not (never
    before they are applied: a message acked but not applied would be lost).

    Reconnection: ``ClientService`` with capped exponential back-off and
    jitter; a failed log-in or declaration counts as a failed attempt.  When
    a reconnection finds the node's queue gone (expired, deleted, broker
    data lost), changes were missed: ``sink.feed_gap()`` is called before
    consuming again (never on the first connection of the process).

    ``node_id`` must be stable across restarts of a node and unique among
    nodes; it defaults to the host name.  Time comes from ``reactor``.

    ``routing="interest"``: the exchange is a topic exchange; changes are
    published with the routing keys of ``amqp.routing`` (``routes``: the
    routing fields of each type) and the queue is bound by ``bindings``
    (``amqp.interest.Bindings``, the node's ``Interest``), again on every
    connection (while consuming; a gap is reported once they are all
    confirmed).  A message published under two keys (an
    object that moved) comes as two copies with one message id: the first
    one a node receives is applied, the other dropped.

    WAL positions: a message whose headers say where it stands in
    PostgreSQL's WAL (``pushengine-lsn``, ``-xid``, ``-part``, written by
    the relay) passes the feed's ``Watermark`` (a copy at or below the last
    position applied is dropped, ``wal_copies_dropped``), and its changes
    carry the transaction id (``Change.xid``) for the views' hand-off.

    ``format="debezium"``: the bodies are Debezium's change events
    (``amqp.debezium``), the types found through ``tables`` (type -> its
    table, ``Catalog.tables``); the engine's own change messages still pass.
    """

    def __init__(self, reactor: IReactorTime, url: str | AmqpUrl,
                 exchange: str = DEFAULT_EXCHANGE,
                 node_id: str | None = None,
                 id_fields: Mapping[str, str] | None = None,
                 heartbeat: int = 10, prefetch: int = DEFAULT_PREFETCH,
                 queue_ttl: float = DEFAULT_QUEUE_TTL,
                 retry_policy: Callable[[int], float] | None = None,
                 connect_timeout: float = 10.0, handshake_timeout: float = 30.0,
                 routing: str = FANOUT, routes: Mapping[str, Sequence[str]] | None = None,
                 bindings: Bindings | None = None, format: str = JSON,
                 tables: Mapping[str, TableName] | None = None) -> None:
        if routing not in ROUTINGS:
            raise ValueError(f"routing must be {' or '.join(ROUTINGS)}, not {routing!r}")
        if format not in FORMATS:
            raise ValueError(f"format must be {' or '.join(FORMATS)}, not {format!r}")
        if format == DEBEZIUM and routing != FANOUT:
            raise ValueError("the debezium format needs the fanout routing: Debezium "
                             "Server's routing keys are not the engine's")
        if format == DEBEZIUM and not tables:
            raise ValueError("the debezium format needs types mapped to tables in the "
                             "views file (types: {Stream: {id: id, table: streams}})")
        if not 1 <= prefetch <= 65535:
            raise ValueError("prefetch must be 1 to 65535 (basic.qos takes a short)")
        if queue_ttl <= 0:
            raise ValueError("queue_ttl must be positive")
        self.reactor = reactor
        self.url = parse_amqp_url(url) if isinstance(url, str) else url
        self.exchange = exchange
        self.node_id = node_id or socket.gethostname()
        self.queue = QUEUE_PREFIX + self.node_id
        self.id_fields = dict(id_fields) if id_fields else None
        self.heartbeat = heartbeat
        self.prefetch = prefetch
        self.queue_ttl = queue_ttl
        self.retry_policy = retry_policy or default_retry_policy()
        self.consumer_tag = f"pushengine.{self.node_id}"
        self.routing = routing
        self.routes = {t: list(f) for t, f in (routes or {}).items()}
        self.bindings = bindings if bindings is not None or routing == FANOUT \
            else Bindings(reactor)
        self._applied: OrderedDict[str, None] = OrderedDict()
        self.format = format
        # debezium: (schema, table) -> (type, id field); None for json
        self.tables = table_map(tables or {}, id_fields or {}) if format == DEBEZIUM else None
        # the last WAL position applied: a relay's copies sent again are dropped
        self.watermark = Watermark()
        self._unmapped_logged: set[tuple[str, str]] = set()

        self._sink: ChangeSink | None = None
        self._state = STOPPED
        self._stopping = False
        self._session: _Session | None = None
        self._consumed_before = False
        self._gap_pending = False
        self._failed_attempts = 0
        self._last_failure_text: str | None = None

        self.messages_received = 0
        self.changes_applied = 0
        self.malformed_messages = 0
        self.bad_headers = 0
        self.malformed_changes = 0
        self.sink_errors = 0
        self.reconnects = 0
        self.connect_failures = 0
        self.gaps = 0
        self.changes_published = 0
        self.messages_published = 0
        self.duplicate_copies = 0
        self.redeliveries_dropped = 0
        self.batches = 0
        self.acks = 0
        self.unmapped_events = 0
        self.ignored_events = 0
        self.feed_lag: float | None = None

        tcp = HostnameEndpoint(reactor, self.url.host, self.url.port,
                               timeout=connect_timeout)
        ready_factory = ReadyClientFactory()
        endpoint = HandshakeEndpoint(
            tcp, self._build_client, self._handshake, ready_factory, reactor,
            handshake_timeout=handshake_timeout, on_failure=self._attempt_failed)
        self.service = _QuietClientService(
            endpoint, ready_factory, retryPolicy=self.retry_policy, clock=reactor)

    # ChangeFeed

    def start(self, sink: ChangeSink) -> None:
        """Connect (retrying until it works) and deliver changes to ``sink``."""
        self._sink = sink
        if self.service.running:
            return
        self._stopping = False
        self._set_state(CONNECTING)
        log.info("AMQP feed: connecting to {url} (exchange {exchange}, queue {queue})",
                 url=str(self.url), exchange=self.exchange, queue=self.queue)
        self.service.startService()

    def stop(self) -> Deferred:
        """Close the connection politely and stop retrying; fires when done."""
        if not self.service.running:
            return succeed(None)
        self._stopping = True
        session = self._session
        closing = succeed(None)
        if session is not None:
            # deliveries held back (consumed before the session was up) are
            # neither applied nor acked: the next consumer gets them
            session.flush_acks()
            closing = session.client.close(within=2)
            closing.addErrback(lambda f: log.failure("AMQP feed: error while closing", f))
        closing.addCallback(lambda _: self.service.stopService())

        def stopped(_: object) -> None:
            self._set_state(STOPPED)
            log.info("AMQP feed: stopped")

        closing.addCallback(stopped)
        closing.addErrback(lambda f: log.failure("AMQP feed: error while stopping", f))
        return closing

    def publish(self, changes: Sequence[Change]) -> Deferred:
        """Publish ``changes`` as one message; fire with their number once the
        broker confirmed it, or fail with NotConnected/PublishFailed."""
        changes = list(changes)
        if not changes:
            return succeed(0)
        session = self._session
        if session is None:
            return fail(NotConnected(
                f"the AMQP feed is {self._state}, not connected to {self.url}"))
        now = self.reactor.seconds()
        if self.routing == FANOUT:
            self.messages_published += 1
            confirmed = session.publisher.publish(encode_changes(changes),
                                                  message_properties(now))
        else:
            sent = []
            for batch, keys in plan(changes, self.routes):
                body = encode_changes(batch)
                if len(keys) == 1:
                    sent.append(session.publisher.publish(
                        body, message_properties(now), routing_key=keys[0]))
                    continue
                properties = copy_properties(now, new_message_id(), len(keys))
                sent += [session.publisher.publish(body, properties, routing_key=key)
                         for key in keys]
            self.messages_published += len(sent)
            confirmed = gatherResults(sent, consumeErrors=True)
            confirmed.addErrback(_first_failure)

        def done(_: object) -> int:
            self.changes_published += len(changes)
            return len(changes)

        return confirmed.addCallback(done)

    def health(self) -> dict[str, Any]:
        """State for /health: ``up`` while connected and consuming."""
        return {
            "up": self._state == CONNECTED,
            "state": self._state,
            "broker": str(self.url),
            "exchange": self.exchange,
            "node_id": self.node_id,
            "queue": self.queue,
            "routing": self.routing,
            "format": self.format,
        }

    def stats(self) -> dict[str, float]:
        """Counters for /metrics (all numbers)."""
        stats: dict[str, float] = {
            "messages_received": self.messages_received,
            "changes_applied": self.changes_applied,
            "malformed_messages": self.malformed_messages,
            "bad_headers": self.bad_headers,
            "malformed_changes": self.malformed_changes,
            "sink_errors": self.sink_errors,
            "reconnects": self.reconnects,
            "connect_failures": self.connect_failures,
            "gaps": self.gaps,
            "changes_published": self.changes_published,
            "messages_published": self.messages_published,
            "redeliveries_dropped": self.redeliveries_dropped,
            "batches": self.batches,
            "acks": self.acks,
            "wal_copies_dropped": self.watermark.dropped,
            "unmapped_events": self.unmapped_events,
            "ignored_events": self.ignored_events,
            "connected": 1 if self._state == CONNECTED else 0,
        }
        if self.bindings is not None:
            stats["duplicate_copies"] = self.duplicate_copies
            stats.update(self.bindings.stats())
        if self.feed_lag is not None:
            stats["feed_lag_seconds"] = self.feed_lag
        return stats

    def as_service(self, sink: ChangeSink) -> Service:
        """An IService that runs this feed into ``sink`` (for a MultiService)."""
        return FeedService(self, sink)

    @property
    def state(self) -> str:
        return self._state

    @property
    def wal_copies_dropped(self) -> int:
        """Messages at or below the last WAL position applied (a relay's
        copies sent again), dropped."""
        return self.watermark.dropped

    @property
    def client(self) -> FeedClient | None:
        """The txamqp client of the current connection, if connected."""
        return self._session.client if self._session is not None else None

    # Connecting

    def _set_state(self, state: str) -> None:
        self._state = state

    def _build_client(self) -> FeedClient:
        return FeedClient(self.url.vhost, heartbeat=self.heartbeat, clock=self.reactor,
                          connection_name=f"pushengine node {self.node_id}")

    @inlineCallbacks
    def _handshake(self, client: FeedClient) -> Generator[Deferred, Any, None]:
        """Log in, declare the exchange and our queue, start consuming."""
        yield client.authenticate(self.url.username, self.url.password)
        channel = yield client.open_channel()
        yield channel.exchange_declare(
            exchange=self.exchange, type="topic" if self.routing == INTEREST else "fanout",
            durable=True)
        channel, existed = yield self._declare_queue(client, channel)
        if not existed and self._consumed_before:
            self._gap_pending = True
        binding = None
        if self.bindings is None:
            yield channel.queue_bind(queue=self.queue, exchange=self.exchange,
                                     routing_key="")
        else:
            # the bindings are made again once connected (_connected): a node
            # with many keys needs longer than a handshake may take
            binding = yield client.open_channel()
        yield channel.basic_qos(prefetch_count=self.prefetch)
        publisher = yield ConfirmPublisher.open(client, self.exchange)
        # registered before basic.consume: the deliveries that come with its
        # reply are held until the session is up (after a gap report)
        session = _Session(self, client, channel, publisher)
        session.binding = binding
        client.consumers[self.consumer_tag] = session
        client.listener = session
        yield channel.basic_consume(queue=self.queue, consumer_tag=self.consumer_tag,
                                    exclusive=True)
        self._connected(session)

    @inlineCallbacks
    def _declare_queue(self, client: FeedClient,
                       channel: Channel) -> Generator[Deferred, Any, tuple[Channel, bool]]:
        """Declare our queue; tell whether it existed already.

        A queue that exists with other arguments (another ``queue_ttl``) is
        used as it is, with a warning: refusing it would stop the node until
        someone deletes the queue and its waiting changes.
        """
        try:
            yield channel.queue_declare(queue=self.queue, passive=True)
            existed = True
        except ChannelClosed as e:
            if reply_code(e) != NOT_FOUND:
                raise
            existed = False
            channel = yield client.open_channel()
        try:
            yield channel.queue_declare(
                queue=self.queue, durable=True,
                arguments={"x-expires": int(self.queue_ttl * 1000)})
        except ChannelClosed as e:
            if not existed or reply_code(e) != PRECONDITION_FAILED:
                raise
            log.warn("AMQP feed: queue {queue} exists with other settings, using it "
                     "as it is ({reason})", queue=self.queue, reason=describe(e))
            channel = yield client.open_channel()
        return channel, existed

    def _connected(self, session: _Session) -> None:
        self._session = session
        failed, self._failed_attempts = self._failed_attempts, 0
        self._last_failure_text = None
        if self._consumed_before:
            self.reconnects += 1
        self._consumed_before = True
        self._set_state(CONNECTED)
        log.info("AMQP feed: connected to {url}, consuming {queue}{after}",
                 url=str(self.url), queue=self.queue,
                 after=f" (after {failed} failed attempts)" if failed else "")
        session.client.disconnected.wait().addCallback(
            lambda _: self._disconnected(session)).addErrback(
            lambda f: log.failure("AMQP feed: disconnect handling failed", f))
        if self.bindings is None:
            if self._gap_pending:
                self._report_gap()
        else:
            # every wanted key again (the queue may be new); after a gap the
            # views are re-read once all of them are confirmed, so that the
            # re-read misses nothing (a reconnection before that keeps the
            # gap pending for the next connection)
            rebound = self.bindings.attach(session.binding, self.queue, self.exchange)
            if self._gap_pending:
                rebound.addCallback(
                    lambda _: self._report_gap() if self._session is session else None)
            rebound.addErrback(lambda f: log.failure("AMQP feed: binding again failed", f))
        session.start()

    def _report_gap(self) -> None:
        """Tell the sink that changes may have been missed (the queue was new)."""
        self._gap_pending = False
        self.gaps += 1
        log.warn("AMQP feed: queue {queue} had disappeared: changes may have "
                 "been missed, resetting views", queue=self.queue)
        try:
            assert self._sink is not None, "start(sink) comes first"
            self._sink.feed_gap()
        except Exception:
            self.sink_errors += 1
            log.failure("AMQP feed: the sink failed on feed_gap")

    def _attempt_failed(self, failure: Failure) -> None:
        """A connection attempt failed: log the first failure (and any change
        of reason), not every retry."""
        if self.bindings is not None:
            self.bindings.detach()
        self._failed_attempts += 1
        self.connect_failures += 1
        if self._stopping:
            return
        text = describe(failure)
        if text != self._last_failure_text:
            self._last_failure_text = text
            log.warn("AMQP feed: cannot connect to {url}: {reason}; retrying with back-off",
                     url=str(self.url), reason=text)

    def _disconnected(self, session: _Session) -> None:
        if self._session is session:
            self._session = None
            if self.bindings is not None:
                self.bindings.detach()
        session.publisher.fail_all("the connection was lost before the broker confirmed")
        if self._stopping:
            return
        self._set_state(RECONNECTING)
        if not session.dropped:  # else _drop said why already
            log.warn("AMQP feed: lost the connection to {url}: {reason}; reconnecting",
                     url=str(self.url), reason=session.client.loss_reason())

    def _drop(self, session: _Session, why: str) -> None:
        """Close a connection that is no longer usable; ClientService reconnects."""
        if session.dropped:
            return
        session.dropped = True
        log.warn("AMQP feed: {why}; reconnecting", why=why)
        session.client.close(within=2).addErrback(
            lambda f: log.failure("AMQP feed: error while closing", f))

    # Consuming

    def _applied_before(self, delivery: Delivery) -> str | None:
        """Why a message this process applied already must not be applied
        again ("copy": the later copy of a message published under several
        routing keys; "redelivered": the broker delivers it again because the
        connection was lost before its ack), else None. Known by the message
        id (every publisher of this package sets one); a message without one
        is always applied, and so is a message whose id comes again without
        being a copy or a redelivery (a backend that reuses ids)."""
        message_id = delivery.message_id
        if not message_id:
            return None
        applied = self._applied
        if message_id in applied:
            headers = delivery.headers
            if headers and headers.get(COPIES_HEADER) not in (None, "1"):
                return "copy"
            if delivery.redelivered:
                return "redelivered"
            return None
        applied[message_id] = None
        if len(applied) > SEEN_MESSAGES:
            applied.popitem(last=False)
        return None

    def handle_message(self, message: Delivered) -> None:
        """Apply one message as txamqp gives it (a batch of one)."""
        self.apply_deliveries([as_delivery(message)])

    def apply_deliveries(self, deliveries: Sequence[Delivery]) -> None:
        """Decode delivered messages and hand all their good changes to the
        sink in one call, in order.

        Each message goes through the redelivery and copy check first, then,
        when its headers say a WAL position (``core/positions.py``), through
        the watermark: a message at or below the last position applied is a
        copy a restarted relay sent again, and is dropped; the changes of a
        message with a position carry its transaction (``xid``).
        Malformed messages and changes are logged (one line per message)
        and counted; a failing sink is logged and counted once for the
        batch.  Never raises for either: the messages are acked and the feed
        goes on.
        """
        self.messages_received += len(deliveries)
        id_fields = self.id_fields
        tables = self.tables
        changes: list[Change] = []
        sent_ms: int | None = None
        for delivery in deliveries:
            if delivery.message_id is not None:
                again = self._applied_before(delivery)
                if again is not None:
                    if again == "copy":
                        self.duplicate_copies += 1
                    else:
                        self.redeliveries_dropped += 1
                    continue
            headers = delivery.headers
            position = None
            if headers:
                if GAP_HEADER in headers:
                    # the relay's stream has a gap: what came before is
                    # applied, then every view is read again
                    self._apply(changes, deliveries)
                    changes = []
                    self.gaps += 1        # as a lost queue: the views are read again
                    assert self._sink is not None, "start(sink) comes first"
                    self._sink.feed_gap()
                    continue
                bad = headers_ms(headers) is False
                if LSN_HEADER in headers:
                    position = Position.from_headers(headers)
                    if position is None:
                        bad = True          # applied as a message without one
                    elif not self.watermark.admit(position):
                        continue
                if bad:
                    self.bad_headers += 1   # ignored, as a message without it
            if tables is None:
                decoded, errors = decode_changes(delivery.body, id_fields)
            else:
                event = decode_message(delivery.body, tables, id_fields)
                decoded, errors = event.changes, event.errors
                if event.sent_ms is not None:
                    sent_ms = event.sent_ms
                if event.ignored:
                    self.ignored_events += 1
                elif event.unmapped is not None:
                    self._unmapped(event.unmapped)
                elif event.position is not None and position is None \
                        and not self.watermark.admit(event.position):
                    continue
            if errors:
                self.malformed_messages += 1
                self.malformed_changes += len(errors)
                log.warn("AMQP feed: dropped {count} malformed change(s) of message "
                         "{tag}{kept}: {errors}", count=len(errors),
                         tag=delivery.delivery_tag,
                         kept=f" (kept {len(decoded)})" if decoded else "",
                         errors="; ".join(errors[:3]) + ("; ..." if len(errors) > 3 else ""))
            if position is not None:
                xid = position.xid
                decoded = [replace(change, xid=xid) for change in decoded]
            changes += decoded
        self._apply(changes, deliveries)
        if deliveries:
            sent_at = delivery_time(deliveries[-1])
            if sent_at is None and sent_ms is not None:
                sent_at = sent_ms / 1000.0
            if sent_at is not None:
                self.feed_lag = max(0.0, self.reactor.seconds() - sent_at)

    def _apply(self, changes: list[Change], deliveries: Sequence[Delivery]) -> None:
        """Hand ``changes`` to the sink in one call; a failing sink is
        logged and counted, never raised."""
        if not changes:
            return
        try:
            assert self._sink is not None, "start(sink) comes first"
            self._sink.apply_changes(changes)
        except Exception:
            self.sink_errors += 1
            log.failure("AMQP feed: the sink failed on messages {first} to {last}",
                        first=deliveries[0].delivery_tag, last=deliveries[-1].delivery_tag)
        else:
            self.changes_applied += len(changes)

    def _unmapped(self, table: tuple[str, str]) -> None:
        """A Debezium event of a table no type maps to: counted, dropped,
        and logged once per table."""
        self.unmapped_events += 1
        if table in self._unmapped_logged or len(self._unmapped_logged) >= UNMAPPED_LOGGED:
            return
        self._unmapped_logged.add(table)
        log.info("AMQP feed: dropping the Debezium events of table {schema}.{table}: no "
                 "type of the views file maps to it (types: {{T: {{table: ..., "
                 "schema: ...}}}})", schema=table[0], table=table[1])


def _first_failure(f: Failure) -> Failure:
    """The failure inside gatherResults' FirstError."""
    error = f.value
    return error.subFailure if isinstance(error, FirstError) else f


def _copy_id(properties: Mapping[str, Any]) -> str | None:
    """The message id of one of several copies (interest mode), else None."""
    headers = properties.get("headers")
    if not isinstance(headers, dict) or headers.get(COPIES_HEADER) in (None, "1"):
        return None
    message_id = properties.get("message-id")
    return message_id if isinstance(message_id, str) and message_id else None


TIMESTAMP_MS_DIGITS = 15      # milliseconds until the year 33658


def header_ms(properties: Mapping[str, Any]) -> int | None | bool:
    """The ``timestamp_ms`` header: its value (ms, above 0), None when the
    message has none, False when it has one that is not a number of ASCII
    digits of bounded length (``"²"``, ``"١٢٣"``, ``" 12"``, 5,000 digits)."""
    headers = properties.get("headers")
    return headers_ms(headers) if isinstance(headers, dict) else None


def headers_ms(headers: Mapping[str, Any]) -> int | None | bool:
    """``header_ms`` from the headers table itself."""
    if TIMESTAMP_MS_HEADER not in headers:
        return None
    ms = headers[TIMESTAMP_MS_HEADER]
    if isinstance(ms, (str, bytes)):
        ms = parse_decimal(ms, TIMESTAMP_MS_DIGITS)
    if isinstance(ms, int) and not isinstance(ms, bool) and 0 < ms < 10 ** TIMESTAMP_MS_DIGITS:
        return ms
    return False


def message_time(properties: Mapping[str, Any]) -> float | None:
    """When a message was published (POSIX seconds), if it says: a valid
    ``timestamp_ms`` header, else the ``timestamp`` property."""
    headers = properties.get("headers")
    ts = properties.get("timestamp")
    return _sent_at(headers if isinstance(headers, dict) else None,
                    ts if isinstance(ts, int) else None)


def delivery_time(delivery: Delivery) -> float | None:
    """``message_time`` of a delivery."""
    return _sent_at(delivery.headers, delivery.timestamp)


def _sent_at(headers: Mapping[str, Any] | None, timestamp: int | None) -> float | None:
    ms = headers_ms(headers) if headers else None
    if ms is not None and ms is not False:
        return ms / 1000.0
    if isinstance(timestamp, int) and not isinstance(timestamp, bool) and timestamp > 0:
        return float(timestamp)
    return None


class _Session:
    """One connection that is up: its channels, consumer and publisher.

    It is the consumer of the node's queue (``FeedClient.consumers``): the
    deliveries of one read are gathered by ``deliver`` and applied together
    by ``deliveries_done``, then acked with one ``basic.ack`` (``multiple``)
    for the last of them.  Until ``start`` they are held: the feed reports a
    gap, if any, before the first change is applied.
    """

    def __init__(self, feed: AmqpFeed, client: FeedClient, channel: Channel,
                 publisher: ConfirmPublisher) -> None:
        self.feed = feed
        self.client = client
        self.channel = channel
        self.publisher = publisher
        self.binding: Channel | None = None     # interest mode: the bindings' channel
        self._pending: list[Delivery] = []
        self._started = False
        self._unacked = False
        self._last_tag = 0
        self.dropped = False

    # Consumer

    def deliver(self, delivery: Delivery) -> None:
        self._pending.append(delivery)

    def deliveries_done(self) -> None:
        """Apply the deliveries gathered since the last batch, then ack them."""
        if not self._started or not self._pending:
            return
        batch, self._pending = self._pending, []
        feed = self.feed
        feed.batches += 1
        try:
            feed.apply_deliveries(batch)
        except Exception:
            # apply_deliveries logs what it drops: this is a bug, and the
            # messages are acked anyway rather than redelivered forever
            log.failure("AMQP feed: unexpected error on messages {first} to {last}",
                        first=batch[0].delivery_tag, last=batch[-1].delivery_tag)
        self.applied(batch[-1].delivery_tag)

    def start(self) -> None:
        """Apply what was held back, and every later batch as it comes."""
        self._started = True
        self.deliveries_done()

    # Acks

    def applied(self, delivery_tag: int) -> None:
        """Every message up to ``delivery_tag`` is applied: ack them."""
        self._unacked = True
        self._last_tag = delivery_tag
        self.flush_acks()

    def flush_acks(self) -> None:
        """One ``basic.ack`` (``multiple``) up to the last applied message."""
        if not self._unacked or self.channel.closed:
            return
        self._unacked = False
        self.feed.acks += 1
        self.client.send_ack(self.channel.id, self._last_tag, True)

    # FeedClient listener

    def confirmed(self, channel: Channel, delivery_tag: int, multiple: bool, ack: bool) -> None:
        if channel is self.publisher.channel:
            self.publisher.confirmed(delivery_tag, multiple, ack)

    def consumer_cancelled(self, channel: Channel, consumer_tag: str) -> None:
        self.feed._drop(self, f"the broker cancelled consumer {consumer_tag} "
                              f"(queue {self.feed.queue} deleted?)")

    def channel_failed(self, channel: Channel, reason: Failure) -> None:
        self.publisher.fail_all(f"the broker closed a channel: {describe(reason)}")
        self.feed._drop(self, f"the broker closed channel {channel.id}: {describe(reason)}")
