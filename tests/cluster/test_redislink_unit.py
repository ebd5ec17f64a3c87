"""RedisLink.send: an outage is the caller's own "unavailable" error, whether
the connection was down before the command or went while it waited."""
from __future__ import annotations

import txredisapi
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from pushengine.redis.link import RedisLink


class Unavailable(Exception):
    pass


class FakeProtocol:
    def __init__(self) -> None:
        self.waiting: list[Deferred] = []

    def execute_command(self, *args):
        d: Deferred = Deferred()
        self.waiting.append(d)
        return d


class SendTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.link = RedisLink(Clock(), "redis://127.0.0.1:6379/0", Unavailable)
        self.proto = self.link.proto = FakeProtocol()

    def test_down_before_the_command(self) -> None:
        self.link.proto = None
        self.failureResultOf(self.link.send("GET", "k"), Unavailable)

    def test_lost_while_the_command_waits(self) -> None:
        d = self.link.send("HGETALL", "versions")
        self.assertNoResult(d)
        self.proto.waiting[0].errback(txredisapi.ConnectionError("Lost connection"))
        f = self.failureResultOf(d, Unavailable)
        self.assertIn("Lost connection", str(f.value))

    def test_other_errors_and_answers_pass_as_they_are(self) -> None:
        refused = self.link.send("EVALSHA", "0" * 40, 0)
        self.proto.waiting[0].errback(txredisapi.ResponseError("NOSCRIPT no script"))
        self.failureResultOf(refused, txredisapi.ResponseError)
        answered = self.link.send("GET", "k")
        self.proto.waiting[1].callback(b"v")
        self.assertEqual(self.successResultOf(answered), b"v")


class _SetupProtocol(txredisapi.RedisProtocol):
    """A connection whose SELECT is refused the first time (a Redis still
    loading its data), answered the next."""

    refusals = [True]

    def execute_command(self, *args, **kwargs):
        from twisted.internet.defer import fail, succeed
        if args[0] == "SELECT" and self.refusals and self.refusals.pop():
            return fail(txredisapi.ResponseError("LOADING Redis is loading the dataset"))
        return succeed("OK")

    def whenDisconnected(self):
        return Deferred()


class _Endpoint:
    """Connects each protocol to an in-memory transport at once."""

    def __init__(self) -> None:
        self.connections: list = []

    def connect(self, factory):
        from twisted.internet.defer import succeed
        from twisted.internet.testing import StringTransport
        proto = factory.buildProtocol(None)
        transport = StringTransport()
        proto.makeConnection(transport)
        self.connections.append((proto, transport))
        return succeed(proto)


class PrepareTests(SynchronousTestCase):
    def test_a_refused_setup_drops_the_connection_and_connects_again(self) -> None:
        """Before, the refusal went back to ClientService, which waited to
        retry while the connection stayed open; its loss then found no
        transition in that state: an unhandled error in the node's log."""
        from twisted.python.failure import Failure
        from twisted.internet.error import ConnectionDone
        clock, endpoint = Clock(), _Endpoint()
        _SetupProtocol.refusals = [True]
        link = RedisLink(clock, "redis://127.0.0.1:6379/0", Unavailable, endpoint=endpoint,
                         protocol=_SetupProtocol)
        link.startService()
        self.assertEqual(len(endpoint.connections), 1)
        proto, transport = endpoint.connections[0]
        self.assertTrue(transport.disconnecting)          # dropped by the link
        self.assertFalse(link.connected)
        self.assertIn("LOADING", link.error)
        proto.connectionLost(Failure(ConnectionDone()))   # no NoTransition raised
        clock.advance(10)
        self.assertEqual(len(endpoint.connections), 2)    # connected again
        self.assertTrue(link.connected)
        self.assertEqual(self.flushLoggedErrors(), [])
        link.stopService()

    def test_a_stop_while_the_setup_waits_cancels_it_cleanly(self) -> None:
        """Stopping while SELECT waits cancels the attempt: the cancellation
        goes back to ClientService as a failure, not as a connection made
        (which its stopping state has no transition for)."""
        clock, endpoint = Clock(), _Endpoint()

        class Waiting(_SetupProtocol):
            def execute_command(self, *args, **kwargs):
                return Deferred()           # SELECT never answers
        link = RedisLink(clock, "redis://127.0.0.1:6379/0", Unavailable, endpoint=endpoint,
                         protocol=Waiting)
        link.startService()
        stopped = link.stopService()
        self.successResultOf(stopped)
        self.assertFalse(link.connected)
        self.assertEqual(self.flushLoggedErrors(), [])
