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
