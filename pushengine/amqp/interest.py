"""``Bindings``: the node's queue bindings in ``interest`` mode.

The one owner of the bindings of the node's queue to the topic exchange: a
reference count per binding key (``amqp.routing.binding_key``), the keys the
broker has confirmed, and one line of bind/unbind operations on a channel of
their own, done one at a time in the order asked.

- ``want(topic)``: count one more holder of the topic's key; the first one
  binds it. The Deferred fires when the broker has confirmed the binding
  (``queue.bind-ok``): every change published from then on reaches the queue,
  so a view reads its initial state after that, and loses nothing.
- ``release(topic)``: one holder less; ``linger`` seconds after the last one
  went (and if nobody wanted it again meanwhile) the key is unbound, so that a
  view closed and opened again at once does not churn the broker.
- ``attach(channel, queue, exchange)`` on every (re)connection (the feed
  consumes meanwhile; it reports a gap once this is done): binds ``BROADCAST`` and every wanted key again (a binding of a
  durable queue survives a short disconnection; the queue may also be new)
  and unbinds the keys that were let go while disconnected. ``detach()`` when
  the connection is lost: wants then wait for the next ``attach``.

On ``attach`` the wanted keys are bound ``WINDOW`` at a time without waiting
for each answer (the broker does a channel's methods in order and answers
them in order, and txamqp hands the answers to the callers in order): a node
with 100,000 per-user views would otherwise wait 100,000 round trips before
consuming. Later binds and unbinds go one at a time.
"""
from __future__ import annotations

from typing import Any, Callable

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from pushengine.amqp.connection import describe
from pushengine.amqp.routing import BROADCAST, binding_key
from pushengine.core.topics import Topic

log = Logger()

BIND, BIND_MANY, UNBIND, MARK = "bind", "bind-many", "unbind", "mark"
WINDOW = 256
DEFAULT_LINGER = 5.0


