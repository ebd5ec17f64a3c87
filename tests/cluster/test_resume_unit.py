"""The resumer and the hooks on their own: concurrent resumes, slow
registries, failing hooks."""
from __future__ import annotations

from twisted.internet.defer import Deferred, fail
from twisted.trial.unittest import SynchronousTestCase

from pushengine.cluster.memory import MemoryRegistry
from pushengine.cluster.registry import RegistryUnavailable
from pushengine.core.errors import UnknownSession
from tests.cluster.nodes import MemoryCluster, stream


class GatedRegistry(MemoryRegistry):
    """Lookups wait until the test lets them through."""

    def __init__(self, inner: MemoryRegistry) -> None:
        self.__dict__.update(inner.__dict__)
        self.gates: list[tuple[Deferred, Deferred]] = []

    def lookup(self, sid):
        inner = super().lookup(sid)
        gate: Deferred = Deferred()
        self.gates.append((gate, inner))
        return gate

    def open(self) -> None:
        gates, self.gates = self.gates, []
        for gate, inner in gates:
            inner.chainDeferred(gate)


class ResumerTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.cluster = MemoryCluster(2)
        self.a, self.b = self.cluster.nodes
        self.sid = self.a.rpc("session.create")
        self.a.rpc("stream.subscribe_public_live", self.sid, 5)
        self.cluster.publish(stream(1, 1))
        self.a.rpc("session.get_events", self.sid, 0)   # seq 1 delivered
        self.gated = GatedRegistry(self.b.registry)
        resumer = self.b.cluster.resume
        resumer.registry = self.gated

    def test_concurrent_calls_share_one_resume(self) -> None:
        resumer = self.b.cluster.resume
        first = resumer(self.sid, 1)
        second = resumer(self.sid)
        self.assertEqual(len(self.gated.gates), 1)
        self.assertNoResult(first)
        self.gated.open()
        s1, s2 = self.successResultOf(first), self.successResultOf(second)
        self.assertIs(s1, s2)
        self.assertEqual([e[0] for e in self.b.engine.sessions.queued(s1)], [2])
        self.assertEqual(self.b.registry.counters["resumes"], 1)

    def test_a_poll_parked_meanwhile_gets_the_reset(self) -> None:
        pending = self.b.rpc.send("session.get_events", self.sid, 30, 1)
        self.assertFalse(pending.done)
        self.gated.open()
        events = pending.json()["result"]
        self.assertEqual([(e["seq"], e["action"]) for e in events], [(2, "reset")])

    def test_the_session_destroyed_while_resuming(self) -> None:
        resumer = self.b.cluster.resume
        d = resumer(self.sid, 1)
        self.gated.open()
        session = self.successResultOf(d)
        self.b.rpc("session.destroy", self.sid)
        self.assertNotIn(self.sid, self.b.sessions)
        self.assertIsNone(self.cluster.entry(session.id))

    def test_the_registry_failing_mid_lookup_is_1001(self) -> None:
        resumer = self.b.cluster.resume
        resumer.registry = self.b.registry
        self.b.registry.lookup = lambda sid: fail(RegistryUnavailable("gone"))
        self.failureResultOf(resumer(self.sid, 1), UnknownSession)
        self.assertEqual(self.b.registry.counters["resume_failures"], 1)
        self.assertEqual(self.b.rpc.error("session.get_events", self.sid, 0).code, 1001)

    def test_an_internal_error_is_not_disguised(self) -> None:
        resumer = self.b.cluster.resume
        resumer.registry = self.b.registry
        self.b.registry.lookup = lambda sid: fail(ZeroDivisionError())
        self.failureResultOf(resumer(self.sid, 1), ZeroDivisionError)
        self.assertEqual(self.b.rpc.error("session.get_events", self.sid, 0).code, -32603)
        self.flushLoggedErrors(ZeroDivisionError)


class HookFailureTests(SynchronousTestCase):
    def test_a_failing_hook_never_fails_the_call(self) -> None:
        cluster = MemoryCluster(1)
        node = cluster.nodes[0]

        class Broken:
            def __getattr__(self, name):
                def fail_(session):
                    raise RuntimeError(f"{name} broke")
                return fail_
        node.api.hooks.add(Broken())
        sid = node.rpc("session.create")
        node.rpc("stream.subscribe_public_live", sid, 5)
        self.assertEqual(node.rpc("session.get_events", sid, 0), [])
        self.assertTrue(node.rpc("session.destroy", sid))
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 4)
        self.assertIsNone(cluster.entry(sid))   # the registry's hook still ran


class CreateTests(SynchronousTestCase):
    def test_create_answers_once_the_registry_has_the_session(self) -> None:
        """The client's next call may reach another node: that node must
        find the session in the registry already."""
        cluster = MemoryCluster(2)
        a, b = cluster.nodes
        registry = a.cluster.hooks.registry
        held: list[Deferred] = []
        real_write = registry.write

        def slow_write(sid, record, take=False):
            d: Deferred = Deferred()
            held.append(d)
            return d.addCallback(lambda _: real_write(sid, record, take))
        registry.write = slow_write
        pending = a.rpc.send("session.create")
        self.assertFalse(pending.done)
        held[0].callback(None)
        sid = pending.json()["result"]
        self.assertEqual(b.rpc("session.get_events", sid, 0), [])

    def test_create_answers_when_the_write_fails(self) -> None:
        cluster = MemoryCluster(1)
        node = cluster.nodes[0]
        node.cluster.hooks.registry.write = lambda *a, **k: fail(RegistryUnavailable("x"))
        sid = node.rpc("session.create")
        self.assertIn(sid, node.sessions)
        self.assertEqual(node.registry.counters["writes_dropped"], 1)


def test_a_resumed_session_stops_being_authorized_at_the_same_time() -> None:
    import time

    import jwt
    secret = "resume-test-secret-of-enough-length"
    cluster = MemoryCluster(2, "--secret", secret)
    a, b = cluster.nodes
    sid = a.rpc("session.create")
    token = jwt.encode({"sub": "42", "exp": time.time() + 60}, secret, algorithm="HS256")
    assert a.rpc("session.authorize", sid, token) == 42
    key, _ = a.rpc("stream.subscribe_home", sid, [42])
    cluster.publish(stream(1, 1, user_id=42, public=False))
    assert [e["action"] for e in a.rpc("session.get_events", sid, 0)] == ["insert"]
    assert cluster.entry(sid)["until"]
    # the session moves to b (a call reaches b), which resumes it from the registry
    a.engine.sessions.destroy(a.engine.sessions.get(sid))
    b.rpc("session.get_events", sid, 0, 1)
    resumed = b.engine.sessions.get(sid)
    assert resumed.user == 42 and key in resumed.subs
    cluster.clock.advance(61)
    assert resumed.user is None and key not in resumed.subs
    # after the reset the resume queued: the private object leaves
    assert [e["action"] for e in b.rpc("session.get_events", sid, 0)][-1:] == ["delete"]
