"""The resumer and the hooks on their own: concurrent resumes, slow
registries, failing hooks."""
from __future__ import annotations

import pytest
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


# -- the session cap across nodes (SPEC section 22, "Sessions") ------------------------------

def counts(node) -> dict:
    return dict(node.engine.sessions.per_client.counts)


RESUMING_CALLS = {
    "session.get_events": lambda sid: ("session.get_events", sid, 0),
    "session.subscribe": lambda sid: ("session.subscribe", sid, "PublicLiveStreamView", {}, 5),
    "a view alias": lambda sid: ("stream.subscribe_public_live", sid, 5),
    "session.unsubscribe": lambda sid: ("session.unsubscribe", sid, "PublicLiveStreamView()"),
    "presence.list": lambda sid: ("presence.list", sid, "PublicLiveStreamView(limit=5)"),
    "stats.online": lambda sid: ("stats.online", "HomeStreamView(users=[1])", sid),
}


def call(node, method: str, *params):
    """The JSON-RPC answer (result or error) and the HTTP status."""
    reply = node.rpc.send(method, *params).reply()
    return reply.code, reply.json()


@pytest.mark.parametrize("name", list(RESUMING_CALLS))
def test_a_session_resumed_on_a_node_counts_toward_its_clients_cap_there(name: str) -> None:
    """Before, a session resumed from another node counted for nobody: a
    client could hold any number of sessions on a node by creating them on
    another and moving them over (and each move freed a place on the node
    it left)."""
    cluster = MemoryCluster(2, "--max-client-sessions", "2")
    a, b = cluster.nodes
    moved, stays = a.rpc("session.create"), a.rpc("session.create")
    b.rpc("session.create")
    assert counts(a) == {"127.0.0.1": 2} and counts(b) == {"127.0.0.1": 1}
    # the first move fills the client's places on b
    status, answer = call(b, *RESUMING_CALLS[name](moved))
    assert status == 200 and answer.get("error", {}).get("code") != 1007, answer
    assert moved in b.sessions and b.engine.sessions.get(moved).client == "127.0.0.1"
    assert counts(b) == {"127.0.0.1": 2}
    # a has dropped its copy: it no longer counts there
    assert moved not in a.sessions and counts(a) == {"127.0.0.1": 1}
    # past the cap on b: refused with 1007 (HTTP 429), and the session stays where it is
    status, answer = call(b, *RESUMING_CALLS[name](stays))
    assert status == 429 and answer["error"]["code"] == 1007, answer
    assert stays not in b.sessions and stays in a.sessions
    assert counts(b) == {"127.0.0.1": 2} and counts(a) == {"127.0.0.1": 1}
    assert a.rpc("session.get_events", stays, 0) == []
    # the place the move freed on a is the client's again
    a.rpc("session.create")
    assert counts(a) == {"127.0.0.1": 2}
    # destroying the resumed session frees its place on b
    assert b.rpc("session.destroy", moved) is True
    assert counts(b) == {"127.0.0.1": 1}


def test_another_client_may_still_resume_its_sessions_on_a_full_node() -> None:
    cluster = MemoryCluster(2, "--max-client-sessions", "1", "--trusted-proxies", "127.0.0.1/32")
    a, b = cluster.nodes
    theirs = {"X-Forwarded-For": "203.0.113.9"}
    mine = {"X-Forwarded-For": "198.51.100.7"}

    def rpc(node, headers, method, *params):
        reply = node.http.post("/api/jsonrpc", node.rpc.body(method, list(params)), headers)
        return reply.code, reply.json()
    _, created = rpc(a, mine, "session.create")
    sid = created["result"]
    rpc(b, theirs, "session.create")
    code, answer = rpc(b, mine, "session.get_events", sid, 0)
    assert code == 200 and answer["result"] == []
    assert counts(b) == {"203.0.113.9": 1, "198.51.100.7": 1} and counts(a) == {}


def test_an_event_stream_that_resumes_a_session_counts_for_its_client_too() -> None:
    cluster = MemoryCluster(2, "--max-client-sessions", "1")
    a, b = cluster.nodes
    sid = a.rpc("session.create")
    b.rpc("session.create")
    reply = b.http.send("GET", "/api/events?session=" + sid).reply()
    assert reply.json()["error"]["code"] == 1007
    assert sid not in b.sessions and counts(b) == {"127.0.0.1": 1}
