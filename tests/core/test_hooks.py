"""The node's one list of session hooks (pushengine.core.hooks): every event
reaches every hook that listens once, a failing hook fails neither the
caller nor the others, the Deferreds hooks return are awaited, and expiry
goes through the same list as the API's events."""
from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, fail
from twisted.trial.unittest import SynchronousTestCase

from pushengine.core.hooks import EVENTS, Hooks, SessionHooksBase
from tests.core.helpers import make_engine
from tests.http.harness import ClockNode, Http, Rpc

VIEWS = {"Streams": {"type": "Stream", "order": "id", "limit": {"default": 5}}}


class Recorder(SessionHooksBase):
    """Listens to every event and writes down what it heard."""

    def __init__(self, heard: list) -> None:
        self.heard = heard

    def created(self, session: Any) -> None:
        self.heard.append((self, "created", session))

    def authorized(self, session: Any, claims: Any) -> None:
        self.heard.append((self, "authorized", session, dict(claims)))

    def deauthorized(self, session: Any) -> None:
        self.heard.append((self, "deauthorized", session))

    def changed(self, session: Any) -> None:
        self.heard.append((self, "changed", session))

    def polled(self, session: Any) -> None:
        self.heard.append((self, "polled", session))

    def detached(self, session: Any) -> None:
        self.heard.append((self, "detached", session))

    def destroyed(self, session: Any) -> None:
        self.heard.append((self, "destroyed", session))

    def expired(self, session: Any) -> None:
        self.heard.append((self, "expired", session))


class Broken(SessionHooksBase):
    def created(self, session: Any) -> None:
        raise RuntimeError("created broke")

    def polled(self, session: Any) -> None:
        raise RuntimeError("polled broke")

    def expired(self, session: Any) -> None:
        raise RuntimeError("expired broke")


class OnlyChanged(SessionHooksBase):
    def __init__(self) -> None:
        self.changes = 0

    def changed(self, session: Any) -> None:
        self.changes += 1


class HooksTests(SynchronousTestCase):
    def test_each_event_reaches_each_hook_once_in_order(self) -> None:
        heard: list = []
        a, b = Recorder(heard), Recorder(heard)
        hooks = Hooks([a, b])
        s = object()
        hooks.created(s)
        hooks.authorized(s, {"sub": "1"})
        hooks.deauthorized(s)
        hooks.changed(s)
        hooks.polled(s)
        hooks.detached(s)
        hooks.destroyed(s)
        hooks.expired(s)
        self.assertEqual([(h, e) for h, e, *_ in heard],
                         [(h, e) for e in EVENTS for h in (a, b)])
        self.assertEqual(heard[2][3], {"sub": "1"})

    def test_a_hook_is_added_once(self) -> None:
        hooks = Hooks()
        hook = OnlyChanged()
        hooks.add(hook)
        self.assertRaises(ValueError, hooks.add, hook)
        self.assertEqual(list(hooks), [hook])
        self.assertIn(hook, hooks)

    def test_only_the_hooks_that_override_an_event_are_called(self) -> None:
        quiet, heard = OnlyChanged(), []
        recorder = Recorder(heard)
        hooks = Hooks([quiet, recorder])
        self.assertEqual(hooks.listening("polled"), [recorder])
        self.assertEqual(hooks.listening("changed"), [quiet, recorder])
        hooks.changed(object())
        self.assertEqual(quiet.changes, 1)

    def test_a_hook_outside_the_base_class_hears_everything(self) -> None:
        calls = []

        class Plain:
            def __getattr__(self, name: str) -> Any:
                return lambda *args: calls.append(name)
        hooks = Hooks([Plain()])     # type: ignore[list-item]
        hooks.polled(object())
        hooks.authorized(object(), {})
        self.assertEqual(calls, ["polled", "authorized"])

    def test_a_failing_hook_fails_neither_the_caller_nor_the_others(self) -> None:
        heard: list = []
        recorder = Recorder(heard)
        hooks = Hooks([Broken(), recorder])
        s = object()
        self.assertEqual(hooks.created(s), [])
        hooks.polled(s)
        hooks.expired(s)
        self.assertEqual([e for _, e, _ in heard], ["created", "polled", "expired"])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 3)

    def test_the_deferreds_hooks_return_are_given_to_the_caller(self) -> None:
        held: Deferred = Deferred()

        class Slow(SessionHooksBase):
            def created(self, session: Any) -> Deferred:
                return held

        class Failing(SessionHooksBase):
            def created(self, session: Any) -> Deferred:
                return fail(RuntimeError("write failed"))
        waits = Hooks([Slow(), Failing(), OnlyChanged()]).created(object())
        self.assertEqual(len(waits), 2)
        self.assertFalse(waits[0].called)
        held.callback("written")
        self.assertEqual(self.successResultOf(waits[0]), "written")
        self.assertIsNone(self.successResultOf(waits[1]))       # logged, not raised
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)


class ManagerExpiryTests(SynchronousTestCase):
    def test_expiry_goes_through_the_same_hooks(self) -> None:
        heard: list = []
        hooks = Hooks([Recorder(heard), Broken()])
        engine, clock = make_engine(VIEWS, hooks=hooks, session_timeout=10)
        self.assertIs(engine.sessions.hooks, hooks)
        s = engine.sessions.create()
        clock.advance(11)
        self.assertNotIn(s.id, engine.sessions.sessions)
        self.assertEqual([(e, x) for _, e, x in heard], [("expired", s)])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)


class NodeTests(SynchronousTestCase):
    def test_the_api_and_the_manager_share_the_nodes_hooks(self) -> None:
        node = ClockNode("--session-timeout", "10")
        self.assertIs(node.api.hooks, node.hooks)
        self.assertIs(node.engine.sessions.hooks, node.hooks)
        heard: list = []
        recorder = Recorder(heard)
        node.hooks.add(recorder)
        rpc = Rpc(Http(node.web.resource()))
        a = rpc("session.create")
        rpc("session.get_events", a, 0)
        rpc("session.destroy", a)
        b = rpc("session.create")
        node.clock.advance(11)
        self.assertEqual([(e, x.id) for _, e, x in heard],
                         [("created", a), ("polled", a), ("destroyed", a),
                          ("created", b), ("expired", b)])

    def test_each_hook_of_the_node_is_registered_once(self) -> None:
        node = ClockNode("--webhook-url", "http://backend.test/hook")
        hooks = list(node.hooks)
        self.assertEqual(len(hooks), len({id(h) for h in hooks}))
        kinds = {type(h).__name__ for h in hooks}
        self.assertLessEqual({"UniqueHooks", "SegmentMembership", "WebhookHooks", "Presence"},
                             kinds)
        # nothing of these listens to polls but the Bloom figures
        self.assertEqual([type(h).__name__ for h in node.hooks.listening("polled")],
                         ["UniqueHooks"])