class Bindings:
    """Reference-counted bindings of one queue (an ``Interest``, core/interfaces.py)."""

    def __init__(self, clock: IReactorTime, linger: float = DEFAULT_LINGER) -> None:
        if linger < 0:
            raise ValueError("linger must be 0 or more")
        self.clock = clock
        self.linger = linger
        self.counts: dict[str, int] = {}         # key -> holders
        self.bound: set[str] = set()              # confirmed by the broker
        self.stale: set[str] = set()              # maybe bound, no longer wanted
        self.waiting: dict[str, list[Deferred[None]]] = {}
        self._queued: set[str] = set()            # keys with a bind in the line
        self._lingering: dict[str, IDelayedCall] = {}
        self._ops: list[tuple[str, str, Deferred[None] | None]] = []
        self._attach_keys: list[str] = []        # the keys attach() binds again
        self._busy = False
        self._target: tuple[Any, str, str] | None = None   # channel, queue, exchange
        self.binds = 0
        self.unbinds = 0
        self.failures = 0

    # -- Interest -------------------------------------------------------------------
    def want(self, topic: Topic) -> Deferred[None]:
        key = binding_key(topic)
        self.counts[key] = self.counts.get(key, 0) + 1
        call = self._lingering.pop(key, None)
        if call is not None and call.active():
            call.cancel()
        if key in self.bound:
            return succeed(None)
        d: Deferred[None] = Deferred()
        self.waiting.setdefault(key, []).append(d)
        if key not in self._queued:
            self._queued.add(key)
            self._add(BIND, key)
        return d

    def release(self, topic: Topic) -> None:
        key = binding_key(topic)
        count = self.counts.get(key, 0) - 1
        if count > 0:
            self.counts[key] = count
            return
        self.counts.pop(key, None)
        if key not in self._lingering:
            self._lingering[key] = self.clock.callLater(self.linger, self._let_go, key)

    # -- the connection ---------------------------------------------------------------
    def attach(self, channel: Any, queue: str, exchange: str) -> Deferred[None]:
        """A new connection: bind everything wanted (and ``BROADCAST``),
        unbind what was let go; fires when the broker confirmed all of it."""
        self._target = (channel, queue, exchange)
        self._ops = []
        self._busy = False
        self.stale |= self.bound - set(self.counts) - {BROADCAST}
        self.stale -= set(self.counts)
        self.bound = set()
        self._queued = set(self.counts)
        self._attach_keys = [BROADCAST] + sorted(self.counts)
        done: Deferred[None] = Deferred()
        self._ops.append((BIND_MANY, "", None))
        self._ops += [(UNBIND, key, None) for key in sorted(self.stale)]
        self._ops.append((MARK, "", done))
        self._pump()
        return done

    def detach(self) -> None:
        """The connection is gone: nothing more is sent until ``attach``."""
        self._target = None
        self._ops = []
        self._busy = False
        self._queued = set()
        self._attach_keys = []

    # -- figures ----------------------------------------------------------------------
    def stats(self) -> dict[str, float]:
        return {"bindings": len(self.bound), "binding_keys_wanted": len(self.counts),
                "binds": self.binds, "unbinds": self.unbinds,
                "binding_failures": self.failures}

    # -- the line of operations -----------------------------------------------------------
    def _let_go(self, key: str) -> None:
        self._lingering.pop(key, None)
        if key in self.counts:
            return
        if key in self.bound or key in self._queued:
            self._add(UNBIND, key)
        else:
            self.stale.add(key)

    def _add(self, kind: str, key: str) -> None:
        self._ops.append((kind, key, None))
        self._pump()

    def _pump(self) -> None:
        target = self._target
        while not self._busy and target is not None and self._ops:
            kind, key, marker = self._ops.pop(0)
            if kind == MARK:
                assert marker is not None
                marker.callback(None)
                continue
            channel, queue, exchange = target
            if kind == BIND_MANY:
                self._busy = True
                keys, self._attach_keys = self._attach_keys, []
                self._bind_many(target, keys).addBoth(self._next, target)
                continue
            if kind == UNBIND:
                if key in self.counts:          # wanted again meanwhile: keep it
                    continue
                self.bound.discard(key)
                self.stale.add(key)
                sent = channel.queue_unbind(queue=queue, exchange=exchange, routing_key=key)
                done: Callable[[object, str], None] = self._unbound
            else:
                sent = channel.queue_bind(queue=queue, exchange=exchange, routing_key=key)
                done = self._bound
            self._busy = True
            sent.addCallbacks(done, self._failed, callbackArgs=(key,),
                              errbackArgs=(kind, key, target))
            sent.addBoth(self._next, target)

    def _next(self, _: object, target: tuple[Any, str, str]) -> None:
        if self._target is target:
            self._busy = False
            self._pump()

    def _bind_many(self, target: tuple[Any, str, str], keys: list[str]) -> Deferred[None]:
        """Bind ``keys``, ``WINDOW`` of them in flight; fires when the broker
        has answered them all (or one failed: the channel is then gone)."""
        channel, queue, exchange = target
        done: Deferred[None] = Deferred()
        todo = iter(keys)
        flight = [0]

        def send() -> None:
            while flight[0] < WINDOW and not done.called:
                key = next(todo, None)
                if key is None or getattr(channel, "closed", False):
                    if not flight[0]:
                        done.callback(None)
                    return
                flight[0] += 1
                sent = channel.queue_bind(queue=queue, exchange=exchange, routing_key=key)
                sent.addCallbacks(self._bound, self._failed, callbackArgs=(key,),
                                  errbackArgs=(BIND, key, target))
                sent.addBoth(answered)

        def answered(_: object) -> None:
            flight[0] -= 1
            if self._target is not target and not done.called:
                done.callback(None)          # detached: attach() starts again
            send()

        send()
        return done

    def _bound(self, _: object, key: str) -> None:
        self.binds += 1
        self._queued.discard(key)
        self.bound.add(key)
        self.stale.discard(key)
        for d in self.waiting.pop(key, ()):
            d.callback(None)

    def _unbound(self, _: object, key: str) -> None:
        self.unbinds += 1
        self.stale.discard(key)

    def _failed(self, failure: Failure, kind: str, key: str, target: object) -> None:
        # the channel or the connection failed: the feed reconnects, and
        # attach() does everything again
        self.failures += 1
        if self._target is target:
            log.warn("AMQP feed: {kind} of {key} failed: {why}", kind=kind, key=key,
                     why=describe(failure))
